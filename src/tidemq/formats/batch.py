"""Client batch body: sub-messages laid end to end (specs/store.md §3.5, remoting.md §3.2).

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

__all__ = ["BatchEntry", "count_entries", "encode_batch", "iter_batch"]

_HEAD = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE
    "i"  # BODYCRC
    "i"  # FLAG
    "i"  # BODYLENGTH
)
_PROPS_LEN = struct.Struct(">h")
ENTRY_OVERHEAD = _HEAD.size + _PROPS_LEN.size  # 22


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
    """Number of well-formed entries; raises :class:`CorruptRecord` on any inconsistency."""
    return sum(1 for _ in iter_batch(buf))
