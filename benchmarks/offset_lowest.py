"""Retention's lowest committed offset per queue on a large offsets table, in CPU time.

Builds an offsets table of ``--groups`` groups, each committed on every queue of
``--topics`` topics of ``--queues`` queues (by default 1,680,000 offsets: the second
layout of ``loop_stalls.py``), and times ``OffsetManager.lowest_by_queue`` (what the
retention thread runs each pass) ``--repeat`` times; prints the median thread CPU time.
``TIDEMQ_NO_NATIVE=1`` times the pure-Python twin instead of the compiled slices::

    .venv/bin/python benchmarks/offset_lowest.py --repeat 5
    TIDEMQ_NO_NATIVE=1 .venv/bin/python benchmarks/offset_lowest.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tidemq.broker.offset_lowest import NATIVE_LOWEST
from tidemq.broker.offsets import OffsetManager
from tidemq.store.layout import StoreLayout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=21)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        offsets = OffsetManager(StoreLayout(Path(tmp)))
        offsets.table = {
            f"topic-{t}@group-{g}": {q: (g * 7 + q) % 1000 for q in range(args.queues)}
            for g in range(args.groups) for t in range(args.topics)}
        entries = args.groups * args.topics * args.queues
        times = []
        for _ in range(args.repeat):
            began = time.thread_time()
            lowest = offsets.lowest_by_queue()
            times.append(time.thread_time() - began)
    print(f"{'compiled' if NATIVE_LOWEST else 'twin'}: {entries} offsets, {len(lowest)} "
          f"queues: {statistics.median(times) * 1000:.1f} ms CPU (median of {args.repeat})")


if __name__ == "__main__":
    main()
