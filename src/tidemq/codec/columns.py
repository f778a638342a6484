"""Pull bodies as columns: find the records, then gather each field with numpy.

For bulk readers that want columns rather than :class:`~tidemq.types.MessageExt`
objects (the Spark source builds Arrow arrays from them). A pull body is stored
commit-log records laid end to end (:mod:`tidemq.formats.record`). Records are found
without per-record Python work when possible: the positions of the V1 magic are the
candidates, accepted when they chain by ``TOTALSIZE`` exactly; otherwise each
``TOTALSIZE`` is read in turn (the one per-record Python loop). Fixed fields are then
gathered for all records at once, on demand, by name (:data:`FIELDS`); variable fields
are located, not copied (:class:`Spans` into the body buffer):

======  ====  ==================  ======================================================
offset  size  field               column
======  ====  ==================  ======================================================
0       4     TOTALSIZE           (checked: ``91 + body + topic + properties``)
4       4     MAGICCODE           (checked: V1)
12      4     QUEUEID             ``queue_id``
16      4     FLAG                ``flag``
20      8     QUEUEOFFSET         ``queue_offset``
28      8     PHYSICALOFFSET      ``physical_offset``
36      4     SYSFLAG             ``sys_flag`` (checked: no compression, no inner batch,
                                  IPv4 hosts)
40      8     BORNTIMESTAMP       ``born_timestamp`` (ms)
48      8     BORNHOST            (IPv4 + port)
56      8     STORETIMESTAMP      ``store_timestamp`` (ms)
64      8     STOREHOST           IPv4 + port: with PHYSICALOFFSET, the offset message id
72      4     RECONSUMETIMES      ``reconsume_times``
76      8     PREPARED_TX_OFFSET  ``prepared_tx_offset``
84      4+n   BODYLENGTH, BODY    :attr:`RecordColumns.body`
88+n    1+t   TOPICLENGTH, TOPIC  :attr:`RecordColumns.topic`
..      2+p   PROPERTIES          :attr:`RecordColumns.properties` (the raw property text
                                  of specs/store.md §1.5)
======  ====  ==================  ======================================================

Scope is the common record: V1 magic, IPv4 hosts, neither compressed nor an inner batch.
If any record of the body is outside it, or does not check out, :func:`decode_columns`
returns ``None`` and the caller decodes that body with
:func:`tidemq.codec.message.decode_messages`, which handles (or rejects) everything.
Body CRCs are not checked (as ``decode_messages`` by default). Sans-IO, numpy only.

Inner batches (RIP-26) have columns of their own, :func:`decode_entry_columns`: a body
whose records are all inner batches gives one row per sub-message, as
``decode_messages`` unwraps them -- the batch inflated when compressed, entry ``i`` at
``queue_offset = outer + i`` with its own flag, body and properties, the outer record's
times, and, without a ``UNIQ_KEY``, the outer record's offset message id. The entries
(:mod:`tidemq.formats.batch`) are found by strided comparisons when they share one
layout, else by a walk; the Python work is per record, not per sub-message.
"""

from __future__ import annotations

import binascii
import dataclasses
import struct

import numpy as np
import numpy.typing as npt

from tidemq.codec.compression import COMPRESSED, compression_of, decompress
from tidemq.errors import CorruptRecord
from tidemq.formats import record as rec
from tidemq.formats.batch import iter_batch, uniform_layout
from tidemq.formats.msgid import encode_offset_msg_id

__all__ = ["FIELDS", "EntryColumns", "RecordColumns", "Spans", "decode_columns",
           "decode_entry_columns"]

Buffer = bytes | bytearray | memoryview
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

_NEED_UNWRAP = 0x40
_INNER_BATCH = 0x80
_SLOW_FLAGS = (COMPRESSED | _NEED_UNWRAP | _INNER_BATCH | rec.SYSFLAG_BORNHOST_V6
               | rec.SYSFLAG_STOREHOST_V6)
_I32 = struct.Struct(">i")
_MIN = rec.MIN_RECORD_SIZE  # 91
_FIXED = rec.FIXED_V4_SIZE  # 88: BODY starts here

#: Fixed fields by name: (offset in the record, numpy big-endian dtype).
FIELDS: dict[str, tuple[int, str]] = {
    "queue_id": (12, ">i4"),
    "flag": (16, ">i4"),
    "queue_offset": (20, ">i8"),
    "physical_offset": (28, ">i8"),
    "sys_flag": (36, ">i4"),
    "born_timestamp": (40, ">i8"),
    "store_timestamp": (56, ">i8"),
    "reconsume_times": (72, ">i4"),
    "prepared_tx_offset": (76, ">i8"),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Spans:
    """Variable-length values inside a buffer: value ``i`` is
    ``buf[start[i] : start[i] + length[i]]``; spans come in buffer order, never overlap."""

    start: I64
    length: I64

    def value(self, buf: U8, i: int) -> bytes:
        s = int(self.start[i])
        return buf[s : s + int(self.length[i])].tobytes()


class RecordColumns:
    """The records of one pull body (see the module docstring). ``buf`` is the body as a
    uint8 array (no copy); :meth:`field` gathers one fixed field of every record."""

    __slots__ = ("body", "buf", "pos", "properties", "topic")

    def __init__(self, buf: U8, pos: I64, body: Spans, topic: Spans,
                 properties: Spans) -> None:
        self.buf = buf
        self.pos = pos
        self.body = body
        self.topic = topic
        self.properties = properties

    def __len__(self) -> int:
        return len(self.pos)

    def field(self, name: str) -> I64:
        """Field ``name`` of :data:`FIELDS` for every record, as int64."""
        at, dtype = FIELDS[name]
        return _gather(self.buf, self.pos + at, dtype)

    def offset_msg_ids(self, rows: I64) -> list[str]:
        """Offset message ids (:mod:`tidemq.formats.msgid`: store host, then physical
        offset, upper-case hex) of the records at ``rows``: the id of a message that has
        no ``UNIQ_KEY`` property."""
        pos = self.pos[rows]
        raw = np.concatenate([self.buf[(pos + 64)[:, None] + np.arange(8)],
                              self.buf[(pos + 28)[:, None] + np.arange(8)]], axis=1)
        return [binascii.hexlify(row.tobytes()).decode("ascii").upper() for row in raw]


def _gather(buf: U8, at: I64, dtype: str) -> I64:
    """The big-endian integer of type ``dtype`` at each position ``at``: one gather from
    a view whose element ``k`` is the integer starting at byte ``k`` (stride 1)."""
    width = np.dtype(dtype).itemsize
    if len(at) == 0 or len(buf) < width:
        return np.zeros(len(at), np.int64)
    every = np.ndarray(shape=(len(buf) - width + 1,), dtype=dtype, buffer=buf, strides=(1,))
    out: I64 = every[at].astype(np.int64)
    return out


_MAGIC = struct.pack(">i", rec.MAGIC_V1)


def _walk_by_magic(buf: U8) -> I64 | None:
    """Record starts found without a Python loop: every position whose next bytes 4..7
    are the V1 magic is a candidate, and the candidates must chain exactly (each start
    plus its TOTALSIZE is the next start, the last ends the body). ``None`` when they
    do not -- a body or property text that happens to contain the magic, or a record
    that is not V1 -- and :func:`_walk` decides."""
    if len(buf) < _MIN:
        return None
    cand = np.flatnonzero(buf[4:] == _MAGIC[0])
    for i in (1, 2, 3):
        cand = cand[cand + 4 + i < len(buf)]
        cand = cand[buf[cand + 4 + i] == _MAGIC[i]]
    if len(cand) == 0 or cand[0] != 0:
        return None
    cand = cand[cand <= len(buf) - _MIN]
    ends = cand + _gather(buf, cand, ">i4")
    if np.any(ends[:-1] != cand[1:]) or ends[-1] != len(buf):
        return None
    out: I64 = cand.astype(np.int64)
    return out


def _walk(view: memoryview | bytes) -> I64 | None:
    """Start positions of the records by following TOTALSIZE from record to record, or
    ``None`` if the chain does not end exactly at the end of the body."""
    starts: list[int] = []
    append = starts.append
    unpack = _I32.unpack_from
    pos, end = 0, len(view)
    last = end - _MIN
    while pos < end:
        if pos > last:
            return None
        append(pos)
        total = unpack(view, pos)[0]
        if total < _MIN:
            return None
        pos += total
    return np.array(starts, np.int64) if pos == end else None


def decode_columns(body: Buffer) -> RecordColumns | None:
    """The records of a pull body as columns, or ``None`` when a record needs the general
    decoder (see the module docstring). Never raises on bad input: ``None`` instead."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    buf = np.frombuffer(view, np.uint8)
    pos = _walk_by_magic(buf)
    if pos is None:
        pos = _walk(view)
    if pos is None:
        return None
    stop = np.append(pos[1:], len(buf))
    body_len = _gather(buf, pos + 84, ">i4")
    body_end = pos + _FIXED + body_len
    if (np.any(_gather(buf, pos + 4, ">i4") != rec.MAGIC_V1)
            or np.any(_gather(buf, pos + 36, ">i4") & _SLOW_FLAGS)
            or np.any(body_len < 0) or np.any(body_end + 3 > stop)):
        return None
    topic_len = buf[body_end].astype(np.int64)
    topic_end = body_end + 1 + topic_len
    if np.any(topic_len > rec.MAX_V1_TOPIC_BYTES) or np.any(topic_end + 2 > stop):
        return None
    props_len = _gather(buf, topic_end, ">i2")
    if np.any(props_len < 0) or np.any(topic_end + 2 + props_len != stop):
        return None
    return RecordColumns(buf, pos, Spans(pos + _FIXED, body_len),
                         Spans(body_end + 1, topic_len), Spans(topic_end + 2, props_len))


# ---------------------------------------------------------------- inner batches

#: Default bound on one inflated batch (as :data:`tidemq.codec.message.DEFAULT_MAX_DECOMPRESSED`).
_MAX_INFLATED = 16 * 1024 * 1024
#: Per-record values an entry takes from its record, by :data:`FIELDS` name (the same
#: names as :class:`~tidemq.formats.record.Record`'s).
_RECORD_FIELDS = ("queue_id", "physical_offset", "sys_flag", "born_timestamp",
                  "store_timestamp", "reconsume_times", "prepared_tx_offset")


class EntryColumns:
    """The sub-messages of a body of inner-batch records (see the module docstring), with
    the interface of :class:`RecordColumns`: ``buf`` holds the batches' entries end to
    end (inflated), ``pos`` each entry's start in it, :meth:`field` a column by name."""

    __slots__ = ("_ids", "_offsets", "_record", "_values", "body", "buf", "pos",
                 "properties")

    def __init__(self, buf: U8, pos: I64, body: Spans, properties: Spans, offsets: I64,
                 record: I64, values: dict[str, I64], ids: list[str]) -> None:
        self.buf = buf
        self.pos = pos
        self.body = body
        self.properties = properties
        #: Each entry's queue offset.
        self._offsets = offsets
        #: Each entry's record, an index into ``values`` and ``ids``.
        self._record = record
        self._values = values
        self._ids = ids

    def __len__(self) -> int:
        return len(self.pos)

    def field(self, name: str) -> I64:
        """Field ``name`` of :data:`FIELDS` for every entry, as int64: ``flag`` is the
        entry's, ``queue_offset`` its record's plus its place in the batch, the others
        are its record's."""
        if name == "flag":
            return _gather(self.buf, self.pos + 12, ">i4")
        if name == "queue_offset":
            return self._offsets
        if name not in FIELDS:
            raise KeyError(name)
        values: I64 = self._values[name][self._record]
        return values

    def offset_msg_ids(self, rows: I64) -> list[str]:
        """The offset message id of each entry at ``rows``: its record's."""
        ids = self._ids
        return [ids[r] for r in self._record[rows].tolist()]


def _entry_starts(batch: memoryview) -> I64 | None:
    layout = uniform_layout(batch)
    if layout is not None:
        return np.arange(0, len(batch), layout[0], dtype=np.int64)
    try:
        return np.array([e.offset for e in iter_batch(batch)], np.int64)
    except CorruptRecord:
        return None


def decode_entry_columns(body: Buffer, *,
                         max_decompressed: int = _MAX_INFLATED) -> EntryColumns | None:
    """The sub-messages of a body whose records are all inner batches, as columns; ``None``
    when a record is not an inner batch, does not decode, or holds a batch that does not
    (inflated beyond ``max_decompressed``, truncated, malformed) -- the caller then
    decodes the body with :func:`tidemq.codec.message.decode_messages`, which says what
    is wrong. Never raises on bad input."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    chunks: list[U8] = []
    starts: list[I64] = []
    counts: list[int] = []
    bases: list[int] = []
    values: dict[str, list[int]] = {name: [] for name in _RECORD_FIELDS}
    ids: list[str] = []
    at, end, shift = 0, len(view), 0
    while at < end:
        try:
            r = rec.decode_record(view, at)
            if isinstance(r, rec.Blank):
                return None
            flags = r.sys_flag
            if not (flags & _NEED_UNWRAP and flags & _INNER_BATCH):
                return None
            ctype = compression_of(flags)
            batch: memoryview = r.body
            if ctype is not None:
                batch = memoryview(decompress(r.body, ctype, max_decompressed))
                flags &= ~COMPRESSED
        except CorruptRecord:
            return None
        found = _entry_starts(batch)
        if found is None or not len(found):
            return None
        chunks.append(np.frombuffer(batch, np.uint8))
        starts.append(found + shift)
        counts.append(len(found))
        shift += len(batch)
        bases.append(r.queue_offset)
        unwrapped = r._replace(sys_flag=flags)  # what its entries say: inflated
        for name in _RECORD_FIELDS:
            values[name].append(getattr(unwrapped, name))
        ids.append(encode_offset_msg_id(r.store_host, r.physical_offset))
        at += r.total_size
    if not chunks:
        return None
    buf: U8 = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    pos = np.concatenate(starts) if len(starts) > 1 else starts[0]
    body_len = _gather(buf, pos + 16, ">i4")
    props_len = _gather(buf, pos + 20 + body_len, ">i2")
    n = np.array(counts, np.int64)
    record = np.repeat(np.arange(len(counts), dtype=np.int64), n)
    # entry i of a batch at offset base: base + i (the batch's first entry at cumsum - n)
    offsets = np.repeat(np.array(bases, np.int64) - (np.cumsum(n) - n), n) + np.arange(
        len(pos), dtype=np.int64)
    return EntryColumns(buf, pos, Spans(pos + 20, body_len),
                        Spans(pos + 22 + body_len, props_len), offsets, record,
                        {k: np.array(v, np.int64) for k, v in values.items()}, ids)
