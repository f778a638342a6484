"""The first read of records written before the store started, and the second one.

Records from before a start were checked when written, but may have rotted on disk
since; the read path checks them (body CRC, lengths, PHYSICALOFFSET, UTF-8 properties)
the first time a read asks for them. This script writes ``--messages`` records of
``--body`` bytes round robin to ``--queues`` queues of one topic, stops the store
cleanly, starts it again and reads every queue to its end in pulls of ``--pull``
messages, round robin over the queues, twice: the first read pays for the checks, the
second finds the records checked. Each phase's wall time, rate and CPU time (of the
reading thread: steadier than the wall time on a busy machine) are printed; the store is
built once and read ``--repeat`` times (a new start each time).

    .venv/bin/python benchmarks/first_read.py --messages 200000 --repeat 1
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tidemq.formats.properties import encode_properties
from tidemq.store.config import StoreConfig
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


def read_all(store: MessageStore, queues: int, pull: int) -> int:
    offsets = [0] * queues
    ends = [store.max_offset(TOPIC, q) for q in range(queues)]
    count = 0
    live = set(range(queues))
    while live:
        for q in sorted(live):
            result = store.get(TOPIC, q, offsets[q], max_count=pull)
            count += result.message_count
            offsets[q] = result.next_begin_offset
            if offsets[q] >= ends[q]:
                live.discard(q)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--body", type=int, default=256,
                        help="body bytes (records are about 75 bytes more)")
    parser.add_argument("--pull", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dir", default=None, help="parent of the store (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidemq-first-read-", dir=args.dir) as tmp:
        root = Path(tmp)
        build(root, args.messages, args.queues, args.body)
        for _ in range(args.repeat):
            with MessageStore(_config(root)) as store:
                times, cpus = [], []
                for _phase in ("first", "second"):
                    started, cpu = time.perf_counter(), time.thread_time()
                    n = read_all(store, args.queues, args.pull)
                    cpus.append(time.thread_time() - cpu)
                    times.append(time.perf_counter() - started)
                    if n != args.messages:
                        raise SystemExit(f"read {n} messages of {args.messages}")
            (first, second), (cpu1, cpu2) = times, cpus
            print(f"first read {first:.3f} s ({n / first:,.0f} msg/s, {cpu1:.3f} s CPU), "
                  f"second read {second:.3f} s ({n / second:,.0f} msg/s, {cpu2:.3f} s CPU)")


if __name__ == "__main__":
    main()
