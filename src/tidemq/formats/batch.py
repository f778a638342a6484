"""Client batch body: sub-messages laid end to end (docs/reference/store.md §3.5, remoting.md §3.2).

Used by SEND_BATCH_MESSAGE bodies and, unchanged, as the body of a stored inner batch.

======  ====  ===================  =============================================
offset  size  field                value
======  ====  ===================  =============================================
0       4     TOTALSIZE            22 + n + p, this entry's length
4       4     MAGICCODE            written as 0, ignored
8       4     BODYCRC              written as 0, the broker recomputes
12      4     FLAG                 application flag
16      4+n   BODYLENGTH, BODY
20+n    2+p   PROPERTIESLENGTH,    signed short; the property string
              PROPERTIES
======  ====  ===================  =============================================
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from tidemq.errors import CorruptRecord

__all__ = ["ENTRY_OFF_BODY", "ENTRY_OFF_BODY_LENGTH", "ENTRY_OFF_FLAG", "ENTRY_OFF_TOTAL_SIZE",
           "ENTRY_OVERHEAD", "BatchEntry", "count_entries", "encode_batch", "first_layout",
           "iter_batch", "uniform_layout"]

_HEAD = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE
    "i"  # BODYCRC
    "i"  # FLAG
    "i"  # BODYLENGTH
)
_PROPS_LEN = struct.Struct(">h")
_SIZE_AND_BODY_LEN = struct.Struct(">i12xi")  # TOTALSIZE and BODYLENGTH of an entry
ENTRY_OVERHEAD = _HEAD.size + _PROPS_LEN.size  # 22
ENTRY_OFF_TOTAL_SIZE = 0
ENTRY_OFF_FLAG = 12
ENTRY_OFF_BODY_LENGTH = 16
ENTRY_OFF_BODY = _HEAD.size  # 20


class BatchEntry(NamedTuple):
    """One sub-message; ``body`` and ``properties`` are views into the batch buffer."""

    flag: int
    body: memoryview
    properties: memoryview
    offset: int
    size: int


def encode_batch(entries: list[tuple[bytes, bytes, int]]) -> bytes:
    """Encode ``(body, properties, flag)`` triples as one batch body."""
    parts: list[bytes] = []
    for body, props, flag in entries:
        size = ENTRY_OVERHEAD + len(body) + len(props)
        parts.append(_HEAD.pack(size, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(_PROPS_LEN.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def iter_batch(buf: bytes | bytearray | memoryview) -> Iterator[BatchEntry]:
    """Walk a batch body; any inconsistency raises :class:`CorruptRecord`."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    pos, end = 0, len(view)
    while pos < end:
        if pos + ENTRY_OVERHEAD > end:
            raise CorruptRecord("truncated batch entry header", offset=pos)
        size, _magic, _crc, flag, body_len = _HEAD.unpack_from(view, pos)
        if size < ENTRY_OVERHEAD or pos + size > end:
            raise CorruptRecord(f"batch entry TOTALSIZE {size} does not fit", offset=pos)
        if body_len < 0 or ENTRY_OVERHEAD + body_len > size:
            raise CorruptRecord(f"batch entry BODYLENGTH {body_len} overruns", offset=pos)
        bstart = pos + _HEAD.size
        (plen,) = _PROPS_LEN.unpack_from(view, bstart + body_len)
        if plen < 0 or ENTRY_OVERHEAD + body_len + plen != size:
            raise CorruptRecord("batch entry lengths do not add up to TOTALSIZE", offset=pos)
        pstart = bstart + body_len + 2
        yield BatchEntry(flag, view[bstart : bstart + body_len], view[pstart : pstart + plen],
                         pos, size)
        pos += size


def count_entries(buf: bytes | bytearray | memoryview) -> int:
    """Number of well-formed entries; raises :class:`CorruptRecord` on any inconsistency.

    The common producer batch has entries of one size; that shape is proven with a few
    strided comparisons instead of a walk: every entry's TOTALSIZE, BODYLENGTH and
    PROPERTIESLENGTH must agree with the first entry's, which makes each entry
    self-consistent exactly as :func:`iter_batch` would check it. Anything else is walked.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    layout = uniform_layout(view)
    if layout is not None:
        return len(view) // layout[0]
    return sum(1 for _ in iter_batch(view))


def first_layout(buf: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """``(entry size, body length)`` when ``buf`` is whole entries of its first entry's
    size and that first entry is well formed as :func:`iter_batch` checks it, else
    ``None``. The other entries are not read (:func:`uniform_layout` checks them too)."""
    n_bytes = len(buf)
    if n_bytes < ENTRY_OVERHEAD:
        return None
    size, body_len = _SIZE_AND_BODY_LEN.unpack_from(buf)
    if size < ENTRY_OVERHEAD or n_bytes % size or not 0 <= body_len <= size - ENTRY_OVERHEAD:
        return None
    (plen,) = _PROPS_LEN.unpack_from(buf, _HEAD.size + body_len)
    if ENTRY_OVERHEAD + body_len + plen != size:
        return None
    return size, body_len


def uniform_layout(buf: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """``(entry size, body length)`` when every entry repeats the first entry's length
    fields (then each entry is well formed exactly as :func:`iter_batch` checks it), else
    ``None`` -- the caller walks the batch."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    layout = first_layout(view)
    if layout is None or not _uniform(view, *layout):
        return None
    return layout


def _uniform(view: memoryview, size: int, body_len: int) -> bool:
    """Whether every entry of ``view`` repeats the first entry's three length fields."""
    n = len(view) // size
    rows = memoryview(view.tobytes() if not view.c_contiguous else view).cast("B")
    first = bytes(rows[0:4]), bytes(rows[16:20]), bytes(rows[20 + body_len : 22 + body_len])
    for off, width, expect in ((0, 4, first[0]), (16, 4, first[1]),
                               (20 + body_len, 2, first[2])):
        column = rows[off : off + (n - 1) * size + width]
        # Bytes ``off .. off+width`` of every entry, gathered with a stride of ``size``.
        for k in range(width):
            if column[k::size] != expect[k : k + 1] * n:
                return False
    return True
