"""Encoding one commit-log record, and the end-of-segment BLANK marker (layout: :mod:`.layout`)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from tidemq.errors import MessageTooLarge
from tidemq.formats.record.layout import (
    BLANK_MAGIC,
    FIXED_V4,
    FIXED_V4_SIZE,
    LOCALHOST,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_BYTES,
    MAX_V1_TOPIC_BYTES,
    MAX_V2_TOPIC_BYTES,
    OFF_BORN_HOST,
    PREFIX,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_STOREHOST_V6,
    HostAddr,
    body_crc,
    fixed_v4_with_hosts,
    record_size,
)

__all__ = ["FIXED_V4_PACKED_HOSTS", "encode_blank", "encode_record", "encode_v4_joined",
           "v4_record_packer"]

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_BLANK = struct.Struct(">ii")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED_TX_OFFSET, BODYLENGTH


#: :data:`~.layout.FIXED_V4` with each host as its 8 packed bytes (address, port).
FIXED_V4_PACKED_HOSTS = fixed_v4_with_hosts("8s")
#: The 2-byte PROPERTIESLENGTH of the usual lengths (longer ones are packed per record).
_PROPS_LEN = [_I16.pack(n) for n in range(4096)]


def v4_record_packer(topic_field_len: int, blen: int, plen: int) -> Callable[..., None]:
    """``pack_into`` of a whole IPv4 V1 record with a ``blen``-byte body and ``plen``
    bytes of properties, its TOPICLENGTH and TOPIC as one ``topic_field_len``-byte field:
    every field written by one C call. Its arguments are those of
    :func:`encode_v4_joined` with PROPERTIESLENGTH before PROPERTIES; ``s`` fields take
    ``bytes`` only."""
    return struct.Struct(
        f"{FIXED_V4_PACKED_HOSTS.format}{blen}s{topic_field_len}sh{plen}s").pack_into


def encode_v4_joined(size: int, crc: int, queue_id: int, flag: int, queue_offset: int,
                     physical_offset: int, sys_flag: int, born_timestamp: int,
                     born_host: bytes, store_timestamp: int, store_host: bytes,
                     reconsume_times: int, body: bytes | bytearray | memoryview,
                     topic_field: bytes, properties: bytes | bytearray | memoryview) -> bytes:
    """What :func:`v4_record_packer` writes, for any buffers: the fixed fields packed
    (hosts as their 8 packed bytes, V1 magic, PREPARED_TX_OFFSET 0), then BODY,
    ``topic_field`` (TOPICLENGTH and TOPIC), PROPERTIESLENGTH and PROPERTIES joined."""
    plen = len(properties)
    return b"".join((
        FIXED_V4_PACKED_HOSTS.pack(size, MAGIC_V1, crc, queue_id, flag, queue_offset,
                                   physical_offset, sys_flag, born_timestamp, born_host,
                                   store_timestamp, store_host, reconsume_times, 0, len(body)),
        body, topic_field, _PROPS_LEN[plen] if plen < 4096 else _I16.pack(plen), properties))


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
    if len(properties) > MAX_PROPERTIES_BYTES:
        raise MessageTooLarge(len(properties), MAX_PROPERTIES_BYTES)
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
    if not sys_flag & SYSFLAG_HOSTS_V6:
        FIXED_V4.pack_into(
            out, 0, size, MAGIC_V2 if v2 else MAGIC_V1, crc, queue_id, flag, queue_offset,
            physical_offset, sys_flag, born_timestamp, born_host.ip, born_host.port,
            store_timestamp, store_host.ip, store_host.port, reconsume_times,
            prepared_tx_offset, len(body),
        )
        pos = FIXED_V4_SIZE
    else:
        PREFIX.pack_into(
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
