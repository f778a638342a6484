"""Records as columns: find the records of a body, then gather each field with numpy.

For bulk readers that want columns rather than :class:`~tidemq.types.MessageExt`
objects (the Spark source builds Arrow arrays from them; ``PullConsumer.poll_batches``
hands them to the application). A pull body is stored commit-log records laid end to end
(:mod:`tidemq.formats.record`). Records are found without per-record Python work when
possible: records of one size (the first record's ``TOTALSIZE`` divides the body and
every ``TOTALSIZE`` at its multiples says so) are a strided array, read through views
with that stride instead of gathers; else the positions of the V1 magic are the
candidates, accepted when they chain by ``TOTALSIZE`` exactly; otherwise (and first for
big records, where the scan costs more) each ``TOTALSIZE`` is read in turn (the one
per-record Python loop). Fixed fields are then gathered for all records at once, on
demand, by name (:data:`FIELDS`); variable fields are located, not copied (:class:`Spans`
into the body buffer), and :func:`cut` makes them bytes -- one ``struct`` unpack per run
of values of one length at one spacing:

==================  ==================================================================
record field        column
==================  ==================================================================
TOTALSIZE           (checked: ``91 + body + topic + properties``)
MAGICCODE           (checked: V1)
QUEUEID             ``queue_id``
FLAG                ``flag``
QUEUEOFFSET         ``queue_offset``
PHYSICALOFFSET      ``physical_offset``
SYSFLAG             ``sys_flag`` (checked: no compression, no inner batch, IPv4 hosts)
BORNTIMESTAMP       ``born_timestamp`` (ms)
STORETIMESTAMP      ``store_timestamp`` (ms)
STOREHOST           with PHYSICALOFFSET, the offset message id
RECONSUMETIMES      ``reconsume_times``
PREPARED_TX_OFFSET  ``prepared_tx_offset``
BODY                :attr:`RecordColumns.body`
TOPIC               :attr:`RecordColumns.topic`
PROPERTIES          :attr:`RecordColumns.properties` (the raw property text of
                    docs/reference/store.md §1.5)
==================  ==================================================================

The fields are where :mod:`tidemq.formats.record.layout` puts them, by name.

Scope is the common record: V1 magic, IPv4 hosts, neither compressed nor an inner batch.
If any record of the body is outside it, or does not check out, :func:`decode_columns`
returns ``None`` and the caller decodes that body with
:func:`tidemq.codec.message.decode_messages`, which handles (or rejects) everything.
Inner batches have columns of their own in :mod:`tidemq.codec.columns`, built on these.
Body CRCs are not checked (as ``decode_messages`` by default). Sans-IO, numpy only.
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
import itertools
import struct

import numpy as np
import numpy.typing as npt

from tidemq.formats.record import layout as rec

__all__ = ["FIELDS", "RecordColumns", "Spans", "cut", "decode_columns", "find_records",
           "gather", "rows_alike", "span_values", "spans_are_ascii"]

Buffer = bytes | bytearray | memoryview
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

_V6_FLAGS = rec.SYSFLAG_HOSTS_V6
_SLOW_FLAGS = rec.SYSFLAG_COMPRESSED | rec.SYSFLAG_NEED_UNWRAP | rec.SYSFLAG_INNER_BATCH | _V6_FLAGS
_BATCH_FLAGS = rec.SYSFLAG_NEED_UNWRAP | rec.SYSFLAG_INNER_BATCH
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_MIN = rec.MIN_RECORD_SIZE
_FIXED = rec.FIXED_V4_SIZE  # BODY starts here
#: A first record this big: the records are found by their TOTALSIZE chain, not the magic.
_BIG_RECORD = 2048

#: Fixed fields by name: (offset in the record, numpy big-endian dtype).
FIELDS: dict[str, tuple[int, str]] = {
    "queue_id": (rec.OFF_QUEUE_ID, ">i4"),
    "flag": (rec.OFF_FLAG, ">i4"),
    "queue_offset": (rec.OFF_QUEUE_OFFSET, ">i8"),
    "physical_offset": (rec.OFF_PHYSICAL_OFFSET, ">i8"),
    "sys_flag": (rec.OFF_SYSFLAG, ">i4"),
    "born_timestamp": (rec.OFF_BORN_TIMESTAMP, ">i8"),
    "store_timestamp": (rec.OFF_STORE_TIMESTAMP, ">i8"),
    "reconsume_times": (rec.OFF_RECONSUME_TIMES, ">i4"),
    "prepared_tx_offset": (rec.OFF_PREPARED_TX_OFFSET, ">i8"),
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


def spans_are_ascii(buf: U8, spans: Spans) -> bool:
    """Whether every byte of every span is below 0x80 (so the values are UTF-8): one
    ragged maximum over the buffer (``reduceat`` over the spans and the gaps between
    them). An empty span reads as its first byte's neighbour, so it may say ``False``
    for ASCII values: a caller falls back to a check per value, never the reverse."""
    n = len(spans.start)
    if n == 0:
        return True
    if n > 1 and len(buf):
        start, length = spans.start, spans.length
        stride = int(start[1] - start[0])
        size = int(length[0])
        if (stride >= size and int(start[-1]) + size <= len(buf)
                and (length == size).all() and (np.diff(start) == stride).all()):
            # values of one length at one spacing: rows of a strided view
            rows = np.ndarray(shape=(n, size), dtype=np.uint8, buffer=buf,
                              offset=int(start[0]), strides=(stride, 1))
            return bool(rows.max(initial=0) < 0x80)
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = spans.start
    bounds[1::2] = spans.start + spans.length
    if len(buf) == 0:
        return bool(np.all(spans.length == 0))
    if bounds[-1] >= len(buf):
        bounds = bounds[:-1]  # the span before reduces to the end of the buffer
    np.minimum(bounds, len(buf) - 1, out=bounds)  # empty spans at the very end
    top = np.maximum.reduceat(buf, bounds)[0::2]
    return bool(np.all(top < 0x80))


class RecordColumns:
    """The records of one pull body (see the module docstring). ``buf`` is the body as a
    uint8 array (no copy); :meth:`field` gathers one fixed field of every record."""

    __slots__ = ("_topic", "body", "buf", "data", "pos", "properties", "shaped", "stride",
                 "topic")

    def __init__(self, buf: U8, pos: I64, body: Spans, topic: Spans,
                 properties: Spans, data: bytes | None = None, stride: int = 0,
                 shaped: str | None = None) -> None:
        self.buf = buf
        #: Every record's size when they are all that size (``0``: they are not).
        self.stride = stride
        #: Every record has the first one's layout (body, topic and property lengths) and
        #: this topic (``None``: not known to).
        self._topic = shaped
        self.shaped = shaped is not None
        #: The body as bytes when it came as bytes (values are cut from it).
        self.data = data
        self.pos = pos
        self.body = body
        self.topic = topic
        self.properties = properties

    def __len__(self) -> int:
        return len(self.pos)

    def field(self, name: str) -> I64:
        """Field ``name`` of :data:`FIELDS` for every record, as int64."""
        at, dtype = FIELDS[name]
        return gather(self.buf, self.pos + at, dtype, self.stride)

    def part(self, start: int, stop: int) -> RecordColumns:
        """Records ``start:stop`` as columns of their own: views of these arrays over the
        same buffer (nothing is copied or checked again)."""
        rows = slice(start, stop)
        body, topic, props = self.body, self.topic, self.properties
        return RecordColumns(self.buf, self.pos[rows],
                             Spans(body.start[rows], body.length[rows]),
                             Spans(topic.start[rows], topic.length[rows]),
                             Spans(props.start[rows], props.length[rows]),
                             self.data, self.stride, self._topic)

    def offset_msg_ids(self, rows: I64) -> list[str]:
        """Offset message ids (:mod:`tidemq.formats.msgid`: store host, then physical
        offset, upper-case hex) of the records at ``rows``: the id of a message that has
        no ``UNIQ_KEY`` property."""
        pos = self.pos[rows]
        lanes = np.arange(8)
        raw = np.concatenate([self.buf[(pos + rec.OFF_STORE_HOST)[:, None] + lanes],
                              self.buf[(pos + rec.OFF_PHYSICAL_OFFSET)[:, None] + lanes]],
                             axis=1)
        return [binascii.hexlify(row.tobytes()).decode("ascii").upper() for row in raw]

    def values(self, spans: Spans, rows: I64 | None = None) -> list[bytes]:
        """The values of ``spans`` (of this buffer) at ``rows`` (``None``: all) as bytes."""
        if self.data is None:
            self.data = self.buf.tobytes()
        return span_values(self.data, spans, rows, self.stride if self.shaped else 0)

    def single_topic(self) -> str | None:
        """The topic of every record when they all have the same one and it is UTF-8,
        else ``None``."""
        if self._topic is not None:
            return self._topic
        if len(self.pos) == 0:
            return None
        length = self.topic.length
        size = int(length[0])
        if (length != size).any():
            return None
        start = self.topic.start
        if self.stride:  # the records' topics as rows of a strided view: no gather
            text = np.ndarray(shape=(len(start), size), dtype=np.uint8, buffer=self.buf,
                              offset=int(start[0]), strides=(self.stride, 1))
        else:
            text = self.buf[start[:, None] + np.arange(size)]
        if len(text) > 1 and (text[1:] != text[0]).any():
            return None
        try:
            name: str = text[0].tobytes().decode("utf-8")
        except UnicodeDecodeError:
            return None
        return name


_WIDTH = {">i2": 2, ">i4": 4, ">i8": 8}


def gather(buf: U8, at: I64, dtype: str, stride: int = 0) -> I64:
    """The big-endian integer of type ``dtype`` at each position ``at``: one gather from
    a view whose element ``k`` is the integer starting at byte ``k`` (stride 1) -- or,
    when the positions are known to be ``stride`` apart, a view with that stride."""
    width = _WIDTH[dtype]
    n = len(at)
    if n == 0 or len(buf) < width:
        return np.zeros(n, np.int64)
    if stride > 0:
        return np.ndarray(shape=(n,), dtype=dtype, buffer=buf, offset=int(at[0]),
                          strides=(stride,)).astype(np.int64)
    every = np.ndarray(shape=(len(buf) - width + 1,), dtype=dtype, buffer=buf, strides=(1,))
    out: I64 = every[at].astype(np.int64)
    return out


_MAGIC = struct.pack(">i", rec.MAGIC_V1)


def _walk_by_magic(buf: U8) -> I64 | None:
    """Record starts found without a Python loop: every position whose MAGICCODE bytes
    are the V1 magic is a candidate, and the candidates must chain exactly (each start
    plus its TOTALSIZE is the next start, the last ends the body). ``None`` when they
    do not -- a body or property text that happens to contain the magic, or a record
    that is not V1 -- and :func:`_walk` decides."""
    if len(buf) < _MIN:
        return None
    cand = np.flatnonzero(buf[rec.OFF_MAGIC :] == _MAGIC[0])
    for i in (1, 2, 3):
        cand = cand[cand + rec.OFF_MAGIC + i < len(buf)]
        cand = cand[buf[cand + rec.OFF_MAGIC + i] == _MAGIC[i]]
    if len(cand) == 0 or cand[0] != 0:
        return None
    cand = cand[cand <= len(buf) - _MIN]
    ends = cand + gather(buf, cand, ">i4")
    if np.any(ends[:-1] != cand[1:]) or ends[-1] != len(buf):
        return None
    out: I64 = cand.astype(np.int64)
    return out


def _walk_uniform(buf: U8, size: int) -> I64 | None:
    """Record starts when every record is ``size`` bytes (the first record's TOTALSIZE):
    it divides the body and every TOTALSIZE at a multiple of it says so -- the chain
    :func:`_walk` would follow. ``None`` otherwise."""
    if size < _MIN or len(buf) % size:
        return None
    pos = np.arange(0, len(buf), size, dtype=np.int64)
    return pos if bool((gather(buf, pos, ">i4", size) == size).all()) else None


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


def find_records(body: Buffer, batches: bool) -> RecordColumns | None:
    """The records of ``body`` found and checked (see :func:`decode_columns`); with
    ``batches`` every one must be an inner batch (NEED_UNWRAP and INNER_BATCH set,
    compressed or not), else none may be, nor compressed. IPv4 hosts and V1 magic."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    size = 0
    if len(view) >= _MIN:  # the first record tells at once whether the body is in scope
        size = _I32.unpack_from(view, rec.OFF_TOTAL_SIZE)[0]
        first = _I32.unpack_from(view, rec.OFF_SYSFLAG)[0]
        if (first & _BATCH_FLAGS == _BATCH_FLAGS) != batches:
            return None
    buf = np.frombuffer(view, np.uint8)
    shaped = _one_shape(buf, view, size, batches)
    if shaped is not None:
        return shaped
    pos = _walk_uniform(buf, size)
    stride = size if pos is not None else 0
    if pos is None and size <= _BIG_RECORD:
        # big records (inner batches): following TOTALSIZE costs less than a scan
        pos = _walk_by_magic(buf)
    if pos is None:
        pos = _walk(view)
    if pos is None:
        return None
    stop = pos + gather(buf, pos, ">i4", stride)
    body_len = gather(buf, pos + rec.OFF_BODY_LENGTH, ">i4", stride)
    body_end = pos + _FIXED + body_len
    wrong = _out_of_scope(gather(buf, pos + rec.OFF_SYSFLAG, ">i4", stride), batches)
    wrong |= gather(buf, pos + rec.OFF_MAGIC, ">i4", stride) != rec.MAGIC_V1
    wrong |= body_len < 0
    wrong |= body_end + 3 > stop
    if wrong.any():
        return None
    topic_len = buf[body_end].astype(np.int64)
    topic_end = body_end + 1 + topic_len
    if ((topic_len > rec.MAX_V1_TOPIC_BYTES) | (topic_end + 2 > stop)).any():
        return None
    props_len = gather(buf, topic_end, ">i2")
    if ((props_len < 0) | (topic_end + 2 + props_len != stop)).any():
        return None
    return RecordColumns(buf, pos, Spans(pos + _FIXED, body_len),
                         Spans(body_end + 1, topic_len), Spans(topic_end + 2, props_len),
                         _as_bytes(view), stride)


def _out_of_scope(sys_flags: I64, batches: bool) -> npt.NDArray[np.bool_]:
    """Which records' SYSFLAG puts them outside the columns' scope: with ``batches``,
    those that are not inner batches or have an IPv6 host; else those that are inner
    batches, compressed, or have an IPv6 host."""
    out: npt.NDArray[np.bool_]
    if batches:
        out = (sys_flags & _BATCH_FLAGS != _BATCH_FLAGS) | (sys_flags & _V6_FLAGS != 0)
    else:
        out = sys_flags & _SLOW_FLAGS != 0
    return out


def _as_bytes(view: memoryview) -> bytes | None:
    """The body as the bytes object ``view`` shows whole, if it is one (values are cut
    from it without a copy)."""
    obj = view.obj
    return obj if isinstance(obj, bytes) and len(obj) == view.nbytes else None


def _one_shape(buf: U8, view: memoryview, size: int, batches: bool) -> RecordColumns | None:
    """The records when every one repeats the first one's layout -- ``size`` bytes, V1
    magic, the same body, topic and property lengths and the same topic -- checked by a
    few strided comparisons; ``None`` when they do not (or the first record is not in
    scope), and :func:`find_records` looks record by record."""
    if size < _MIN or len(buf) % size:
        return None
    magic = _I32.unpack_from(view, rec.OFF_MAGIC)[0]
    body_len = _I32.unpack_from(view, rec.OFF_BODY_LENGTH)[0]
    if magic != rec.MAGIC_V1 or body_len < 0 or _FIXED + body_len + 3 > size:
        return None
    topic_at = _FIXED + body_len  # TOPICLENGTH
    topic_len = view[topic_at]
    props_at = topic_at + 1 + topic_len  # PROPERTIESLENGTH
    if topic_len > rec.MAX_V1_TOPIC_BYTES or props_at + 2 > size:
        return None
    props_len = _I16.unpack_from(view, props_at)[0]
    if props_len < 0 or props_at + 2 + props_len != size:
        return None
    try:
        topic = bytes(view[topic_at + 1 : props_at]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    n = len(buf) // size
    rows = np.ndarray(shape=(n, size), dtype=np.uint8, buffer=buf)
    # TOTALSIZE and MAGICCODE; BODYLENGTH; TOPICLENGTH, TOPIC, PROPERTIESLENGTH
    for a, b in ((rec.OFF_TOTAL_SIZE, rec.OFF_MAGIC + 4), (rec.OFF_BODY_LENGTH, rec.OFF_BODY),
                 (topic_at, props_at + 2)):
        if not rows_alike(rows, a, b):
            return None
    sys_flag = np.ndarray(shape=(n,), dtype=">i4", buffer=buf, offset=rec.OFF_SYSFLAG,
                          strides=(size,))
    if _out_of_scope(sys_flag, batches).any():  # the first record's too
        return None
    pos = np.arange(0, len(buf), size, dtype=np.int64)
    return RecordColumns(buf, pos, Spans(pos + _FIXED, np.full(n, body_len, np.int64)),
                         Spans(pos + (topic_at + 1), np.full(n, topic_len, np.int64)),
                         Spans(pos + (props_at + 2), np.full(n, props_len, np.int64)),
                         _as_bytes(view), size, topic)


def rows_alike(rows: U8, start: int, stop: int) -> bool:
    """Whether every row of ``rows`` holds the first row's bytes ``[start, stop)``: the
    columns copied out once and compared as bytes (numpy compares a strided 2-D view
    row by row, a few bytes at a time)."""
    block = rows[:, start:stop]
    alike: bool = block.tobytes() == block[0].tobytes() * len(block)
    return alike


def decode_columns(body: Buffer) -> RecordColumns | None:
    """The records of a pull body as columns, or ``None`` when a record needs the general
    decoder (see the module docstring). Never raises on bad input: ``None`` instead."""
    return find_records(body, False)


# ---------------------------------------------------------------- cutting values

@functools.lru_cache(maxsize=512)
def _cutter(size: int, stride: int, count: int) -> struct.Struct:
    """A struct that cuts ``count`` values of ``size`` bytes spaced ``stride`` apart."""
    step = f"{size}s{stride - size}x" if stride > size else f"{size}s"
    return struct.Struct(step * (count - 1) + f"{size}s")


def span_values(data: bytes, spans: Spans, rows: I64 | None, stride: int) -> list[bytes]:
    """``spans`` of ``data`` at ``rows`` (``None``: all) as bytes. ``stride``: every
    value has the first one's length and the next is ``stride`` bytes on (one layout:
    all of them cut by one unpack); ``0``: not known to."""
    start, length = spans.start, spans.length
    if rows is None and stride and len(start) > 1:
        cutter = _cutter(int(length[0]), stride, len(start))
        return list(cutter.unpack_from(data, int(start[0])))
    if rows is not None:
        start, length = start[rows], length[rows]
    return cut(data, start, length)


def cut(data: bytes, start: I64, length: I64) -> list[bytes]:
    """``data[start[i] : start[i] + length[i]]`` for every ``i``, as bytes. Runs of values
    of one length at one spacing (an inner batch of equal entries, records of equal
    size) are cut by one ``struct`` unpack each; the rest one slice at a time."""
    n = len(start)
    if n < 4:
        return [data[s : s + k] for s, k in zip(start.tolist(), length.tolist(), strict=True)]
    gap = np.diff(start)
    # row i continues the run of row i-1: same length and the same spacing as before it
    joins = length[1:] == length[:-1]
    joins[1:] &= gap[1:] == gap[:-1]
    heads = np.flatnonzero(~joins) + 1
    if len(heads) * 8 > n:  # mostly different lengths: slice each
        ends = start + length
        return list(map(data.__getitem__, map(slice, start.tolist(), ends.tolist())))
    out: list[bytes] = []
    bounds = [0, *heads.tolist(), n]
    starts, lengths, gaps = start.tolist(), length.tolist(), gap.tolist()
    for a, b in itertools.pairwise(bounds):
        s, k = starts[a], lengths[a]
        if b - a == 1:
            out.append(data[s : s + k])
        else:
            out.extend(_cutter(k, gaps[a], b - a).unpack_from(data, s))
    return out
