"""The append path: encode records outside the lock, place and patch them inside it.

Outside the lock, a put call's messages are encoded back to back into one buffer with
QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP left as zero. Inside the append lock the
store picks the queue offset, the segment position and a store timestamp that never goes
backwards, patches those three fields (vectorised for large batches) and copies the whole
buffer into the segment at once. A batch is never split across segments.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tidemq.formats.record import (
    MAGIC_V1,
    MAGIC_V2,
    MAX_V1_TOPIC_BYTES,
    HostAddr,
    body_crc,
    encode_record,
    store_timestamp_offset,
)

__all__ = ["EncodedBatch", "MessageInput", "encode_batch", "patch_batch"]

_FIXED_V4 = struct.Struct(">iiiiiqqiq4siq4siiqi")
_QO_PHYS = struct.Struct(">qq")
_TS = struct.Struct(">q")
_I16 = struct.Struct(">h")
_VECTOR_MIN = 16


class MessageInput(NamedTuple):
    """One message to store. ``keys`` are indexed (UNIQ_KEY first, then KEYS)."""

    body: bytes | bytearray | memoryview
    properties: bytes = b""
    flag: int = 0
    tags_code: int = 0
    keys: tuple[str, ...] = ()


class EncodedBatch(NamedTuple):
    buf: bytearray
    starts: list[int]
    sizes: list[int]
    ts_offset: int  # STORETIMESTAMP position inside each record


def encode_batch(
    topic: str, queue_id: int, msgs: Sequence[MessageInput], *, sys_flag: int,
    born_timestamp: int, born_host: HostAddr, store_host: HostAddr, reconsume_times: int = 0,
) -> EncodedBatch:
    """Encode ``msgs`` back to back; offsets and store time are patched later."""
    tbytes = topic.encode("utf-8")
    tlen = len(tbytes)
    v4 = len(born_host.ip) == 4 and len(store_host.ip) == 4 and tlen <= MAX_V1_TOPIC_BYTES
    starts: list[int] = []
    sizes: list[int] = []
    if not v4:
        parts = []
        pos = 0
        for m in msgs:
            rec = encode_record(
                topic=tbytes, queue_id=queue_id, body=m.body, properties=m.properties,
                flag=m.flag, sys_flag=sys_flag, born_timestamp=born_timestamp,
                born_host=born_host, store_host=store_host, reconsume_times=reconsume_times,
            )
            parts.append(rec)
            starts.append(pos)
            sizes.append(len(rec))
            pos += len(rec)
        flag_v6 = sys_flag | (0x10 if len(born_host.ip) == 16 else 0)
        return EncodedBatch(bytearray().join(parts), starts, sizes,
                            store_timestamp_offset(flag_v6))
    sys_flag &= ~0x30
    fixed = 91 + tlen
    total = 0
    for m in msgs:
        size = fixed + len(m.body) + len(m.properties)
        starts.append(total)
        sizes.append(size)
        total += size
    buf = bytearray(total)
    pack = _FIXED_V4.pack_into
    bip, bport, sip, sport = born_host.ip, born_host.port, store_host.ip, store_host.port
    tail = bytes([tlen]) + tbytes
    magic = MAGIC_V1 if tlen <= MAX_V1_TOPIC_BYTES else MAGIC_V2
    for m, pos, size in zip(msgs, starts, sizes, strict=True):
        body = m.body
        blen = len(body)
        pack(buf, pos, size, magic, body_crc(body), queue_id, m.flag, 0, 0, sys_flag,
             born_timestamp, bip, bport, 0, sip, sport, reconsume_times, 0, blen)
        p = pos + 88
        buf[p : p + blen] = body
        p += blen
        buf[p : p + tlen + 1] = tail
        p += tlen + 1
        props = m.properties
        _I16.pack_into(buf, p, len(props))
        if props:
            buf[p + 2 : p + 2 + len(props)] = props
    return EncodedBatch(buf, starts, sizes, 56)


def patch_batch(enc: EncodedBatch, queue_offset: int, phys_base: int, store_ts: int,
                queue_step: Sequence[int] | None = None) -> None:
    """Fill QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of every record."""
    buf, starts = enc.buf, enc.starts
    n = len(starts)
    if n < _VECTOR_MIN or queue_step is not None:
        qo = queue_offset
        ts_off = enc.ts_offset
        for i, pos in enumerate(starts):
            _QO_PHYS.pack_into(buf, pos + 20, qo, phys_base + pos)
            _TS.pack_into(buf, pos + ts_off, store_ts)
            qo += 1 if queue_step is None else queue_step[i]
        return
    u8 = np.frombuffer(buf, dtype=np.uint8)
    at = np.asarray(starts, dtype=np.int64)
    lanes = np.arange(8, dtype=np.int64)
    qo_arr = np.arange(queue_offset, queue_offset + n, dtype=">i8").view(np.uint8).reshape(n, 8)
    ph_arr = (at + phys_base).astype(">i8").view(np.uint8).reshape(n, 8)
    ts_arr = np.frombuffer(_TS.pack(store_ts), dtype=np.uint8)
    u8[(at + 20)[:, None] + lanes] = qo_arr
    u8[(at + 28)[:, None] + lanes] = ph_arr
    u8[(at + enc.ts_offset)[:, None] + lanes] = ts_arr
