"""Offset message ids (docs/reference/store.md §7.2).

Layout before upper-case hex encoding:

======  =====  ================================
offset  size   field
======  =====  ================================
0       4/16   store host IP (IPv4 / IPv6)
4/16    4      store host port (int)
8/20    8      physical offset (long)
======  =====  ================================

32 hex characters for IPv4, 56 for IPv6.
"""

from __future__ import annotations

import binascii
import struct

from tidemq.errors import CorruptRecord
from tidemq.formats.record import HostAddr

__all__ = ["decode_offset_msg_id", "encode_offset_msg_id"]

_PORT_OFFSET = struct.Struct(">iq")


def encode_offset_msg_id(store_host: HostAddr, physical_offset: int) -> str:
    raw = store_host.ip + _PORT_OFFSET.pack(store_host.port, physical_offset)
    return binascii.hexlify(raw).decode("ascii").upper()


def decode_offset_msg_id(msg_id: str) -> tuple[HostAddr, int]:
    """Split an offset id into the store host and the physical offset."""
    if len(msg_id) not in (32, 56):
        raise CorruptRecord(f"offset message id must be 32 or 56 hex chars, got {len(msg_id)}")
    try:
        raw = binascii.unhexlify(msg_id)
    except (binascii.Error, ValueError):
        raise CorruptRecord(f"offset message id {msg_id!r} is not hex") from None
    width = 4 if len(raw) == 16 else 16
    port, phys = _PORT_OFFSET.unpack_from(raw, width)
    return HostAddr(raw[:width], port), phys
