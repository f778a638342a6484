"""An LMQ writer in a child process, for kill -9 tests: ``python lmq_proc.py write ...``.

``write ROOT ACKS SEED FIRST_ID FLUSH CONCURRENT [HOLD]``
    Open the store of :func:`lmq_config` (``FLUSH`` is SYNC_FLUSH or ASYNC_FLUSH,
    ``CONCURRENT`` 0/1 picks the dispatcher; ``HOLD`` 1 holds the start's walk of the
    LMQ store after its first two queues for good, with a cache of four queues, so
    that everything runs while the walk has not reached most queues), print ``ready``,
    then let four threads fan messages with unique bodies out to 1-5 LMQs of a pool of
    24, over three parent queues, until killed: two one message a put, two up to four
    with one ``put_many``. After each acknowledgement (durable under SYNC_FLUSH,
    appended under ASYNC_FLUSH -- both survive a process crash) one line
    ``body_id name:offset ...`` is appended to ``ACKS`` with a single ``write``.

With the one argument ``--args-from-stdin`` it imports, then reads the command as a JSON
line from stdin (:mod:`ahead`: started ahead of its turn).

Reuses the body and store layout of :mod:`store_proc` (the classic kill -9 harness).
"""

from __future__ import annotations

import os
import random
import sys
import threading
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from tidemq.formats.properties import encode_properties
from tidemq.store.config import StoreConfig
from tidemq.store.lmq_store import LmqStore
from tidemq.store.message_store import MessageInput, MessageStore, PutResult, PutStatus
from tidemq.types import FlushDiskType

if __package__:
    from .store_proc import QUEUES, TOPIC, body_for, crash_config
else:  # run as a script in the child process
    sys.path.insert(0, str(Path(__file__).parent))
    from store_proc import QUEUES, TOPIC, body_for, crash_config

POOL = [f"%LMQ%k{i}" for i in range(24)]
THREADS = 4


def lmq_config(root: str | Path, flush: str = "SYNC_FLUSH",
               concurrent: bool = False) -> StoreConfig:
    return crash_config(root).replace(
        enable_lmq=True, enable_multi_dispatch=True, flush_disk_type=FlushDiskType(flush),
        enable_build_consume_queue_concurrently=concurrent)


def hold_walk() -> None:
    """Hold every LMQ store's start walk after its first two queues, until the kill."""
    walk_metas = LmqStore._walk_metas
    never = threading.Event()

    def held(store: LmqStore) -> Iterator[tuple[str, list[int]]]:
        rows = walk_metas(store)
        yield from islice(rows, 2)
        never.wait()
        yield from rows

    LmqStore._walk_metas = held  # type: ignore[method-assign,assignment]


def write(root: str, acks: str, seed: int, first_id: int, flush: str,
          concurrent: bool, hold: bool = False) -> None:
    config = lmq_config(root, flush, concurrent)
    if hold:
        hold_walk()
        config = config.replace(lmq_cached_queues=4)
    store = MessageStore(config)
    store.start()
    print("ready", flush=True)
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    ids = iter(range(first_id, 1 << 62))
    ids_lock = threading.Lock()

    def acknowledge(body_id: int, names: list[str], result: PutResult) -> None:
        if result.wait_durable(30) is not PutStatus.PUT_OK:
            return
        view = store.read_record(result.phys_offsets[0])
        assert view is not None
        offsets = bytes(view).split(b"INNER_MULTI_QUEUE_OFFSET\x01")[1].split(b"\x02")[0]
        pairs = " ".join(f"{n}:{o}" for n, o in zip(names, offsets.decode().split(","),
                                                    strict=True))
        os.write(fd, f"{body_id} {pairs}\n".encode())

    def fan_out(rng: random.Random) -> tuple[int, list[str], MessageInput]:
        with ids_lock:
            body_id = next(ids)
        names = rng.sample(POOL, rng.randint(1, 5))
        props = encode_properties({"INNER_MULTI_DISPATCH": ",".join(names),
                                   "UNIQ_KEY": f"ID{body_id:08d}"})
        return body_id, names, MessageInput(body_for(body_id), props)

    def producer(k: int) -> None:
        """Odd threads store 1-4 fan-outs with one put_many, even ones one at a time."""
        rng = random.Random(seed * 31 + k)
        while True:
            if k % 2:
                made = [fan_out(rng) for _ in range(rng.randint(1, 4))]
                results = store.put_many(
                    TOPIC, [(rng.randrange(QUEUES), m, 0, 0) for _b, _n, m in made],
                    targets=[names for _b, names, _m in made])
                for (body_id, names, _m), result in zip(made, results, strict=True):
                    assert isinstance(result, PutResult), result
                    acknowledge(body_id, names, result)
                continue
            body_id, names, msg = fan_out(rng)
            acknowledge(body_id, names, store.put_multi_dispatch(
                TOPIC, rng.randrange(QUEUES), msg, names))

    threads = [threading.Thread(target=producer, args=(k,), daemon=True)
               for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main(argv: list[str]) -> None:
    command, root, *rest = argv
    if command != "write":
        raise SystemExit(f"unknown command {command!r}")
    write(root, rest[0], int(rest[1]), int(rest[2]), rest[3], rest[4] == "1",
          rest[5:6] == ["1"])


if __name__ == "__main__":
    from ahead import args_from_stdin  # this directory: the script's own

    main(args_from_stdin(sys.argv[1:]))
