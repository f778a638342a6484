"""The first read of records written before the store started, and the second one.

Records from before a start were checked when written, but may have rotted on disk
since; the read path checks them (body CRC, lengths, PHYSICALOFFSET, UTF-8 properties)
the first time a read asks for them. This script writes ``--messages`` records of
``--body`` bytes round robin to ``--queues`` queues of one topic, stops the store
cleanly, starts it again and reads every queue to its end in pulls of ``--pull``
messages, round robin over the queues, twice: the first read pays for the checks, the
second finds the records checked (``--copy`` also reads every byte of each answer, as
sending it does). Each phase's wall time, rate and CPU time (of the
reading thread: steadier than the wall time on a busy machine) are printed; the store is
built once and read ``--repeat`` times (a new start each time).

``--rebuild`` measures instead the start that rebuilds every consume queue from the
whole log (the queues deleted, the checkpoint gone and the abort marker left, as after a
crash that lost them): the recovery scan checks every record as it goes.

``--walks`` times the two walks of that rebuild on their own, in one process, ``--repeat``
times each, alternating: the plan's scan (which validates every record), and the
re-dispatch walk that reads each record's fields for its queue entry, both as a second
checking scan and as the replay of what the plan validated (what recovery does).

    .venv/bin/python benchmarks/first_read.py --messages 200000 --repeat 1
    .venv/bin/python benchmarks/first_read.py --messages 200000 --repeat 3 --rebuild
    .venv/bin/python benchmarks/first_read.py --messages 200000 --repeat 7 --walks

The first two modes use only the store's public interface, so they also run against an
older checkout (``PYTHONPATH=<checkout>/src``), alternating with this one to compare.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from tidemq.formats.properties import encode_properties
from tidemq.store.config import StoreConfig
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore

TOPIC = "FirstRead"


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), message_index_enable=False)


def build(root: Path, messages: int, queues: int, body: int) -> None:
    with MessageStore(_config(root)) as store:
        for i in range(messages):
            props = encode_properties({"UNIQ_KEY": f"K{i:012d}", "TAGS": "t"})
            store.put(TOPIC, i % queues, MessageInput(b"%012d" % i + bytes(body - 12), props))
        store.wait_dispatched()


def read_all(store: MessageStore, queues: int, pull: int, copy: bool = False) -> int:
    offsets = [0] * queues
    ends = [store.max_offset(TOPIC, q) for q in range(queues)]
    count = 0
    live = set(range(queues))
    sink = bytearray(1 << 20)
    while live:
        for q in sorted(live):
            result = store.get(TOPIC, q, offsets[q], max_count=pull)
            if copy:  # what sending the answer does: read every byte of it once
                for buf in result.buffers:
                    sink[: len(buf)] = buf
            count += result.message_count
            offsets[q] = result.next_begin_offset
            if offsets[q] >= ends[q]:
                live.discard(q)
    return count


def rebuild(root: Path, messages: int, queues: int) -> tuple[float, float]:
    """Wall and CPU seconds (of the starting thread, which recovers) of a start that
    rebuilds every consume queue from the whole log."""
    layout = StoreLayout(root)
    shutil.rmtree(layout.consumequeue_dir, ignore_errors=True)
    layout.checkpoint_file.unlink(missing_ok=True)
    layout.abort_file.touch()
    store = MessageStore(_config(root))
    started, cpu = time.perf_counter(), time.thread_time()
    store.start()
    took = time.perf_counter() - started
    cpu = time.thread_time() - cpu
    try:
        if sum(store.max_offset(TOPIC, q) for q in range(queues)) < messages:
            raise SystemExit("the rebuild lost messages")
    finally:
        store.shutdown()
    return took, cpu


def walks(root: Path, repeat: int) -> None:
    """CPU seconds (min and median of ``repeat``) of the plan's scan and of the
    re-dispatch walk, checking again or replaying."""
    from tidemq.formats.record import Record
    from tidemq.store.commitlog import CommitLog
    from tidemq.store.log_scan import Damage, replay, scan
    from tidemq.store.recovery import dispatch_batch_for

    log = CommitLog(StoreLayout(root), _config(root).mapped_file_size_commit_log,
                    preallocate=False)
    log.load()

    def fields(rec: Record, offset: int) -> None:
        dispatch_batch_for(rec, offset)

    def damage(_d: Damage) -> None:
        pass

    times: dict[str, list[float]] = {"plan scan": [], "re-dispatch, checking again": [],
                                     "re-dispatch, replay": []}
    try:
        for _ in range(repeat):
            cpu = time.thread_time()
            found = scan(log.segments, 0)
            times["plan scan"].append(time.thread_time() - cpu)
            cpu = time.thread_time()
            scan(log.segments, 0, on_record=fields, on_damage=damage)
            times["re-dispatch, checking again"].append(time.thread_time() - cpu)
            cpu = time.thread_time()
            replay(log.segments, 0, found.end, found.damaged, fields, damage)
            times["re-dispatch, replay"].append(time.thread_time() - cpu)
    finally:
        log.close()
    for name, values in times.items():
        values.sort()
        print(f"{name}: min {values[0]:.3f} s, median {values[len(values) // 2]:.3f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--body", type=int, default=256,
                        help="body bytes (records are about 75 bytes more)")
    parser.add_argument("--pull", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--copy", action="store_true",
                        help="copy every answer's bytes, as sending it would (the first "
                             "read's check brings them into the CPU's cache, which a read "
                             "that only makes views of them does not)")
    parser.add_argument("--dir", default=None, help="parent of the store (default: a temp dir)")
    parser.add_argument("--rebuild", action="store_true",
                        help="time the start that rebuilds the consume queues instead")
    parser.add_argument("--walks", action="store_true",
                        help="time the rebuild's two walks of the log on their own instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidemq-first-read-", dir=args.dir) as tmp:
        root = Path(tmp)
        build(root, args.messages, args.queues, args.body)
        if args.walks:
            walks(root, args.repeat)
            return
        if args.rebuild:
            for _ in range(args.repeat):
                took, cpu = rebuild(root, args.messages, args.queues)
                print(f"rebuild {took:.3f} s ({cpu:.3f} s CPU)")
            return
        for _ in range(args.repeat):
            with MessageStore(_config(root)) as store:
                times, cpus = [], []
                for _phase in ("first", "second"):
                    started, cpu = time.perf_counter(), time.thread_time()
                    n = read_all(store, args.queues, args.pull, args.copy)
                    cpus.append(time.thread_time() - cpu)
                    times.append(time.perf_counter() - started)
                    if n != args.messages:
                        raise SystemExit(f"read {n} messages of {args.messages}")
            (first, second), (cpu1, cpu2) = times, cpus
            print(f"first read {first:.3f} s ({n / first:,.0f} msg/s, {cpu1:.3f} s CPU), "
                  f"second read {second:.3f} s ({n / second:,.0f} msg/s, {cpu2:.3f} s CPU)")


if __name__ == "__main__":
    main()
