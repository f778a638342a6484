"""How much of a queue's files a start trusts: one rule for loading and for verify.

A consume queue (classic or batch) is a run of fixed-size files named by their first
byte. On load, a queue whose files are of the wrong size or not contiguous, or whose
invalid entries are followed by valid ones, is **in doubt**: it is dropped whole and
rebuilt from the start of the commit log. Otherwise the valid entries of the last
files (only they can be partly written) end the queue, and empty trailing files are
removed. :func:`assess` decides this from the files' sizes and a count of each file's
valid entries; :meth:`ConsumeQueue.load` acts on it and ``tidemq store verify`` previews
it, read-only. Before that, a last file whose creation a crash cut short (before its
allocation: short and all zeros, :func:`creation_cut_short`) is set aside: it holds
nothing and puts nothing in doubt.

A queue's first file (base 0) that holds no entry at all -- empty, all zeros -- is the
exception: a queue is created with its first entry, so that file lost entries the commit
log still holds (a damaged disk; after a clean stop recovery would not dispatch them
again), and the queue is in doubt. Only a crash right after such a file's creation
leaves one legitimately, and its rebuild then finds the same entries. A later file alone
that holds nothing is a queue that rolled over after older files were deleted.

A queue whose later entries are gone while earlier ones are kept is **cut short**: its
last files hold no entry (zeroed, or a last file emptied), or its last kept file holds
non-zero bytes after its valid entries (zeroed entries with entries after them). The
commit log still holds those records, and nothing else says where the queue ended: a
start re-dispatches the log from the end of the queue's last valid entry
(:attr:`QueueExtent.short`), which rewrites the lost entries and only them, once. Files
before the last :data:`CHECKED_FILES` are not read whole: their first and last entries
are checked, and a file whose edges are invalid is counted as the last ones are (so a
zeroed file among them puts the queue in doubt).
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tidemq.store.mapped_file import all_zero

__all__ = ["QueueExtent", "assess", "creation_cut_short", "measure", "nonzero_after"]

Entries = npt.NDArray[np.void]

#: Only the last files can be partly written: entries are checked in this many.
CHECKED_FILES = 3


@dataclasses.dataclass(frozen=True, slots=True)
class QueueExtent:
    doubt: str  # non-empty: why the queue is dropped whole and rebuilt
    wrote: tuple[int, ...]  # bytes of valid entries per file kept, in order
    #: Non-empty: why the queue's later entries are taken as lost (see the module doc).
    short: str = ""


def assess(files: Sequence[tuple[int, int]], file_size: int,
           valid_bytes: Callable[[int], int], *, keep_one_empty: bool,
           edges_valid: Callable[[int], bool] | None = None,
           nonzero_after: Callable[[int, int], bool] | None = None) -> QueueExtent:
    """The extent of a queue whose files are ``(base, size)`` in order; ``valid_bytes(k)``
    counts the bytes of valid entries at the start of file ``k`` (asked for the last
    :data:`CHECKED_FILES` files of a queue not already in doubt, and for an earlier one
    whose first or last entry ``edges_valid(k)`` finds invalid); ``nonzero_after(k, pos)``
    says whether file ``k`` holds a non-zero byte from ``pos`` on."""
    if not files:
        return QueueExtent("", ())
    first = files[0][0]
    if any(size != file_size for _, size in files):
        return QueueExtent("wrong file size", ())
    if any(base != first + i * file_size for i, (base, _) in enumerate(files)):
        return QueueExtent("a missing file", ())
    wrote = [file_size] * len(files)
    checked_from = max(0, len(files) - CHECKED_FILES)
    for k in range(len(files)):
        if k >= checked_from or (edges_valid is not None and not edges_valid(k)):
            wrote[k] = valid_bytes(k)
    if first == 0 and not any(wrote):
        return QueueExtent("its first file holds no entry", ())
    n = len(wrote)
    while n > (1 if keep_one_empty else 0) and wrote[n - 1] == 0:
        n -= 1
    if any(w < file_size for w in wrote[: n - 1]):
        return QueueExtent("invalid entries before valid ones", ())
    short = ""
    if n < len(wrote) and any(wrote[:n]):
        short = f"its last {len(wrote) - n} file(s) hold no entry"
    elif (n and 0 < wrote[n - 1] < file_size and nonzero_after is not None
          and nonzero_after(n - 1, wrote[n - 1])):
        short = "its last file holds entries after invalid ones"
    return QueueExtent("", tuple(wrote[:n]), short)


def creation_cut_short(found: Sequence[tuple[int, Path]], file_size: int) -> bool:
    """Whether the last of a queue's files ``(base, path)`` is one whose creation a crash
    cut short: of the wrong size and all zeros. It is ignored (and removed on load) --
    but for a queue's first file, which puts it in doubt (see the module doc)."""
    return (bool(found) and found[-1][0] != 0 and found[-1][1].stat().st_size != file_size
            and all_zero(found[-1][1]))


def measure(found: Sequence[tuple[int, Path]], file_size: int, dtype: np.dtype[Any],
            valid_bytes: Callable[[Entries], int], *, keep_one_empty: bool,
            cut_short: bool = False,
            valid_in_file: Callable[[Path], int] | None = None) -> QueueExtent:
    """:func:`assess` of a queue's files ``(base, path)`` on disk, entries of ``dtype``
    counted by ``valid_bytes`` (of a whole file by ``valid_in_file``, which reads it in
    one piece unless given); ``cut_short``: a last file whose creation was cut short was
    set aside (it lost what it held, unless a crash cut it: the queue is cut short)."""
    unit = dtype.itemsize

    def valid(k: int) -> int:
        if valid_in_file is not None:
            return valid_in_file(found[k][1])
        return valid_bytes(np.fromfile(found[k][1], dtype=dtype))

    def edges(k: int) -> bool:
        with found[k][1].open("rb") as f:
            raw = os.pread(f.fileno(), unit, 0) + os.pread(f.fileno(), unit, file_size - unit)
        return len(raw) == 2 * unit and valid_bytes(np.frombuffer(raw, dtype=dtype)) == len(raw)

    extent = assess([(b, p.stat().st_size) for b, p in found], file_size, valid,
                    keep_one_empty=keep_one_empty, edges_valid=edges,
                    nonzero_after=lambda k, pos: nonzero_after(found[k][1], pos))
    if cut_short and not extent.doubt and not extent.short and any(extent.wrote):
        return dataclasses.replace(extent, short="its last file was cut short")
    return extent


def nonzero_after(path: Path, pos: int, chunk: int = 1 << 20) -> bool:
    """Whether ``path`` holds a non-zero byte from ``pos`` on. Only the parts of the file
    that hold data are read: a queue file is sparse, written up to its last entry."""
    with path.open("rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        while pos < size:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    return False  # nothing but holes from here on
                raise
            hole = os.lseek(fd, pos, os.SEEK_HOLE)
            while pos < hole:
                block = os.pread(fd, min(chunk, hole - pos), pos)
                if not block:
                    return False
                if block.count(0) != len(block):
                    return True
                pos += len(block)
    return False
