"""What one trim of the LMQ store's cache costs at a million LMQs (RIP-28).

Past ``lmqCachedQueues`` the LMQ store drops the longest-cached quarter of its cache into
the table of known LMQs (``LmqStore._trim``); at 1,000,000 LMQs sent to at random about
eight of a fan-out's ten LMQs are not cached, so the cache turns over and the dispatcher
trims every few thousand messages. This sets up the store as such a broker has it -- a
cache of ``--cached`` queues, the table holding the rest of ``--lmqs``, the appender
holding offsets for 200,000 queues in its two generations -- fills the cache past its
bound and times ``--trims`` trims, CPU time of the process (nothing else runs in it).

    .venv/bin/python benchmarks/lmq_trim.py --trims 6
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tidemq.store.lmq_next import LmqNextOffsets
from tidemq.store.lmq_store import LmqStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lmqs", type=int, default=1_000_000)
    parser.add_argument("--cached", type=int, default=200_000)
    parser.add_argument("--trims", type=int, default=6)
    args = parser.parse_args()
    names = [f"%LMQ%dev{k:07d}" for k in range(args.lmqs)]
    took: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        lmq = LmqStore(Path(tmp) / "lmq", cached_queues=args.cached,
                       known_queues=2 * args.lmqs)
        try:
            offsets = LmqNextOffsets()
            for name in names[args.lmqs // 2: args.lmqs // 2 + 100_000]:
                offsets.set(name, 3)
            offsets.age(1 << 62, 1 << 62)
            for name in names[args.lmqs // 2 + 100_000: args.lmqs // 2 + 200_000]:
                offsets.set(name, 3)
            lmq.pinned = offsets.generations
            lmq._table.put_many(names[args.cached:], [[1, 0, 0]] * (args.lmqs - args.cached))
            cache = lmq._meta
            at = 0
            for _ in range(args.trims):
                while len(cache) <= args.cached:  # past the bound, as dispatch leaves it
                    cache.setdefault(names[at % args.lmqs], [1, 0, 0])
                    at += 1
                lmq._trim_above = args.cached
                before = time.process_time()
                lmq._trim()
                took.append(time.process_time() - before)
        finally:
            lmq.close()
    print(f"trim CPU: median {statistics.median(took) * 1e3:.1f} ms "
          f"({' / '.join(f'{t * 1e3:.0f}' for t in took)})")


if __name__ == "__main__":
    main()
