"""What an LMQ entry costs RocksDB, by memtable size (RIP-28 light message queues).

Writes what the LMQ store's dispatcher writes for a fan-out load -- rounds of
``--round`` ``E`` keys (one per entry: ``E name 0x00 offset``, a 28-byte value), each
naming a random queue of ``--queues``, sorted as the store sorts a round -- into a
RocksDB opened as the LMQ store opens it (no WAL, two background jobs), once per
``--write-buffer-mib`` value, alternating ``--repeat`` times. Reports CPU time per key
for each size, of the writing thread (the dispatcher's, which holds the GIL while
RocksDB inserts) and of the whole process (RocksDB's flushes and compactions too, until
those the writes left are done): the memtable's skiplist insert misses the CPU's caches
more the larger the memtable, while a smaller one flushes and compacts more often.

    .venv/bin/python benchmarks/lmq_memtable.py --write-buffer-mib 64 8 --repeat 3
"""

from __future__ import annotations

import argparse
import random
import resource
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


def _busy(db: Rdict) -> bool:
    """Whether RocksDB still has flushes or compactions to run or running."""
    return any(db.property_int_value(name) for name in (
        "rocksdb.num-running-flushes", "rocksdb.num-running-compactions",
        "rocksdb.compaction-pending", "rocksdb.mem-table-flush-pending"))


def _thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _cpu_ns_per_key(mib: int, rounds: list[list[bytes]], settle: float
                    ) -> tuple[float, float]:
    """CPU nanoseconds a key: of the writing thread (which holds the GIL while RocksDB
    inserts into the memtable), and of the whole process."""
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
        t0 = _thread_cpu()
        for keys in rounds:
            wb = WriteBatch(raw_mode=True)
            for key in keys:
                wb.put(key, value)
            db.write(wb)
        writer = _thread_cpu() - t0
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline and _busy(db):
            time.sleep(0.05)  # the flushes and compactions the writes left, counted too
        cpu = time.process_time() - c0
        db.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    keys = sum(map(len, rounds))
    return writer / keys * 1e9, cpu / keys * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2500)
    parser.add_argument("--round", type=int, default=800, help="keys per write batch")
    parser.add_argument("--write-buffer-mib", type=int, nargs="+", default=[64, 8])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settle", type=float, default=60.0,
                        help="at most this many seconds of the flushes and compactions "
                             "left after the last write are waited for and counted")
    args = parser.parse_args()
    rounds = _rounds(args.queues, args.rounds, args.round, 1)
    results: dict[int, list[tuple[float, float]]] = {mib: [] for mib in args.write_buffer_mib}
    for _ in range(args.repeat):
        for mib in args.write_buffer_mib:
            results[mib].append(_cpu_ns_per_key(mib, rounds, args.settle))
    for mib, runs in results.items():
        writer = [w for w, _ in runs]
        total = [t for _, t in runs]
        print(f"write buffer {mib:4d} MiB: writing thread {statistics.median(writer):6,.0f} "
              f"ns CPU/key (runs {', '.join(f'{r:,.0f}' for r in writer)}), all threads "
              f"{statistics.median(total):6,.0f} (runs {', '.join(f'{r:,.0f}' for r in total)})")


if __name__ == "__main__":
    main()
