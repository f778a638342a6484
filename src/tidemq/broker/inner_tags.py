"""The tag codes of the messages inside a stored inner batch (RIP-26), for pulls of
BatchCQ topics filtered by tag.

A BatchConsumeQueue entry carries one tags code, the outer record's, while each message
of an inner batch carries its own ``TAGS`` in the (possibly compressed) batch body. A pull
filtered by tag keeps an inner batch when any of its messages has a subscribed tag; the
client then keeps exactly the matching messages of it. The codes of a record are worked
out once and kept in a bounded cache keyed by commit-log offset, which is never reused
for another record while the broker runs.
"""

from __future__ import annotations

import logging

from tidemq.codec.compression import CompressionType, compression_of, decompress
from tidemq.errors import CorruptRecord
from tidemq.formats.batch import iter_batch
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import Record, decode_record

__all__ = ["InnerBatchTags"]

log = logging.getLogger(__name__)

_COMPRESSED = 0x1
_TAGS_KEY = b"TAGS\x01"


class InnerBatchTags:
    """``tags(phys, record)``: the tag codes of the messages of the inner batch stored at
    ``phys`` (``record`` is its bytes), or ``None`` when the record cannot be read as one
    (the pull then keeps it and the client reports what is wrong with it).

    ``max_inflated`` caps what a compressed body may inflate to; ``capacity`` bounds the
    cache (it is emptied when full)."""

    def __init__(self, max_inflated: int, capacity: int = 4096) -> None:
        self.max_inflated = max_inflated
        self.capacity = capacity
        self._codes: dict[int, frozenset[int] | None] = {}

    def __call__(self, phys: int, record: memoryview) -> frozenset[int] | None:
        try:
            return self._codes[phys]
        except KeyError:
            pass
        codes = self._read(phys, record)
        if len(self._codes) >= self.capacity:
            self._codes.clear()
        self._codes[phys] = codes
        return codes

    def _read(self, phys: int, record: memoryview) -> frozenset[int] | None:
        try:
            rec = decode_record(record)
            if not isinstance(rec, Record):
                return None
            body: bytes | memoryview = rec.body
            if rec.sys_flag & _COMPRESSED:
                ctype = compression_of(rec.sys_flag) or CompressionType.ZLIB
                body = decompress(body, ctype, self.max_inflated)
            codes: set[int] = set()
            for entry in iter_batch(body):
                props = bytes(entry.properties)
                if _TAGS_KEY not in props:
                    codes.add(0)
                else:
                    codes.add(tags_code(decode_properties(props).get("TAGS")))
        except (CorruptRecord, UnicodeDecodeError) as exc:
            log.warning("inner batch at %d cannot be filtered by tag: %s", phys, exc)
            return None
        return frozenset(codes)
