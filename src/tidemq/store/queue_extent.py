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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from tidemq.store.mapped_file import all_zero

__all__ = ["QueueExtent", "assess", "creation_cut_short"]

#: Only the last files can be partly written: entries are checked in this many.
CHECKED_FILES = 3


@dataclasses.dataclass(frozen=True, slots=True)
class QueueExtent:
    doubt: str  # non-empty: why the queue is dropped whole and rebuilt
    wrote: tuple[int, ...]  # bytes of valid entries per file kept, in order


def assess(files: Sequence[tuple[int, int]], file_size: int,
           valid_bytes: Callable[[int], int], *, keep_one_empty: bool) -> QueueExtent:
    """The extent of a queue whose files are ``(base, size)`` in order; ``valid_bytes(k)``
    counts the bytes of valid entries at the start of file ``k`` (asked only for the
    last :data:`CHECKED_FILES` files of a queue not already in doubt)."""
    if not files:
        return QueueExtent("", ())
    first = files[0][0]
    if any(size != file_size for _, size in files):
        return QueueExtent("wrong file size", ())
    if any(base != first + i * file_size for i, (base, _) in enumerate(files)):
        return QueueExtent("a missing file", ())
    wrote = [file_size] * len(files)
    for k in range(max(0, len(files) - CHECKED_FILES), len(files)):
        wrote[k] = valid_bytes(k)
    if first == 0 and not any(wrote):
        return QueueExtent("its first file holds no entry", ())
    n = len(wrote)
    while n > (1 if keep_one_empty else 0) and wrote[n - 1] == 0:
        n -= 1
    if any(w < file_size for w in wrote[: n - 1]):
        return QueueExtent("invalid entries before valid ones", ())
    return QueueExtent("", tuple(wrote[:n]))


def creation_cut_short(found: Sequence[tuple[int, Path]], file_size: int) -> bool:
    """Whether the last of a queue's files ``(base, path)`` is one whose creation a crash
    cut short: of the wrong size and all zeros. It is ignored (and removed on load) --
    but for a queue's first file, which puts it in doubt (see the module doc)."""
    return (bool(found) and found[-1][0] != 0 and found[-1][1].stat().st_size != file_size
            and all_zero(found[-1][1]))
