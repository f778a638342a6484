"""Pull bodies to Arrow record batches with the source's schema.

Two paths give the same rows:

* :func:`columns_to_batch` -- the common records (:mod:`tidemq.client.records`): no
  per-message Python object at all. Bodies and property texts are cut out of the pull
  body by one Arrow ``take`` over an array whose offsets interleave the values with the
  gaps between them; the property texts are split into the map column with Arrow
  compute (the rules of :mod:`tidemq.formats.properties`); ``keys``, ``tags`` and
  ``msg_id`` are map look-ups;
  Inner batches (RIP-26) take the same path through their own columns
  (:func:`~tidemq.client.records.decode_entry_columns`: a row per sub-message, the batch
  inflated when compressed);
* :func:`to_batch` -- from :class:`~tidemq.types.MessageExt` objects, for bodies the
  columnar decoders leave out (compressed single messages, bodies mixing inner batches
  with other records, IPv6 hosts) and for LMQ reads (whose offsets come from properties).

Inner batches arrive unrolled (each sub-message is its own row with its own offset).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tidemq.client.records import EntryColumns, RecordColumns, Spans
from tidemq.errors import CorruptRecord
from tidemq.formats.properties import PropertyKey
from tidemq.types import MessageExt

__all__ = ["ARROW_SCHEMA", "DDL", "KAFKA_ARROW_SCHEMA", "LMQ_ARROW_SCHEMA", "LMQ_DDL",
           "columns_to_batch", "to_batch", "to_kafka"]

DDL = ("topic string, queue int, broker string, offset long, msg_id string, keys string, "
       "tags string, body binary, properties map<string,string>, "
       "born_timestamp timestamp, store_timestamp timestamp")
LMQ_DDL = DDL + ", lmq string"

_TS = pa.timestamp("us", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue", pa.int32()), ("broker", pa.string()),
    ("offset", pa.int64()), ("msg_id", pa.string()), ("keys", pa.string()),
    ("tags", pa.string()), ("body", pa.binary()), ("properties", _MAP),
    ("born_timestamp", _TS), ("store_timestamp", _TS),
])
LMQ_ARROW_SCHEMA = ARROW_SCHEMA.append(pa.field("lmq", pa.string()))
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
KAFKA_ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", _TS),
    ("timestampType", pa.int32()),
])
_KAFKA_HEADERS_SCHEMA = KAFKA_ARROW_SCHEMA.append(pa.field("headers", pa.list_(_HEADER)))
#: Kafka's timestampType of the producer's clock (``CreateTime``): ``born_timestamp``.
CREATE_TIME = 0


def to_kafka(batch: pa.RecordBatch, partition: int, headers: bool) -> pa.RecordBatch:
    """A batch of the tidemq schema in Spark's Kafka source columns: ``key`` is the
    ``KEYS`` text as bytes, ``value`` the body, ``timestamp`` the producer's clock
    (``CreateTime``), ``headers`` the properties."""
    n = batch.num_rows
    cols: list[pa.Array] = [
        batch.column("keys").cast(pa.binary()), batch.column("body"),
        batch.column("topic"), pa.repeat(pa.scalar(partition, pa.int32()), n),
        batch.column("offset"), batch.column("born_timestamp"),
        pa.repeat(pa.scalar(CREATE_TIME, pa.int32()), n),
    ]
    if not headers:
        return pa.RecordBatch.from_arrays(cols, schema=KAFKA_ARROW_SCHEMA)
    props = batch.column("properties")
    offsets = pc.subtract(props.offsets, props.offsets[0]) if n else pa.array([0], pa.int32())
    pairs = pa.StructArray.from_arrays([props.keys, props.items.cast(pa.binary())],
                                       fields=list(_HEADER))
    cols.append(pa.ListArray.from_arrays(offsets, pairs, type=pa.list_(_HEADER)))
    return pa.RecordBatch.from_arrays(cols, schema=_KAFKA_HEADERS_SCHEMA)


def to_batch(messages: Iterable[MessageExt], topic: str, broker: str, queue: int,
             lmq: str | None = None) -> pa.RecordBatch:
    msgs = list(messages)
    offsets = [m.queue_offset for m in msgs]
    if lmq is not None:
        offsets = [_lmq_offset(m, lmq) for m in msgs]
    n = len(msgs)
    cols: list[pa.Array] = [
        pa.array([topic if lmq is None else m.topic for m in msgs], pa.string()),
        pa.array([queue] * n, pa.int32()),
        pa.array([broker] * n, pa.string()),
        pa.array(offsets, pa.int64()),
        pa.array([m.msg_id for m in msgs], pa.string()),
        pa.array([m.properties.get(PropertyKey.KEYS) for m in msgs], pa.string()),
        pa.array([m.properties.get(PropertyKey.TAGS) for m in msgs], pa.string()),
        pa.array([m.body for m in msgs], pa.binary()),
        pa.array([list(m.properties.items()) for m in msgs], _MAP),
        pa.array([m.born_timestamp * 1000 for m in msgs], pa.int64()).cast(_TS),
        pa.array([m.store_timestamp * 1000 for m in msgs], pa.int64()).cast(_TS),
    ]
    schema = ARROW_SCHEMA
    if lmq is not None:
        cols.append(pa.array([lmq] * n, pa.string()))
        schema = LMQ_ARROW_SCHEMA
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _lmq_offset(m: MessageExt, lmq: str) -> int:
    names = m.properties.get(PropertyKey.INNER_MULTI_DISPATCH, "").split(",")
    offsets = m.properties.get(PropertyKey.INNER_MULTI_QUEUE_OFFSET, "").split(",")
    try:
        return int(offsets[names.index(lmq)])
    except (ValueError, IndexError):
        return m.queue_offset


# ---------------------------------------------------------------- the columnar path


def _interleaved(buf: pa.Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
                 kind: pa.DataType) -> pa.Array:
    """The values ``buf[starts[i]:ends[i]]`` (in buffer order, not overlapping) as one
    Arrow array of ``kind``, copied once in C++: an array over ``buf`` whose offsets
    alternate value, gap, value, ... and then its even elements. No UTF-8 check."""
    n = len(starts)
    if n == 0:
        return pa.array([], kind)
    offsets = np.empty(2 * n, np.int32)
    offsets[0::2] = starts
    offsets[1::2] = ends
    both = pa.Array.from_buffers(kind, 2 * n - 1, [None, pa.py_buffer(offsets), buf])
    return both.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))


def _cut(buf: pa.Buffer, spans: Spans, kind: pa.DataType) -> pa.Array:
    """The values of ``spans`` as an array of ``kind`` (strings are checked for UTF-8)."""
    values = _interleaved(buf, spans.start, spans.start + spans.length, pa.binary())
    return values if kind == pa.binary() else values.cast(kind)


_WORDS = ((8, "<u8"), (4, "<u4"), (2, "<u2"), (1, "u1"))


def _equal_at(data: npt.NDArray[np.uint8], at: npt.NDArray[np.int64],
              key: bytes) -> npt.NDArray[np.bool_]:
    """Whether ``data[at[i]:at[i] + len(key)] == key`` (every span within ``data``),
    compared a machine word at a time through views whose element ``k`` starts at byte
    ``k``."""
    equal = np.ones(len(at), np.bool_)
    done = 0
    while done < len(key) and len(at):
        width, dtype = next(w for w in _WORDS if w[0] <= len(key) - done)
        every = np.ndarray(shape=(len(data) - width + 1,), dtype=dtype, buffer=data,
                           strides=(1,))
        equal &= every[at + done] == np.frombuffer(key, dtype, 1, done)[0]
        done += width
    return equal


class _Pairs:
    r"""Property texts in the form every writer produces -- each row empty or
    ``name\x01value\x02`` repeated, both sides non-empty, no stray separator -- located
    with two byte scans: pair ``k`` has its name at ``data[starts[k]:ones[k]]`` and its
    value at ``data[ones[k] + 1:twos[k]]``, and belongs to row ``rows[k]``."""

    def __init__(self, data: npt.NDArray[np.uint8], row_start: npt.NDArray[np.int64],
                 starts: npt.NDArray[np.int64], ones: npt.NDArray[np.int64],
                 twos: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]) -> None:
        self.data = data
        self.buf = pa.py_buffer(data)
        self.row_start = row_start
        self.starts, self.ones, self.twos = starts, ones, twos
        self.counts = counts
        self.rows = np.repeat(np.arange(len(counts)), counts)

    @classmethod
    def split(cls, texts: pa.StringArray) -> _Pairs | None:
        """The pairs of ``texts``, or ``None`` if any row is in another form."""
        n = len(texts)
        _validity, offs_buf, data_buf = texts.buffers()
        offs = np.frombuffer(offs_buf, np.int32, n + 1, texts.offset * 4).astype(np.int64)
        base, top = int(offs[0]), int(offs[-1])
        data = np.frombuffer(data_buf, np.uint8)[base:top]
        ones = np.flatnonzero(data == 1)
        twos = np.flatnonzero(data == 2)
        row_start, row_end = offs[:-1] - base, offs[1:] - base
        filled = row_end > row_start
        if (len(ones) != len(twos) or np.any(data[row_end[filled] - 1] != 2)
                or np.any(ones >= twos)):
            return None
        starts = np.empty(len(twos), np.int64)
        starts[:1] = 0
        starts[1:] = twos[:-1] + 1
        if np.any(ones <= starts) or np.any(twos <= ones + 1):  # empty side, out of turn
            return None
        ends = np.searchsorted(twos, row_end, side="left")  # pairs ending in each row
        counts = np.diff(ends, prepend=0)
        return cls(data, row_start, starts, ones, twos, counts)

    def map_array(self) -> pa.MapArray:
        offsets = np.zeros(len(self.counts) + 1, np.int32)
        np.cumsum(self.counts, out=offsets[1:])
        names = _interleaved(self.buf, self.starts, self.ones, pa.string())
        values = _interleaved(self.buf, self.ones + 1, self.twos, pa.string())
        return pa.MapArray.from_arrays(pa.array(offsets), names, values)

    def lookup(self, name: str) -> pa.StringArray:
        """Each row's value of property ``name`` (the last if repeated), else null."""
        key = name.encode()
        hit = np.flatnonzero(self.ones - self.starts == len(key))
        hit = hit[_equal_at(self.data, self.starts[hit], key)]
        rows = self.rows[hit]
        if len(rows) > 1 and np.any(rows[1:] == rows[:-1]):  # a repeated name: the last
            last = np.append(rows[1:] != rows[:-1], True)
            hit, rows = hit[last], rows[last]
        n = len(self.counts)
        start = self.row_start.copy()  # a row without the name: empty, in buffer order
        end = self.row_start.copy()
        start[rows] = self.ones[hit] + 1
        end[rows] = self.twos[hit]
        values = _interleaved(self.buf, start, end, pa.string())
        if len(rows) == n:
            return values
        valid = np.zeros(n, np.bool_)
        valid[rows] = True
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        _none, offsets, data = values.buffers()
        return pa.Array.from_buffers(pa.string(), n, [bitmap, offsets, data],
                                     offset=values.offset)


def _properties(texts: pa.StringArray) -> pa.MapArray:
    r"""Property texts (``name\x01value\x02...``) in any form to a map column, with the
    rules of :func:`~tidemq.formats.properties.decode_properties`: segments split at
    ``\x02``, those shorter than 3 characters ignored, each split at its first ``\x01``,
    pairs with an empty side dropped. A repeated name stays in the map twice (look-ups
    take the last, as the decoder keeps the last)."""
    n = len(texts)
    segments = pc.split_pattern(texts, "\x02")
    rows = pc.list_parent_indices(segments).to_numpy()
    flat = segments.flatten()
    pairs = pc.split_pattern(flat, "\x01", max_splits=1)
    keep = pc.and_(pc.greater_equal(pc.utf8_length(flat), 3),
                   pc.equal(pc.list_value_length(pairs), 2))
    pairs = pairs.filter(keep)
    rows = rows[keep.to_numpy(zero_copy_only=False)]
    both = pairs.flatten()
    names = both.take(pa.array(np.arange(0, len(both), 2, dtype=np.int64)))
    values = both.take(pa.array(np.arange(1, len(both), 2, dtype=np.int64)))
    full = pc.and_(pc.greater(pc.utf8_length(names), 0),
                   pc.greater(pc.utf8_length(values), 0))
    if not pc.all(full).as_py():
        mask = full.to_numpy(zero_copy_only=False)
        names, values, rows = names.filter(full), values.filter(full), rows[mask]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), names, values)


def columns_to_batch(cols: RecordColumns | EntryColumns, topic: str, broker: str,
                     queue: int) -> pa.RecordBatch:
    """The rows of ``cols`` (see the module docstring); raises :class:`CorruptRecord` if
    a property text is not UTF-8."""
    n = len(cols)
    buf = pa.py_buffer(cols.buf)
    try:
        texts = _cut(buf, cols.properties, pa.string())
    except pa.ArrowInvalid as exc:
        raise CorruptRecord(f"properties are not UTF-8: {exc}") from None
    pairs = _Pairs.split(texts)
    if pairs is not None:
        props = pairs.map_array()
        lookup = pairs.lookup
    else:
        props = _properties(texts)

        def lookup(name: str) -> pa.StringArray:
            return pc.map_lookup(props, pa.scalar(name), "last")

    msg_id = lookup(PropertyKey.UNIQ_KEY)
    if msg_id.null_count:
        missing = np.flatnonzero(msg_id.is_null().to_numpy(zero_copy_only=False))
        ids = msg_id.to_pylist()
        for row, text in zip(missing.tolist(), cols.offset_msg_ids(missing), strict=True):
            ids[row] = text
        msg_id = pa.array(ids, pa.string())
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(queue, pa.int32()), n),
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.array(cols.field("queue_offset"), pa.int64()),
        msg_id,
        lookup(PropertyKey.KEYS),
        lookup(PropertyKey.TAGS),
        _cut(buf, cols.body, pa.binary()),
        props,
        pa.array(cols.field("born_timestamp") * 1000, _TS),
        pa.array(cols.field("store_timestamp") * 1000, _TS),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
