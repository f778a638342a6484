"""What an LMQ entry costs RocksDB, by memtable size (RIP-28 light message queues).

Writes what the LMQ store's dispatcher writes for a fan-out load -- rounds of
``--round`` ``E`` keys (one per entry: ``E name 0x00 offset``, a 28-byte value), each
naming a random queue of ``--queues``, sorted as the store sorts a round -- into a
RocksDB opened as the LMQ store opens it (no WAL, two background jobs), once per
``--write-buffer-mib`` value, alternating ``--repeat`` times. Reports the process's CPU
time per key (the writing thread and RocksDB's flushes and compactions, all threads)
for each size: the memtable's skiplist insert misses the CPU's caches more the larger
the memtable, while a smaller one flushes and compacts more often.

    .venv/bin/python benchmarks/lmq_memtable.py --write-buffer-mib 64 8 --repeat 3
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import struct
import tempfile
import time

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

_Q = struct.Struct(">q")


def _rounds(queues: int, rounds: int, per_round: int, seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    names = [b"E%%LMQ%%dev%07d\x00" % k for k in range(queues)]
    offsets = [0] * queues
    out = []
    for _ in range(rounds):
        keys = []
        for k in rng.sample(range(queues), per_round):
            keys.append(names[k] + _Q.pack(offsets[k]))
            offsets[k] += 1
        keys.sort()
        out.append(keys)
    return out


def _cpu_ns_per_key(mib: int, rounds: list[list[bytes]], settle: float) -> float:
    path = tempfile.mkdtemp(prefix="tidemq-memtable-")
    try:
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_max_background_jobs(2)
        opts.set_write_buffer_size(mib << 20)
        db = Rdict(path, opts)
        wo = WriteOptions()
        wo.disable_wal = True  # type: ignore[method-assign,assignment]  # a property at runtime
        db.set_write_options(wo)
        value = bytes(28)
        c0 = time.process_time()
        for keys in rounds:
            wb = WriteBatch(raw_mode=True)
            for key in keys:
                wb.put(key, value)
            db.write(wb)
        time.sleep(settle)  # the last flush or compaction it started, counted too
        cpu = time.process_time() - c0
        db.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return cpu / sum(map(len, rounds)) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2500)
    parser.add_argument("--round", type=int, default=800, help="keys per write batch")
    parser.add_argument("--write-buffer-mib", type=int, nargs="+", default=[64, 8])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds of background work counted after the last write")
    args = parser.parse_args()
    rounds = _rounds(args.queues, args.rounds, args.round, 1)
    results: dict[int, list[float]] = {mib: [] for mib in args.write_buffer_mib}
    for _ in range(args.repeat):
        for mib in args.write_buffer_mib:
            results[mib].append(_cpu_ns_per_key(mib, rounds, args.settle))
    for mib, runs in results.items():
        print(f"write buffer {mib:4d} MiB: {statistics.median(runs):6,.0f} ns CPU/key "
              f"(runs {', '.join(f'{r:,.0f}' for r in runs)})")


if __name__ == "__main__":
    main()
