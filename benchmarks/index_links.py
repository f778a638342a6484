"""The key index's per-key work on the dispatch thread: user CPU a key of
:func:`tidemq.store.index_links.link_entries` (compiled) and of its numpy twin
:func:`~tidemq.store.index_links.py_link_entries`, alternately; with ``--hashes``, of
:func:`tidemq.store.index_keys.key_hashes` and its twin
:func:`~tidemq.store.index_keys.py_key_hashes` on ``--per-call`` UNIQ_KEYs of 32 bytes.

One index file of the broker's geometry (``maxHashSlotNum`` 5,000,000: a 20 MB slot
table, read and written at random) in anonymous memory, every page touched first so that
no page fault is timed; keys of random hashes appended ``--per-call`` at a time (a drain
of the broker's dispatch thread applies about 1,024 records, one UNIQ_KEY each, at a
time), ``--calls`` calls a run, the two alternating for ``--rounds`` rounds. Printed per
run: the calling thread's user CPU a key (``RUSAGE_THREAD``).

    .venv/bin/python benchmarks/index_links.py --rounds 3
    .venv/bin/python benchmarks/index_links.py --rounds 3 --hashes
"""

from __future__ import annotations

import argparse
import mmap
import resource

import numpy as np

from tidemq.store import index_keys, index_links

_HEADER = 40


def _hashes(per_call: int, calls: int, rounds: int) -> None:
    rows = np.random.default_rng(7).integers(48, 58, size=(per_call, 32), dtype=np.uint8)
    if not index_keys.NATIVE_KEY_HASHES:
        print("the compiled module is not built: both runs are the numpy twin")
    for r in range(2 * rounds):
        fn = (index_keys.key_hashes, index_keys.py_key_hashes)[r % 2]
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_utime
        for _ in range(calls):
            fn(rows, 0x12345678)
        user = resource.getrusage(resource.RUSAGE_THREAD).ru_utime - before
        name = "compiled" if fn is not index_keys.py_key_hashes else "numpy"
        print(f"round {r // 2 + 1} {name:8s} {user / (calls * per_call) * 1e9:6.1f} ns user "
              f"a key hashed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=5_000_000, help="maxHashSlotNum")
    parser.add_argument("--per-call", type=int, default=1100, help="keys a call")
    parser.add_argument("--calls", type=int, default=300, help="calls a run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hashes", action="store_true", help="time the key hashing instead")
    args = parser.parse_args()
    if args.hashes:
        _hashes(args.per_call, 10 * args.calls, args.rounds)
        return
    n, calls = args.per_call, args.calls
    runs = 2 * args.rounds
    entries = 1 + runs * calls * n
    entries_at = _HEADER + 4 * args.slots
    mm = mmap.mmap(-1, entries_at + 20 * entries)
    np.frombuffer(mm, np.uint8)[:] = 0  # every page faulted in before anything is timed
    hashes = np.random.default_rng(7).integers(0, 2**31 - 1, size=(runs * calls, n),
                                               dtype=np.int64)
    phys = np.arange(n, dtype=np.int64) * 250
    diffs = np.zeros(n, np.int64)
    fns = (index_links.link_entries, index_links.py_link_entries)
    if not index_links.NATIVE:
        print("the compiled module is not built: both runs are the numpy twin")
    first, row = 1, 0
    for r in range(runs):
        fn = fns[r % 2]
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_utime
        for _ in range(calls):
            fn(mm, _HEADER, args.slots, entries_at, 36, first, hashes[row], phys, diffs)
            first += n
            row += 1
        user = resource.getrusage(resource.RUSAGE_THREAD).ru_utime - before
        name = "compiled" if fn is not index_links.py_link_entries else "numpy"
        print(f"round {r // 2 + 1} {name:8s} {user / (calls * n) * 1e9:6.1f} ns user a key")


if __name__ == "__main__":
    main()
