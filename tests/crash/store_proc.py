"""A store in a child process, for crash tests: ``python store_proc.py <command> ...``.

Commands:

``write ROOT ACKS SEED FIRST_ID``
    Append messages with unique bodies to three queues until killed. After each durable
    acknowledgement (SYNC_FLUSH) one line ``queue queue_offset body_id`` per message is
    appended to ``ACKS`` with a single ``write``. Prints ``ready`` once the store is open.
``fill ROOT COUNT``
    Append ``COUNT`` messages to queue ("T", 0), wait until all are durable and visible,
    print one JSON line ``[[queue_offset, phys, size], ...]`` and ``kill -9`` itself.
``recover ROOT``
    Open the store (which runs recovery), print the recovery report as JSON, write nothing
    and ``kill -9`` itself.
``cut-dying ROOT STEP``
    Open the store with a cut requested, and ``kill -9`` itself at ``STEP`` of it:
    ``keeping`` (the cut records written to the kept file's temporary name, not renamed),
    ``kept`` (the kept file in place and noted, nothing cut) or ``cutting`` (the later
    segments deleted, the tail of the first one not yet zeroed).
``running-cut-dying ROOT OFFSET STEP``
    Open the store as a replica and cut its running log at ``OFFSET`` as a broker on an
    event loop does (decided, kept in a thread, then cut), ``kill -9`` at ``STEP`` as
    ``cut-dying``.

With the one argument ``--args-from-stdin`` it imports, then reads the command as a JSON
line from stdin (:mod:`ahead`: started ahead of its turn).

Imported by the tests for :func:`crash_config` and :func:`body_for`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import sys
from pathlib import Path

from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import encode_properties
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore, PutStatus
from tidemq.types import FlushDiskType

TOPIC = "Crash"
QUEUES = 3
SEGMENT = 16 * 1024
CQ_FILE = 20 * 32


def crash_config(root: str | Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEGMENT,
        mapped_file_size_consume_queue=CQ_FILE,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        flush_interval_consume_queue=50,  # checkpoints often, so recovery starts vary
    )


def body_for(body_id: int) -> bytes:
    """A unique body whose content is a function of its id (1..600 bytes of payload)."""
    rng = random.Random(body_id)
    return f"{body_id:08d}:".encode() + rng.randbytes(rng.randint(1, 600))


def body_id(body: bytes) -> int:
    return int(body[:8])


def message(body_id_: int) -> MessageInput:
    tags = f"T{body_id_ % 3}"
    props = encode_properties({"TAGS": tags, "UNIQ_KEY": f"ID{body_id_:08d}"})
    return MessageInput(body_for(body_id_), props, tags_code=tags_code(tags))


def write(root: str, acks: str, seed: int, first_id: int) -> None:
    rng = random.Random(seed)
    store = MessageStore(crash_config(root))
    store.start()
    print("ready", flush=True)
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    next_id = first_id
    while True:
        queue_id = rng.randrange(QUEUES)
        count = rng.choice((1, 1, 1, 2, 5))
        ids = list(range(next_id, next_id + count))
        next_id += count
        if count == 1 and rng.random() < 0.5:
            result = store.put(TOPIC, queue_id, message(ids[0]))
        else:
            result = store.put_batch(TOPIC, queue_id, [message(i) for i in ids])
        if result.wait_durable(30) is PutStatus.PUT_OK:
            lines = "".join(f"{queue_id} {result.queue_offset + k} {i}\n"
                            for k, i in enumerate(ids))
            os.write(fd, lines.encode())


def fill(root: str, count: int) -> None:
    store = MessageStore(crash_config(root))
    store.start()
    out = []
    for i in range(count):
        result = store.put(TOPIC, 0, message(i))
        assert result.wait_durable(30) is PutStatus.PUT_OK
        out.append([result.queue_offset, result.phys_offsets[0], result.sizes[0]])
    assert store.wait_dispatched()
    print(json.dumps(out), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def recover(root: str) -> None:
    store = MessageStore(crash_config(root))
    report = store.start()
    print(json.dumps(dataclasses.asdict(report)), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def cut_dying(root: str, step: str) -> None:
    _dying_at(step)
    MessageStore(crash_config(root)).start()
    raise SystemExit(f"the store started without reaching {step!r}")


def running_cut_dying(root: str, offset: int, step: str) -> None:
    import threading

    store = MessageStore(crash_config(root))
    store.start()
    store.replica = True
    _dying_at(step)
    cut = store.begin_cut(offset)
    assert cut is not None
    keeper = threading.Thread(target=store.keep_cut, args=(cut,))
    keeper.start()
    keeper.join()
    store.finish_cut(cut)
    raise SystemExit(f"the cut was made without reaching {step!r}")


def _dying_at(step: str) -> None:
    """Arm a ``kill -9`` at ``step`` of keeping or making a cut."""
    from tidemq.store import commitlog, kept_cuts, truncation

    def die(*_: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if step == "keeping":
        kept_cuts.os = _Dying(os, "replace", die)  # type: ignore[attr-defined]
    elif step == "kept":
        note = truncation.note_kept

        def noted(*args: object) -> None:
            note(*args)  # type: ignore[arg-type]
            die()
        truncation.note_kept = noted  # type: ignore[assignment]
    elif step == "cutting":
        cut = commitlog.CommitLog.truncate

        def cutting(self: commitlog.CommitLog, offset: int) -> None:
            cut(self, offset)
            die()
        commitlog.CommitLog.truncate = cutting  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown step {step!r}")


class _Dying:
    """A module whose attribute ``name`` is replaced by ``fault``; the rest is the module's."""

    def __init__(self, module: object, name: str, fault: object) -> None:
        self._module, self._name, self._fault = module, name, fault

    def __getattr__(self, attr: str) -> object:
        return self._fault if attr == self._name else getattr(self._module, attr)


def main(argv: list[str]) -> None:
    command, root, *rest = argv
    if command == "write":
        write(root, rest[0], int(rest[1]), int(rest[2]))
    elif command == "fill":
        fill(root, int(rest[0]))
    elif command == "recover":
        recover(root)
    elif command == "cut-dying":
        cut_dying(root, rest[0])
    elif command == "running-cut-dying":
        running_cut_dying(root, int(rest[0]), rest[1])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    from ahead import args_from_stdin  # this directory: the script's own

    main(args_from_stdin(sys.argv[1:]))
