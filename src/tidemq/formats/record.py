"""Commit-log record: RocketMQ's stored message layout (specs/store.md §1.2). Source of truth.

All integers big-endian, signed. Offsets are for IPv4 born and store hosts; each IPv6 host
adds 12 bytes (sysflag 0x10 born host, 0x20 store host) and shifts what follows.

======  ====  ======================  ================================================
offset  size  field                   meaning
======  ====  ======================  ================================================
0       4     TOTALSIZE               whole record length, this field included
4       4     MAGICCODE               0xDAA320A7 (V1) or 0xDAA320AB (V2)
8       4     BODYCRC                 zlib.crc32(body) & 0x7FFFFFFF -- the CRC covers
                                      exactly the stored body bytes
12      4     QUEUEID
16      4     FLAG                    application flag
20      8     QUEUEOFFSET             queue offset (inner batch: base offset)
28      8     PHYSICALOFFSET          position of this record in the log
36      4     SYSFLAG                 specs/store.md §1.4
40      8     BORNTIMESTAMP           producer clock, ms
48      8     BORNHOST                IPv4 (4) + port (4); IPv6 16 + 4
56      8     STORETIMESTAMP          broker clock inside the append lock, ms
64      8     STOREHOST               IPv4 (4) + port (4); IPv6 16 + 4
72      4     RECONSUMETIMES
76      8     PREPARED_TX_OFFSET
84      4+n   BODYLENGTH, BODY
88+n    1+t   TOPICLENGTH, TOPIC      V1: signed byte length; V2: 2-byte length
..      2+p   PROPERTIESLENGTH, PROPS signed short; specs/store.md §1.5
======  ====  ======================  ================================================

Fixed overhead with IPv4 hosts and V1 is 91 bytes: ``TOTALSIZE = 91 + n + t + p``.

A segment that cannot take the next record ends with an 8-byte BLANK marker
``[int remaining][int 0xCBD43194]``; readers continue at the next segment.

Parsers take ``(buf, offset)`` and work on ``bytes``, ``bytearray``, ``mmap`` and
``memoryview`` alike. Anything malformed raises :class:`~tidemq.errors.CorruptRecord`.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable
from typing import NamedTuple

try:  # CRC-32 with PCLMULQDQ (ISA-L): the same values as zlib's, a third of the time on
    # small bodies and a quarter on large ones
    from isal.isal_zlib import crc32 as _isal_crc32
    crc32: Callable[..., int] = _isal_crc32
except ImportError:  # pragma: no cover - no isal wheel for this platform
    from zlib import crc32

from tidemq.errors import CorruptRecord, MessageTooLarge

__all__ = [
    "BLANK_MAGIC",
    "BLANK_SIZE",
    "FIXED_V4",
    "MAGIC_V1",
    "MAGIC_V2",
    "MIN_RECORD_SIZE",
    "OFF_PHYSICAL_OFFSET",
    "OFF_QUEUE_OFFSET",
    "Blank",
    "HostAddr",
    "Record",
    "body_crc",
    "crc32",
    "decode_record",
    "encode_blank",
    "encode_record",
    "fixed_v4_with_hosts",
    "pack_host",
    "record_size",
    "store_timestamp_offset",
]

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK_SIZE = 8

SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

OFF_TOTAL_SIZE = 0
OFF_MAGIC = 4
OFF_BODY_CRC = 8
OFF_QUEUE_OFFSET = 20
OFF_PHYSICAL_OFFSET = 28
OFF_SYSFLAG = 36
OFF_BORN_HOST = 48

_PREFIX = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE
    "i"  # BODYCRC
    "i"  # QUEUEID
    "i"  # FLAG
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "q"  # BORNTIMESTAMP
)
assert _PREFIX.size == OFF_BORN_HOST

#: The whole fixed part for IPv4 born and store hosts, up to and including BODYLENGTH.
FIXED_V4 = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE
    "i"  # BODYCRC
    "i"  # QUEUEID
    "i"  # FLAG
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "q"  # BORNTIMESTAMP
    "4s"  # BORNHOST address
    "i"  # BORNHOST port
    "q"  # STORETIMESTAMP
    "4s"  # STOREHOST address
    "i"  # STOREHOST port
    "i"  # RECONSUMETIMES
    "q"  # PREPARED_TX_OFFSET
    "i"  # BODYLENGTH
)
FIXED_V4_SIZE = FIXED_V4.size  # 88
assert FIXED_V4_SIZE == 88


def fixed_v4_with_hosts(code: str) -> struct.Struct:
    """:data:`FIXED_V4` with each host's address and port (``4si``, 8 bytes) read or
    written as one field of ``code``: ``"q"`` (an integer, a cheap cache key) or ``"8s"``
    (the packed bytes). Same size, same offsets."""
    fixed = struct.Struct(FIXED_V4.format.replace("4si", code))
    if fixed.size != FIXED_V4_SIZE:
        raise ValueError(f"host code {code!r} is not 8 bytes")
    return fixed

#: TOTALSIZE of a record with empty body, topic and properties (IPv4, V1).
MIN_RECORD_SIZE = FIXED_V4_SIZE + 1 + 2  # 91

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_BLANK = struct.Struct(">ii")
_AFTER_BORN = struct.Struct(">q")  # STORETIMESTAMP
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED_TX_OFFSET, BODYLENGTH

#: Largest topic a V1 record can hold (signed byte length).
MAX_V1_TOPIC_BYTES = 127
MAX_V2_TOPIC_BYTES = 32767


class HostAddr(NamedTuple):
    """A born or store host as stored: raw IP bytes (4 or 16) and port."""

    ip: bytes
    port: int

    def __str__(self) -> str:
        return f"{ipaddress.ip_address(self.ip)}:{self.port}"


LOCALHOST = HostAddr(b"\x7f\x00\x00\x01", 0)


def pack_host(address: str) -> HostAddr:
    """Parse ``"ip:port"`` (IPv6 as ``"[ip]:port"``) into a :class:`HostAddr`."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    return HostAddr(ipaddress.ip_address(host).packed, int(port or 0))


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


#: zlib releases the GIL for buffers above 5 KiB; a thread that drops it while others are
#: busy waits up to ``sys.getswitchinterval()`` (5 ms) to get it back. Chunks below that
#: size keep the GIL: a 20 KB CRC costs microseconds, not milliseconds, on a busy broker.
_CRC_CHUNK = 4096


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """The stored BODYCRC: CRC-32 (zlib) masked to 31 bits."""
    if len(body) <= _CRC_CHUNK:
        return crc32(body) & 0x7FFFFFFF
    view = memoryview(body)
    crc = 0
    for start in range(0, len(view), _CRC_CHUNK):
        crc = crc32(view[start : start + _CRC_CHUNK], crc)
    return crc & 0x7FFFFFFF


def store_timestamp_offset(sys_flag: int) -> int:
    """Where STORETIMESTAMP sits, given the born-host width."""
    return 56 if not sys_flag & SYSFLAG_BORNHOST_V6 else 68


def record_size(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0) -> int:
    """TOTALSIZE for the given lengths (V2 chosen when the topic needs it)."""
    size = MIN_RECORD_SIZE + body_len + topic_len + props_len
    if topic_len > MAX_V1_TOPIC_BYTES:
        size += 1
    if sys_flag & SYSFLAG_BORNHOST_V6:
        size += 12
    if sys_flag & SYSFLAG_STOREHOST_V6:
        size += 12
    return size


def encode_blank(remaining: int) -> bytes:
    """The 8-byte end-of-segment marker covering ``remaining`` bytes."""
    return _BLANK.pack(remaining, BLANK_MAGIC)


def encode_record(
    *,
    topic: bytes,
    queue_id: int,
    body: bytes | bytearray | memoryview,
    properties: bytes,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: HostAddr = LOCALHOST,
    store_host: HostAddr = LOCALHOST,
    store_timestamp: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    reconsume_times: int = 0,
    prepared_tx_offset: int = 0,
    crc: int | None = None,
) -> bytearray:
    """Encode one record. The store patches QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP.

    The IPv6 bits of ``sys_flag`` are set from the host widths; V2 magic is used when the
    topic is longer than 127 bytes. Oversized topics or properties raise
    :class:`~tidemq.errors.MessageTooLarge`.
    """
    if len(topic) > MAX_V2_TOPIC_BYTES:
        raise MessageTooLarge(len(topic), MAX_V2_TOPIC_BYTES)
    if len(properties) > 32767:
        raise MessageTooLarge(len(properties), 32767)
    if len(born_host.ip) == 16:
        sys_flag |= SYSFLAG_BORNHOST_V6
    else:
        sys_flag &= ~SYSFLAG_BORNHOST_V6
    if len(store_host.ip) == 16:
        sys_flag |= SYSFLAG_STOREHOST_V6
    else:
        sys_flag &= ~SYSFLAG_STOREHOST_V6
    v2 = len(topic) > MAX_V1_TOPIC_BYTES
    size = record_size(len(body), len(topic), len(properties), sys_flag)
    if crc is None:
        crc = body_crc(body)
    out = bytearray(size)
    if not sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6):
        FIXED_V4.pack_into(
            out, 0, size, MAGIC_V2 if v2 else MAGIC_V1, crc, queue_id, flag, queue_offset,
            physical_offset, sys_flag, born_timestamp, born_host.ip, born_host.port,
            store_timestamp, store_host.ip, store_host.port, reconsume_times,
            prepared_tx_offset, len(body),
        )
        pos = FIXED_V4_SIZE
    else:
        _PREFIX.pack_into(
            out, 0, size, MAGIC_V2 if v2 else MAGIC_V1, crc, queue_id, flag, queue_offset,
            physical_offset, sys_flag, born_timestamp,
        )
        pos = OFF_BORN_HOST
        for host, ts in ((born_host, None), (store_host, store_timestamp)):
            if ts is not None:
                _I64.pack_into(out, pos, ts)
                pos += 8
            out[pos : pos + len(host.ip)] = host.ip
            pos += len(host.ip)
            _I32.pack_into(out, pos, host.port)
            pos += 4
        _TAIL.pack_into(out, pos, reconsume_times, prepared_tx_offset, len(body))
        pos += _TAIL.size
    out[pos : pos + len(body)] = body
    pos += len(body)
    if v2:
        _I16.pack_into(out, pos, len(topic))
        pos += 2
    else:
        out[pos] = len(topic)
        pos += 1
    out[pos : pos + len(topic)] = topic
    pos += len(topic)
    _I16.pack_into(out, pos, len(properties))
    pos += 2
    out[pos : pos + len(properties)] = properties
    return out


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
    stale-record hole of specs/store.md §10.9).
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
    (_, _, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = _PREFIX.unpack_from(
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
            if topic_len > 127:
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
