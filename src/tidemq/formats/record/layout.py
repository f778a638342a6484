"""Commit-log record: RocketMQ's stored message layout (docs/reference/store.md §1.2).

The source of truth.

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
36      4     SYSFLAG                 docs/reference/store.md §1.4
40      8     BORNTIMESTAMP           producer clock, ms
48      8     BORNHOST                IPv4 (4) + port (4); IPv6 16 + 4
56      8     STORETIMESTAMP          broker clock inside the append lock, ms
64      8     STOREHOST               IPv4 (4) + port (4); IPv6 16 + 4
72      4     RECONSUMETIMES
76      8     PREPARED_TX_OFFSET
84      4+n   BODYLENGTH, BODY
88+n    1+t   TOPICLENGTH, TOPIC      V1: signed byte length; V2: 2-byte length
..      2+p   PROPERTIESLENGTH, PROPS signed short; docs/reference/store.md §1.5
======  ====  ======================  ================================================

Fixed overhead with IPv4 hosts and V1 is 91 bytes: ``TOTALSIZE = 91 + n + t + p``.

A segment that cannot take the next record ends with an 8-byte BLANK marker
``[int remaining][int 0xCBD43194]``; readers continue at the next segment.

Every field has its offset here by name (``OFF_*``); the fields after BORNHOST are at
these offsets when the born host is IPv4 (:func:`store_timestamp_offset` and the decoder
handle the shift). No other module indexes a record by number.
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

__all__ = [
    "BLANK_MAGIC",
    "BLANK_SIZE",
    "FIXED_V4",
    "FIXED_V4_SIZE",
    "LOCALHOST",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_PROPERTIES_BYTES",
    "MAX_V1_TOPIC_BYTES",
    "MAX_V2_TOPIC_BYTES",
    "MIN_RECORD_SIZE",
    "OFF_BODY",
    "OFF_BODY_CRC",
    "OFF_BODY_LENGTH",
    "OFF_BORN_HOST",
    "OFF_BORN_TIMESTAMP",
    "OFF_FLAG",
    "OFF_MAGIC",
    "OFF_PHYSICAL_OFFSET",
    "OFF_PREPARED_TX_OFFSET",
    "OFF_QUEUE_ID",
    "OFF_QUEUE_OFFSET",
    "OFF_RECONSUME_TIMES",
    "OFF_STORE_HOST",
    "OFF_STORE_TIMESTAMP",
    "OFF_SYSFLAG",
    "OFF_TOTAL_SIZE",
    "PREFIX",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_HOSTS_V6",
    "SYSFLAG_INNER_BATCH",
    "SYSFLAG_NEED_UNWRAP",
    "SYSFLAG_STOREHOST_V6",
    "V4_FIELDS",
    "HostAddr",
    "body_crc",
    "crc32",
    "fixed_v4_with_hosts",
    "pack_host",
    "record_size",
    "store_timestamp_offset",
]

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK_SIZE = 8

#: SYSFLAG bits (docs/reference/store.md §1.4) that change how a record's bytes are read.
SYSFLAG_COMPRESSED = 0x1  # BODY compressed; the algorithm in bits 8-10
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
SYSFLAG_HOSTS_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
SYSFLAG_NEED_UNWRAP = 0x40  # with INNER_BATCH: BODY is a client batch body
SYSFLAG_INNER_BATCH = 0x80

#: The fixed part for IPv4 born and store hosts, field by field: (name, struct code).
_V4_CODES = (
    ("total_size", "i"),
    ("magic", "i"),
    ("body_crc", "i"),
    ("queue_id", "i"),
    ("flag", "i"),
    ("queue_offset", "q"),
    ("physical_offset", "q"),
    ("sys_flag", "i"),
    ("born_timestamp", "q"),
    ("born_host", "4si"),
    ("store_timestamp", "q"),
    ("store_host", "4si"),
    ("reconsume_times", "i"),
    ("prepared_tx_offset", "q"),
    ("body_length", "i"),
)


def _offsets() -> dict[str, int]:
    out, at = {}, 0
    for name, code in _V4_CODES:
        out[name] = at
        at += struct.calcsize(">" + code)
    out["body"] = at
    return out


#: Offset of every fixed field (and of BODY) for IPv4 hosts, by the names of
#: :class:`~tidemq.formats.record.Record`.
V4_FIELDS: dict[str, int] = _offsets()

OFF_TOTAL_SIZE = 0
OFF_MAGIC = 4
OFF_BODY_CRC = 8
OFF_QUEUE_ID = 12
OFF_FLAG = 16
OFF_QUEUE_OFFSET = 20
OFF_PHYSICAL_OFFSET = 28
OFF_SYSFLAG = 36
OFF_BORN_TIMESTAMP = 40
OFF_BORN_HOST = 48
OFF_STORE_TIMESTAMP = 56  # IPv4 born host
OFF_STORE_HOST = 64  # IPv4 born host
OFF_RECONSUME_TIMES = 72  # IPv4 hosts, as every offset below
OFF_PREPARED_TX_OFFSET = 76
OFF_BODY_LENGTH = 84
OFF_BODY = 88
_NAMED = [OFF_TOTAL_SIZE, OFF_MAGIC, OFF_BODY_CRC, OFF_QUEUE_ID, OFF_FLAG, OFF_QUEUE_OFFSET,
          OFF_PHYSICAL_OFFSET, OFF_SYSFLAG, OFF_BORN_TIMESTAMP, OFF_BORN_HOST,
          OFF_STORE_TIMESTAMP, OFF_STORE_HOST, OFF_RECONSUME_TIMES, OFF_PREPARED_TX_OFFSET,
          OFF_BODY_LENGTH, OFF_BODY]
assert list(V4_FIELDS.values()) == _NAMED

#: TOTALSIZE through BORNTIMESTAMP: the part no host width moves.
PREFIX = struct.Struct(">" + "".join(code for _, code in _V4_CODES[:9]))
assert PREFIX.size == OFF_BORN_HOST

#: The whole fixed part for IPv4 born and store hosts, up to and including BODYLENGTH.
FIXED_V4 = struct.Struct(">" + "".join(code for _, code in _V4_CODES))
FIXED_V4_SIZE = FIXED_V4.size
assert FIXED_V4_SIZE == OFF_BODY


def fixed_v4_with_hosts(code: str) -> struct.Struct:
    """:data:`FIXED_V4` with each host's address and port (``4si``, 8 bytes) read or
    written as one field of ``code``: ``"q"`` (an integer, a cheap cache key) or ``"8s"``
    (the packed bytes). Same size, same offsets."""
    fixed = struct.Struct(FIXED_V4.format.replace("4si", code))
    if fixed.size != FIXED_V4_SIZE:
        raise ValueError(f"host code {code!r} is not 8 bytes")
    return fixed


#: TOTALSIZE of a record with empty body, topic and properties (IPv4, V1): the fixed
#: part, TOPICLENGTH (1) and PROPERTIESLENGTH (2).
MIN_RECORD_SIZE = FIXED_V4_SIZE + 1 + 2  # 91

#: Largest topic a V1 record can hold (signed byte length).
MAX_V1_TOPIC_BYTES = 127
MAX_V2_TOPIC_BYTES = 32767
#: PROPERTIESLENGTH is a signed short.
MAX_PROPERTIES_BYTES = 32767


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
    return OFF_STORE_TIMESTAMP if not sys_flag & SYSFLAG_BORNHOST_V6 else OFF_STORE_TIMESTAMP + 12


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
