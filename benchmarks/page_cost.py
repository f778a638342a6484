"""What the kernel charges for each new page of a commit-log segment, on this machine.

The broker writes its commit log through a shared mapping of a preallocated file, and a
warmer thread pre-faults the pages ahead of the writer (MADV_POPULATE_WRITE): every new
4 KiB page of page cache is allocated and zeroed once, in that thread, in kernel time.
This script does exactly that to a fresh file, ``--mib`` MiB per round, and reports the
kernel CPU time per page, then the user time of copying 4 MiB blocks into the populated
pages. On a machine whose memory is backed lazily (a microVM), pages the guest has not
used before cost an order of magnitude more than recycled ones, and the figure moves
from round to round: that cost lands on the broker's warmer thread in every produce
benchmark.

    .venv/bin/python benchmarks/page_cost.py --mib 1024 --rounds 3
"""

from __future__ import annotations

import argparse
import mmap
import resource
import tempfile
import time
from pathlib import Path

from tidemq.store.mapped_file import MappedFile

_CHUNK = 4 << 20


def _round(root: Path, mib: int) -> tuple[float, float, float]:
    """``(kernel us per page while populating, user us per page copying, MB/s)``."""
    size = mib << 20
    path = root / f"segment-{time.monotonic_ns()}"
    seg = MappedFile(path, 0, size, create=True)
    try:
        block = b"\x5a" * _CHUNK
        started = time.perf_counter()
        populate_sys = 0.0
        copy_user = 0.0
        for pos in range(0, size, _CHUNK):
            a = resource.getrusage(resource.RUSAGE_SELF)
            if not seg.populate(pos + _CHUNK):
                raise SystemExit("MADV_POPULATE_WRITE is not supported by this kernel")
            b = resource.getrusage(resource.RUSAGE_SELF)
            seg.write_at(pos, block)
            c = resource.getrusage(resource.RUSAGE_SELF)
            populate_sys += b.ru_stime - a.ru_stime
            copy_user += c.ru_utime - b.ru_utime
        wall = time.perf_counter() - started
        pages = size / mmap.PAGESIZE
        return populate_sys / pages * 1e6, copy_user / pages * 1e6, size / wall / 1e6
    finally:
        seg.close()
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="MiB written per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the file goes (default: a temp dir)")
    parser.add_argument("--idle", type=float, default=0.0,
                        help="seconds to wait between rounds (lets freed pages be reported "
                             "back to a VM's host)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidemq-page-cost-", dir=args.dir) as tmp:
        print(f"page cost: {args.mib} MiB per round into a fresh preallocated, mapped file")
        for i in range(args.rounds):
            if i and args.idle > 0:
                time.sleep(args.idle)  # nothing to wait for: the host's reclaim is the point
            kernel, user, rate = _round(Path(tmp), args.mib)
            print(f"  round {i + 1}: populate {kernel:5.2f} us kernel/page, copy {user:4.2f} "
                  f"us user/page, {rate:6.0f} MB/s")


if __name__ == "__main__":
    main()
