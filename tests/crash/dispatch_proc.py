"""A writer with the concurrent dispatcher in a child process: ``python dispatch_proc.py
write ROOT SEED``.

Opens the store of :func:`dispatch_config` (ASYNC_FLUSH, ``enableBuildConsumeQueue
Concurrently``, LMQ multi-dispatch, key index, a BatchCQ topic), slows every round's
preparation by a random 0-5 ms (fault injection, so rounds are always in flight and
finish preparing out of order), prints ``ready``, then writes from two threads until
killed: single puts, batches, LMQ fan-outs and inner batches with unique keyed bodies.
Every 10 ms it prints ``lag BYTES`` (confirmed bytes not yet dispatched), so the parent
can kill it mid-dispatch.

Reuses the bodies and segment sizes of :mod:`store_proc`.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import encode_properties
from tidemq.store.concurrent_dispatch import ConcurrentDispatcher
from tidemq.store.config import StoreConfig
from tidemq.store.dispatch import DispatchBatch
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.types import FlushDiskType

if __package__:
    from .store_proc import body_for, crash_config
else:  # run as a script in the child process
    sys.path.insert(0, str(Path(__file__).parent))
    from store_proc import body_for, crash_config

CLASSIC = "Classic"
CLASSIC_QUEUES = 16
BATCH = "Batched"
BATCH_QUEUES = 3
POOL = [f"%LMQ%d{i}" for i in range(12)]
THREADS = 2


def dispatch_config(root: str | Path, concurrent: bool = True) -> StoreConfig:
    return crash_config(root).replace(
        flush_disk_type=FlushDiskType.ASYNC_FLUSH, enable_lmq=True, enable_multi_dispatch=True,
        enable_build_consume_queue_concurrently=concurrent, dispatch_workers=3,
        dispatch_round_records=16, dispatch_ring_size=8)


def open_store(root: str | Path, concurrent: bool = True) -> MessageStore:
    store = MessageStore(dispatch_config(root, concurrent))
    store.set_batch_topic(BATCH)
    return store


def message(ident: int, lmqs: list[str] | None = None) -> MessageInput:
    props = {"TAGS": f"t{ident % 3}", "UNIQ_KEY": f"ID{ident:08d}"}
    if lmqs:
        props["INNER_MULTI_DISPATCH"] = ",".join(lmqs)
    return MessageInput(body_for(ident), encode_properties(props),
                        tags_code=tags_code(f"t{ident % 3}"), keys=(f"ID{ident:08d}",))


def slow_prepare() -> None:
    rng = random.Random()
    original = ConcurrentDispatcher._prepare

    def delayed(self: ConcurrentDispatcher, seq: int, batches: list[DispatchBatch]) -> Any:
        time.sleep(rng.uniform(0, 0.005))
        return original(self, seq, batches)

    ConcurrentDispatcher._prepare = delayed  # type: ignore[method-assign]


def write(root: str, seed: int) -> None:
    slow_prepare()
    store = open_store(root)
    store.start()
    print("ready", flush=True)
    ids = iter(range(1 << 62))
    ids_lock = threading.Lock()

    def take(n: int) -> list[int]:
        with ids_lock:
            return [next(ids) for _ in range(n)]

    def producer(k: int) -> None:
        rng = random.Random(seed * 31 + k)
        while True:
            kind = rng.random()
            if kind < 0.3:
                store.put(CLASSIC, rng.randrange(CLASSIC_QUEUES), message(take(1)[0]))
            elif kind < 0.5:
                store.put_batch(CLASSIC, rng.randrange(CLASSIC_QUEUES),
                                [message(i) for i in take(rng.randint(2, 6))])
            elif kind < 0.8:
                names = rng.sample(POOL, rng.randint(1, 4))
                store.put_multi_dispatch(CLASSIC, rng.randrange(CLASSIC_QUEUES),
                                         message(take(1)[0], names), names)
            elif kind < 0.9:
                ident = take(1)[0]
                store.put_inner_batch(BATCH, rng.randrange(BATCH_QUEUES), body_for(ident),
                                      encode_properties({"UNIQ_KEY": f"ID{ident:08d}"}),
                                      rng.randint(1, 5), keys=(f"ID{ident:08d}",))
            else:
                store.put_batch(BATCH, rng.randrange(BATCH_QUEUES),
                                [message(i) for i in take(rng.randint(1, 3))])

    for k in range(THREADS):
        threading.Thread(target=producer, args=(k,), daemon=True).start()
    while True:
        time.sleep(0.01)
        print(f"lag {store.dispatch_lag()[0]}", flush=True)


def main(argv: list[str]) -> None:
    command, root, *rest = argv
    if command != "write":
        raise SystemExit(f"unknown command {command!r}")
    write(root, int(rest[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
