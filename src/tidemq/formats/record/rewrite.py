"""Rewriting stored records in place: a logical queue's view of a physical queue's records
(docs/reference/logical_queue.md). Layout: :mod:`.layout`."""

from __future__ import annotations

import struct
from collections.abc import Callable

from tidemq.formats.record.layout import OFF_QUEUE_ID, OFF_QUEUE_OFFSET, OFF_TOTAL_SIZE

__all__ = ["rewrite_queue"]

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
#: A record is rewritten only when its bytes reach past QUEUEOFFSET.
_QUEUE_OFFSET_END = OFF_QUEUE_OFFSET + _I64.size


def rewrite_queue(body: bytes | bytearray | memoryview, queue_id: int,
                  to_queue_offset: Callable[[int], int], end_queue_offset: int) -> bytes:
    """The records of ``body`` (laid end to end, as a pull answer holds them) with QUEUEID
    set to ``queue_id`` and each QUEUEOFFSET ``q`` replaced by ``to_queue_offset(q)``.

    The records stop at the first whose QUEUEOFFSET is at or past ``end_queue_offset``
    (``-1``: no end) and at the first whose TOTALSIZE is not positive or overruns the
    body; what follows is dropped."""
    out = bytearray(body)
    pos = keep = 0
    while pos + _QUEUE_OFFSET_END <= len(out):
        (size,) = _I32.unpack_from(out, pos + OFF_TOTAL_SIZE)
        if size <= 0 or pos + size > len(out):
            break
        (queue_offset,) = _I64.unpack_from(out, pos + OFF_QUEUE_OFFSET)
        if 0 <= end_queue_offset <= queue_offset:
            break
        _I32.pack_into(out, pos + OFF_QUEUE_ID, queue_id)
        _I64.pack_into(out, pos + OFF_QUEUE_OFFSET, to_queue_offset(queue_offset))
        pos += size
        keep = pos
    return bytes(out[:keep])
