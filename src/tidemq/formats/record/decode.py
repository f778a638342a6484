"""Decoding one commit-log record into an object (layout: :mod:`.layout`).

Parsers take ``(buf, offset)`` and work on ``bytes``, ``bytearray``, ``mmap`` and
``memoryview`` alike. Anything malformed raises :class:`~tidemq.errors.CorruptRecord`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from tidemq.errors import CorruptRecord
from tidemq.formats.record.layout import (
    BLANK_MAGIC,
    BLANK_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    MAX_V1_TOPIC_BYTES,
    MIN_RECORD_SIZE,
    OFF_BORN_HOST,
    PREFIX,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    HostAddr,
    body_crc,
)

__all__ = ["Blank", "Record", "decode_record"]

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_BLANK = struct.Struct(">ii")
_AFTER_BORN = struct.Struct(">q")  # STORETIMESTAMP
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED_TX_OFFSET, BODYLENGTH


class Blank(NamedTuple):
    """The end-of-segment marker: ``size`` is the number of bytes it covers."""

    size: int


class Record(NamedTuple):
    """One decoded commit-log record. ``body`` is a view into the source buffer."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddr
    store_timestamp: int
    store_host: HostAddr
    reconsume_times: int
    prepared_tx_offset: int
    body: memoryview
    topic: str
    properties: bytes


def _host(buf: memoryview, pos: int, v6: bool) -> tuple[HostAddr, int]:
    width = 16 if v6 else 4
    ip = bytes(buf[pos : pos + width])
    (port,) = _I32.unpack_from(buf, pos + width)
    return HostAddr(ip, port), pos + width + 4


def decode_record(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    *,
    check_crc: bool = False,
    expected_physical_offset: int | None = None,
) -> Record | Blank:
    """Decode the record at ``offset``.

    With ``check_crc`` the body CRC is verified; with ``expected_physical_offset`` the
    PHYSICALOFFSET field must equal it (TideMQ treats a mismatch as end of log, closing the
    stale-record hole of docs/reference/store.md §10.9).
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(view)
    if offset < 0 or offset + 8 > end:
        raise CorruptRecord("fewer than 8 bytes left for a record header", offset=offset)
    total, magic = _BLANK.unpack_from(view, offset)
    if magic == BLANK_MAGIC:
        if total < BLANK_SIZE:
            raise CorruptRecord(f"blank marker covers {total} bytes", offset=offset)
        return Blank(total)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise CorruptRecord(f"bad magic code {magic & 0xFFFFFFFF:#010x}", offset=offset)
    if total < MIN_RECORD_SIZE or offset + total > end:
        raise CorruptRecord(f"TOTALSIZE {total} does not fit the buffer", offset=offset)
    rec = view[offset : offset + total]
    (_, _, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = PREFIX.unpack_from(
        rec, 0
    )
    if expected_physical_offset is not None and phys != expected_physical_offset:
        raise CorruptRecord(
            f"PHYSICALOFFSET {phys} differs from position {expected_physical_offset}",
            offset=offset,
        )
    try:
        born_host, pos = _host(rec, OFF_BORN_HOST, bool(sys_flag & SYSFLAG_BORNHOST_V6))
        (store_ts,) = _AFTER_BORN.unpack_from(rec, pos)
        store_host, pos = _host(rec, pos + 8, bool(sys_flag & SYSFLAG_STOREHOST_V6))
        reconsume, prepared, body_len = _TAIL.unpack_from(rec, pos)
        pos += _TAIL.size
        if body_len < 0 or pos + body_len > total:
            raise CorruptRecord(f"BODYLENGTH {body_len} overruns the record", offset=offset)
        body = rec[pos : pos + body_len]
        pos += body_len
        if magic == MAGIC_V1:
            topic_len = rec[pos]
            if topic_len > MAX_V1_TOPIC_BYTES:
                raise CorruptRecord("negative V1 topic length", offset=offset)
            pos += 1
        else:
            (topic_len,) = _I16.unpack_from(rec, pos)
            pos += 2
        topic_bytes = bytes(rec[pos : pos + topic_len])
        pos += topic_len
        (props_len,) = _I16.unpack_from(rec, pos)
        pos += 2
    except (struct.error, IndexError):
        raise CorruptRecord("record fields overrun TOTALSIZE", offset=offset) from None
    if topic_len < 0 or props_len < 0 or pos + props_len != total:
        raise CorruptRecord(
            f"field lengths add up to {pos + max(props_len, 0)}, TOTALSIZE is {total}",
            offset=offset,
        )
    if check_crc and body_crc(body) != crc:
        raise CorruptRecord("body CRC mismatch", offset=offset)
    try:
        topic = topic_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptRecord("topic is not UTF-8", offset=offset) from None
    return Record(
        total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_host,
        store_ts, store_host, reconsume, prepared, body, topic, bytes(rec[pos:total]),
    )
