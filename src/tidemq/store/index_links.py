"""Appending key-index entries and linking each into its slot's chain: compiled when
built, numpy otherwise.

An index file (its layout: :mod:`tidemq.store.index_format`) is a table of slot heads
and an array of entries. Appending entries ``first .. first + n - 1`` writes each with
``prev`` = the newest entry of its slot (``hash mod slot_num``) before it -- the slot's
head if that is in ``1 .. first - 1``, else none (a stale or torn head) -- then
``indexCount``, then the slots, so that no slot ever points past ``indexCount``.

:func:`link_entries` is ``link_index_entries`` of the C module
``tidemq.formats._crecords`` (one pass, the chains of a call kept in a small hash table)
where it is built, and :func:`py_link_entries` (one sort over slots) otherwise; the tests
hold the two to the same bytes.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt

from tidemq.formats.record.loops import compiled
from tidemq.store.index_format import ENTRY_DTYPE, ENTRY_SIZE, SLOT_SIZE

IntArray = npt.NDArray[np.int64]

__all__ = ["NATIVE", "link_entries", "py_link_entries"]

_I32 = np.dtype(">i4")


def py_link_entries(buf: bytearray | memoryview | mmap.mmap, slots_at: int, slot_num: int,
                    entries_at: int, count_at: int, first: int, hashes: IntArray,
                    phys: IntArray, diffs: IntArray) -> int:
    """Write entries ``first ..`` of ``hashes``, ``phys`` and ``diffs`` (int64 each) into
    the index file in ``buf`` and link them (see the module docstring); returns how
    many of the slots they went to were empty."""
    n = len(hashes)
    if (len(phys) != n or len(diffs) != n or slot_num < 1 or first < 1
            or first + n > 0x7FFFFFFF or min(slots_at, entries_at, count_at) < 0
            or slots_at + SLOT_SIZE * slot_num > len(buf) or count_at + 4 > len(buf)
            or entries_at + ENTRY_SIZE * (first + n) > len(buf)):
        raise ValueError(f"link_index_entries: {n} entries after entry {first} (slots of "
                         f"{slot_num} at {slots_at}, entries at {entries_at}, count at "
                         f"{count_at}) do not fit {len(buf)} bytes, or the columns are not "
                         f"int64 of one length")
    # Entries by slot, in log order within a slot: one sort of slot * 2**32 + index.
    key = hashes % slot_num
    key <<= 32
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    order = key & 0xFFFFFFFF
    s_sorted = key >> 32
    nums_sorted = order + first  # entry numbers, by slot
    table = np.frombuffer(buf, dtype=_I32, count=slot_num, offset=slots_at)
    heads = table[s_sorted].astype(np.int64)  # each entry's slot head before this write
    # A head outside 1 .. first-1 is stale or torn: an empty slot.
    heads *= (heads - 1).view(np.uint64) < np.uint64(first - 1)
    same = s_sorted[1:] == s_sorted[:-1]  # entry i+1 shares entry i's slot
    if np.count_nonzero(same):  # chain entries of one slot to each other
        starts = np.ones(n, dtype=np.bool_)
        np.logical_not(same, out=starts[1:])
        ends = np.ones(n, dtype=np.bool_)
        ends[:-1] = starts[1:]
        prev_sorted = heads.copy()
        prev_sorted[1:][same] = nums_sorted[:-1][same]
        empty = int(np.count_nonzero(heads[starts] == 0))
        slots_out, nums_out = s_sorted[ends], nums_sorted[ends]
    else:
        prev_sorted = heads
        empty = n - int(np.count_nonzero(heads))
        slots_out, nums_out = s_sorted, nums_sorted
    prev = np.empty(n, dtype=np.int64)
    prev[order] = prev_sorted
    ent = np.empty(n, dtype=ENTRY_DTYPE)
    ent["hash"] = hashes
    ent["phys"] = phys
    ent["diff"] = diffs
    ent["prev"] = prev
    at = entries_at + first * ENTRY_SIZE
    buf[at : at + n * ENTRY_SIZE] = ent.tobytes()
    buf[count_at : count_at + 4] = (first + n).to_bytes(4, "big")
    table[slots_out] = nums_out
    return empty


_fn = cast("Callable[..., int] | None", compiled("link_index_entries"))
#: Whether the compiled loop runs (``False``: :func:`py_link_entries`).
NATIVE = _fn is not None
_Buf = bytearray | memoryview | mmap.mmap
link_entries: Callable[[_Buf, int, int, int, int, int, IntArray, IntArray, IntArray], int] = (
    _fn if _fn is not None else py_link_entries)
