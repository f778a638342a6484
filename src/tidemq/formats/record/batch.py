"""Encoding a batch of records: outside the append lock, patched and copied inside it.

Outside the lock, a put call's messages are encoded back to back into one buffer with
QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP left as zero. Inside the append lock the
store picks the queue offset, the segment position and a store timestamp that never goes
backwards, and :func:`patch_batch` writes those three fields. A batch is never split
across segments.

Python pays per object, so batches of IPv4 records are built column-wise with numpy: the
88-byte fixed headers are one structured array, and when every body and every property
string of the batch has the same length (the usual shape of a producer batch) a cached
template record is tiled and the whole batch is one structured array whose fields are the
columns that vary (CRC, flag, body, properties; offsets and store time when patched):
a dozen numpy calls per batch whatever its size. Only the body CRCs are computed per
message.

A client batch body of one layout arrives as :class:`ClientEntries` -- columns over the
body's bytes, never a message object. The store writes such a batch straight into its
segment, inside the lock: :func:`uniform_head` gives the template record, and one
:func:`~.loops.stamp_records` call copies each entry's flag, body and properties into it,
takes the body CRCs and writes the offsets and times -- the same bytes :func:`encode_batch`
writes for its messages. The patch of records of one size is one call too (:mod:`.loops`:
compiled, or numpy).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from tidemq.formats.record.encode import encode_record
from tidemq.formats.record.layout import (
    FIXED_V4,
    FIXED_V4_SIZE,
    MAGIC_V1,
    MAX_V1_TOPIC_BYTES,
    OFF_BODY,
    OFF_BODY_CRC,
    OFF_BORN_TIMESTAMP,
    OFF_FLAG,
    OFF_PHYSICAL_OFFSET,
    OFF_QUEUE_ID,
    OFF_QUEUE_OFFSET,
    OFF_STORE_TIMESTAMP,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_HOSTS_V6,
    V4_FIELDS,
    HostAddr,
    crc32,
    store_timestamp_offset,
)
from tidemq.formats.record.loops import patch_records

__all__ = ["HEADER_DTYPE", "ClientEntries", "EncodedBatch", "encode_batch", "patch_batch",
           "uniform_head"]

_QO_PHYS = struct.Struct(">qq")
_TS = struct.Struct(">q")
_QUEUE_ID = struct.Struct(">i")
_I16 = struct.Struct(">h")
_VECTOR_MIN = 8
assert OFF_PHYSICAL_OFFSET == OFF_QUEUE_OFFSET + 8  # _QO_PHYS writes both

#: FIXED_V4 as a numpy record, field by field.
HEADER_DTYPE = np.dtype([
    ("total_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
    ("flag", ">i4"), ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"),
    ("born_timestamp", ">i8"), ("born_ip", "S4"), ("born_port", ">i4"),
    ("store_timestamp", ">i8"), ("store_ip", "S4"), ("store_port", ">i4"),
    ("reconsume_times", ">i4"), ("prepared_tx_offset", ">i8"), ("body_length", ">i4"),
])
_HEADER_FIELDS = HEADER_DTYPE.fields
assert HEADER_DTYPE.itemsize == FIXED_V4.size and _HEADER_FIELDS is not None
assert all(_HEADER_FIELDS[name][1] == at for name, at in V4_FIELDS.items()
           if name in _HEADER_FIELDS)


class EncodedBatch(NamedTuple):
    buf: bytearray
    starts: Sequence[int]  # a range when every record has the same size
    sizes: Sequence[int]
    ts_offset: int  # STORETIMESTAMP position inside each record


class ClientEntries(Protocol):
    """A client batch body (:mod:`tidemq.formats.batch`) of ``n`` entries of one layout:
    ``entry_size`` bytes each, ``body_length``-byte bodies, and ``cluster`` (property
    bytes the broker appends to every message, or empty); ``properties_length`` is each
    message's stored property length (the entry's and ``cluster``)."""

    @property
    def data(self) -> bytes | bytearray | memoryview: ...
    @property
    def n(self) -> int: ...
    @property
    def entry_size(self) -> int: ...
    @property
    def body_length(self) -> int: ...
    @property
    def cluster(self) -> bytes: ...
    @property
    def properties_length(self) -> int: ...


Bodies = Sequence[bytes | bytearray | memoryview]


def encode_batch(
    topic: str, queue_id: int, bodies: Bodies, props: Sequence[bytes], flags: Sequence[int], *,
    sys_flag: int, born_timestamp: int, born_host: HostAddr, store_host: HostAddr,
    reconsume_times: int = 0, body_lengths: set[int] | None = None,
    prepared_tx_offset: int = 0,
) -> EncodedBatch:
    """Encode a batch given as columns (``bodies[i]``, ``props[i]`` and ``flags[i]`` are
    message ``i``'s) back to back; offsets and store time are patched later.
    ``body_lengths``: the set of ``len(body)``, when the caller has it already.
    ``prepared_tx_offset``: PREPAREDTRANSACTIONOFFSET of every record (a committed
    transaction's: its half message's commit-log offset)."""
    tbytes = topic.encode("utf-8")
    v4 = len(born_host.ip) == 4 and len(store_host.ip) == 4 and len(tbytes) <= MAX_V1_TOPIC_BYTES
    if not v4 or len(bodies) < _VECTOR_MIN or prepared_tx_offset:
        # below 8 records numpy's set-up costs more; a committed transaction is one record
        return _encode_each(tbytes, queue_id, bodies, props, flags, sys_flag, born_timestamp,
                            born_host, store_host, reconsume_times, prepared_tx_offset)
    if body_lengths is None:
        body_lengths = set(map(len, bodies))
    if (len(bodies) >= _VECTOR_MIN and len(body_lengths) == 1
            and len(set(map(len, props))) == 1):
        return _encode_uniform(tbytes, queue_id, bodies, props, flags,
                               sys_flag & ~SYSFLAG_HOSTS_V6, born_timestamp, born_host,
                               store_host, reconsume_times)
    return _encode_columns(tbytes, queue_id, bodies, props, flags, sys_flag & ~SYSFLAG_HOSTS_V6,
                           born_timestamp, born_host, store_host, reconsume_times)


def _encode_each(tbytes: bytes, queue_id: int, bodies: Bodies, props: Sequence[bytes],
                 flags: Sequence[int], sys_flag: int, born_timestamp: int, born_host: HostAddr,
                 store_host: HostAddr, reconsume_times: int,
                 prepared_tx_offset: int = 0) -> EncodedBatch:
    parts, starts, sizes = [], [], []
    pos = 0
    for body, properties, flag in zip(bodies, props, flags, strict=True):
        rec = encode_record(
            topic=tbytes, queue_id=queue_id, body=body, properties=properties, flag=flag,
            sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
            store_host=store_host, reconsume_times=reconsume_times,
            prepared_tx_offset=prepared_tx_offset,
        )
        parts.append(rec)
        starts.append(pos)
        sizes.append(len(rec))
        pos += len(rec)
    # encode_record sets the host bits from the hosts' widths, whatever ``sys_flag`` says
    born_v6 = SYSFLAG_BORNHOST_V6 if len(born_host.ip) == 16 else 0
    return EncodedBatch(bytearray().join(parts), starts, sizes, store_timestamp_offset(born_v6))


def _crc_column(bodies: Bodies) -> npt.NDArray[np.uint32]:
    crcs = np.fromiter(map(crc32, bodies), dtype=">u4", count=len(bodies))
    crcs &= 0x7FFFFFFF
    return crcs


def _encode_columns(tbytes: bytes, queue_id: int, bodies: Bodies, props: Sequence[bytes],
                    flags: Sequence[int], sys_flag: int, born_timestamp: int,
                    born_host: HostAddr, store_host: HostAddr,
                    reconsume_times: int) -> EncodedBatch:
    n = len(bodies)
    blens = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    plens = np.fromiter(map(len, props), dtype=np.int64, count=n)
    tail = bytes([len(tbytes)]) + tbytes
    sizes = FIXED_V4_SIZE + blens + len(tail) + 2 + plens
    hdr = np.zeros(n, dtype=HEADER_DTYPE)
    hdr["total_size"] = sizes
    hdr["magic"] = MAGIC_V1
    hdr["body_crc"] = _crc_column(bodies)
    hdr["queue_id"] = queue_id
    if any(flags):
        hdr["flag"] = flags
    hdr["sys_flag"] = sys_flag
    hdr["born_timestamp"] = born_timestamp
    hdr["born_ip"] = born_host.ip
    hdr["born_port"] = born_host.port
    hdr["store_ip"] = store_host.ip
    hdr["store_port"] = store_host.port
    hdr["reconsume_times"] = reconsume_times
    hdr["body_length"] = blens
    starts_arr = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts_arr[1:])
    heads = hdr.tobytes()
    pieces: list[bytes | bytearray | memoryview] = []
    fixed = FIXED_V4_SIZE
    for i in range(n):
        pieces += (heads[i * fixed : i * fixed + fixed], bodies[i], tail,
                   _I16.pack(len(props[i])), props[i])
    return EncodedBatch(bytearray(b"".join(pieces)), starts_arr.tolist(), sizes.tolist(),
                        OFF_STORE_TIMESTAMP)


def _encode_uniform(tbytes: bytes, queue_id: int, bodies: Bodies, props: Sequence[bytes],
                    flags: Sequence[int], sys_flag: int, born_timestamp: int,
                    born_host: HostAddr, store_host: HostAddr,
                    reconsume_times: int) -> EncodedBatch:
    """Every record has the same size: tile one template record, then fill the varying
    columns through one structured view of the whole batch."""
    n = len(bodies)
    blen, plen = len(bodies[0]), len(props[0])
    template, rows_dtype = _uniform_layout(tbytes, blen, plen, sys_flag, born_host, store_host,
                                           reconsume_times)
    head = bytearray(template)
    _QUEUE_ID.pack_into(head, OFF_QUEUE_ID, queue_id)
    _TS.pack_into(head, OFF_BORN_TIMESTAMP, born_timestamp)
    rec = len(head)
    buf = head * n  # the template tiled: one allocation, one copy
    rows = np.frombuffer(buf, dtype=rows_dtype)
    crcs = np.fromiter(map(crc32, bodies), dtype=np.uint32, count=n)
    crcs &= 0x7FFFFFFF
    rows["crc"] = crcs
    if any(flags):
        rows["flag"] = flags
    if blen:
        rows["body"] = np.frombuffer(b"".join(bodies), dtype=rows_dtype["body"])
    if plen:
        rows["props"] = np.frombuffer(b"".join(props), dtype=rows_dtype["props"])
    return EncodedBatch(buf, range(0, rec * n, rec), [rec] * n, OFF_STORE_TIMESTAMP)


def uniform_head(topic: str, batch: ClientEntries, *, sys_flag: int, born_host: HostAddr,
                 store_host: HostAddr, reconsume_times: int = 0) -> bytes | None:
    """The record every message of ``batch`` starts from, for
    :func:`~.loops.stamp_records`: ``batch.cluster`` in it; body, properties, CRC, queue
    id, offsets and times zero (the stamp writes them). One object for every batch of the
    same topic, layout and hosts; ``None`` when the records cannot share one (IPv6 hosts,
    a long topic): encode the messages then."""
    if len(born_host.ip) != 4 or len(store_host.ip) != 4:
        return None
    return _head(topic, batch.body_length, batch.properties_length, batch.cluster,
                 sys_flag & ~SYSFLAG_HOSTS_V6, born_host, store_host, reconsume_times)


@functools.lru_cache(maxsize=256)
def _head(topic: str, blen: int, plen: int, cluster: bytes, sys_flag: int,
          born_host: HostAddr, store_host: HostAddr, reconsume_times: int) -> bytes | None:
    """:func:`uniform_head`'s template, ``cluster`` ending its properties (``None``: the
    topic is too long for the V1 layout)."""
    tbytes = topic.encode("utf-8")
    if len(tbytes) > MAX_V1_TOPIC_BYTES:
        return None
    template, _ = _uniform_layout(tbytes, blen, plen, sys_flag, born_host, store_host,
                                  reconsume_times)
    if not cluster:
        return template
    return template[: len(template) - len(cluster)] + cluster


@functools.lru_cache(maxsize=256)
def _uniform_layout(tbytes: bytes, blen: int, plen: int, sys_flag: int, born_host: HostAddr,
                    store_host: HostAddr, reconsume_times: int) -> tuple[bytes, np.dtype[np.void]]:
    """One IPv4 record of a uniform batch with zero body, properties, CRC, queue id,
    offsets and timestamps (the caller patches the queue id and born time), and the
    structured dtype of such a record: the columns :func:`_encode_uniform` fills (offsets
    and store time are patched by :func:`patch_batch`)."""
    template = bytes(encode_record(
        topic=tbytes, queue_id=0, body=bytes(blen), properties=bytes(plen), sys_flag=sys_flag,
        born_host=born_host, store_host=store_host, reconsume_times=reconsume_times, crc=0,
    ))
    rec = len(template)
    names = ["crc", "flag"]
    formats: list[object] = [">u4", ">i4"]
    offsets = [OFF_BODY_CRC, OFF_FLAG]
    if blen:
        names.append("body")
        formats.append(f"V{blen}")
        offsets.append(OFF_BODY)
    if plen:
        names.append("props")
        formats.append(f"V{plen}")
        offsets.append(rec - plen)
    return template, np.dtype({"names": names, "formats": formats, "offsets": offsets,
                               "itemsize": rec})


def patch_batch(enc: EncodedBatch, queue_offset: int, phys_base: int, store_ts: int,
                queue_step: Sequence[int] | None = None) -> None:
    """Fill QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of every record."""
    buf, starts = enc.buf, enc.starts
    n = len(starts)
    if type(starts) is range and queue_step is None:  # records of one size
        patch_records(buf, n, starts.step, queue_offset, phys_base, store_ts, enc.ts_offset)
        return
    if n < _VECTOR_MIN or queue_step is not None:
        qo_i = queue_offset
        ts_off = enc.ts_offset
        for i, pos in enumerate(starts):
            _QO_PHYS.pack_into(buf, pos + OFF_QUEUE_OFFSET, qo_i, phys_base + pos)
            _TS.pack_into(buf, pos + ts_off, store_ts)
            qo_i += 1 if queue_step is None else queue_step[i]
        return
    u8 = np.frombuffer(buf, dtype=np.uint8)
    at = np.asarray(starts, dtype=np.int64)
    lanes = np.arange(8, dtype=np.int64)
    qo_arr = np.arange(queue_offset, queue_offset + n, dtype=">i8").view(np.uint8).reshape(n, 8)
    ph_arr = (at + phys_base).astype(">i8").view(np.uint8).reshape(n, 8)
    ts_arr = np.frombuffer(_TS.pack(store_ts), dtype=np.uint8)
    u8[(at + OFF_QUEUE_OFFSET)[:, None] + lanes] = qo_arr
    u8[(at + OFF_PHYSICAL_OFFSET)[:, None] + lanes] = ph_arr
    u8[(at + enc.ts_offset)[:, None] + lanes] = ts_arr
