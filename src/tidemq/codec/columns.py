"""Pull bodies as columns, for bulk readers that want columns rather than
:class:`~tidemq.types.MessageExt` objects (the Spark source builds Arrow arrays from them;
``PullConsumer.poll_batches`` hands them to the application).

Plain records are the record package's (:mod:`tidemq.formats.record.columns`:
:func:`decode_columns`, :class:`RecordColumns`, re-exported here).

Inner batches (RIP-26) have columns of their own, :func:`decode_entry_columns`: a body
whose records are all inner batches gives one row per sub-message, as
``decode_messages`` unwraps them -- the batch inflated when compressed, entry ``i`` at
``queue_offset = outer + i`` with its own flag, body and properties, the outer record's
times, and, without a ``UNIQ_KEY``, the outer record's offset message id. The entries
(:mod:`tidemq.formats.batch`) are found by strided comparisons when they share one
layout, else by a walk; the Python work is per record, not per sub-message. The batches
are laid end to end in one buffer, so entries of one layout across the whole body are one
strided array too.
"""

from __future__ import annotations

import struct

import numpy as np

from tidemq.codec.compression import COMPRESSED, compression_of, decompress
from tidemq.errors import CorruptRecord
from tidemq.formats.batch import (
    ENTRY_OFF_BODY,
    ENTRY_OFF_BODY_LENGTH,
    ENTRY_OFF_FLAG,
    ENTRY_OFF_TOTAL_SIZE,
    ENTRY_OVERHEAD,
    iter_batch,
)
from tidemq.formats.record.columns import (
    FIELDS,
    I64,
    U8,
    Buffer,
    RecordColumns,
    Spans,
    cut,
    decode_columns,
    find_records,
    gather,
    span_values,
    spans_are_ascii,
)

__all__ = ["FIELDS", "EntryColumns", "RecordColumns", "Spans", "cut", "decode_columns",
           "decode_entry_columns", "spans_are_ascii"]


# ---------------------------------------------------------------- inner batches

#: Default bound on one inflated batch (as :data:`tidemq.codec.message.DEFAULT_MAX_DECOMPRESSED`).
_MAX_INFLATED = 16 * 1024 * 1024
_ENTRY_HEAD = struct.Struct(">i12xi")  # TOTALSIZE, BODYLENGTH


class EntryColumns:
    """The sub-messages of a body of inner-batch records (see the module docstring), with
    the interface of :class:`RecordColumns`: ``buf`` holds the batches end to end
    (inflated; ``data`` as bytes), ``pos``
    each entry's start in it, :meth:`field` a column by name; ``records`` are the outer
    records' columns and ``record`` each entry's record."""

    __slots__ = ("_offsets", "body", "buf", "data", "pos", "properties", "record",
                 "records", "stride")

    def __init__(self, data: bytes, pos: I64, body: Spans, properties: Spans, offsets: I64,
                 records: RecordColumns, record: I64, stride: int = 0) -> None:
        self.data = data
        #: Every entry's size when they all have it (``0``: they do not).
        self.stride = stride
        self.buf: U8 = np.frombuffer(data, np.uint8)
        self.pos = pos
        self.body = body
        self.properties = properties
        #: Each entry's queue offset.
        self._offsets = offsets
        self.records = records
        self.record = record

    def __len__(self) -> int:
        return len(self.pos)

    def field(self, name: str) -> I64:
        """Field ``name`` of :data:`FIELDS` for every entry, as int64: ``flag`` is the
        entry's, ``queue_offset`` its record's plus its place in the batch, the others
        are its record's (``sys_flag`` with the compression bits cleared: the entries
        are inflated)."""
        if name == "flag":
            return gather(self.buf, self.pos + ENTRY_OFF_FLAG, ">i4", self.stride)
        if name == "queue_offset":
            return self._offsets
        values = self.records.field(name)
        if name == "sys_flag":
            values &= ~COMPRESSED
        out: I64 = values[self.record]
        return out

    def offset_msg_ids(self, rows: I64) -> list[str]:
        """The offset message id of each entry at ``rows``: its record's."""
        return self.records.offset_msg_ids(self.record[rows])

    def single_topic(self) -> str | None:
        """The topic of every entry when their records all have the same one, else
        ``None``."""
        return self.records.single_topic()

    def values(self, spans: Spans, rows: I64 | None = None) -> list[bytes]:
        """The values of ``spans`` (of this buffer) at ``rows`` (``None``: all) as bytes."""
        return span_values(self.data, spans, rows, self.stride)


def decode_entry_columns(body: Buffer, *,
                         max_decompressed: int = _MAX_INFLATED) -> EntryColumns | None:
    """The sub-messages of a body whose records are all inner batches, as columns; ``None``
    when a record is not an inner batch, does not decode, or holds a batch that does not
    (inflated beyond ``max_decompressed``, truncated, malformed) -- the caller then
    decodes the body with :func:`tidemq.codec.message.decode_messages`, which says what
    is wrong. Never raises on bad input.

    The batches (inflated when compressed) are laid end to end in one buffer. A batch
    whose first entry's size divides the batch is taken to repeat that entry's layout,
    and every entry's three length fields are then checked at once (what
    :func:`~tidemq.formats.batch.uniform_layout` proves per batch); any other batch is
    walked (:func:`~tidemq.formats.batch.iter_batch`). When every batch has one layout
    the entries are one strided array (no gathers: views with that stride)."""
    records = find_records(body, True)
    if records is None or not len(records):
        return None
    flags = records.field("sys_flag").tolist()
    view = records.buf.data
    spans = records.body
    batches: list[memoryview | bytes] = []
    for at, size, flag in zip(spans.start.tolist(), spans.length.tolist(), flags,
                              strict=True):
        batch: memoryview | bytes = view[at : at + size]
        try:
            ctype = compression_of(flag)
            if ctype is not None:
                batch = decompress(batch, ctype, max_decompressed)
        except CorruptRecord:
            return None
        batches.append(batch)
    data = b"".join(batches)
    found = _entries(batches, data)
    if found is None:
        return None
    pos, counts, body_len, props_len, stride = found
    n = np.array(counts, np.int64)
    record = np.repeat(np.arange(len(counts), dtype=np.int64), n)
    # entry i of a batch at offset base: base + i (the batch's first entry at cumsum - n)
    outer = records.field("queue_offset")
    offsets = np.repeat(outer - (np.cumsum(n) - n), n) + np.arange(len(pos), dtype=np.int64)
    return EntryColumns(data, pos, Spans(pos + ENTRY_OFF_BODY, body_len),
                        Spans(pos + ENTRY_OVERHEAD + body_len, props_len), offsets, records, record,
                        stride)


def _entries(batches: list[memoryview | bytes], data: bytes, walk: bool = False
             ) -> tuple[I64, list[int], I64, I64, int] | None:
    """Every entry's start in ``data`` (the batches end to end), each batch's entry count,
    every entry's body and property lengths, and their one size when they all have it
    (else ``0``); ``None`` when a batch is empty or malformed. A batch presumed uniform
    that is not is walked after all (as is every batch with ``walk``)."""
    counts: list[int] = []
    # per batch: the first entry's size and body length when presumed uniform, else -1
    sizes: list[int] = []
    body_lens: list[int] = []
    walked: dict[int, list[int]] = {}  # batch -> its entries' starts (within the batch)
    for k, batch in enumerate(batches):
        end = len(batch)
        if end < ENTRY_OVERHEAD:
            return None
        size, body_len = _ENTRY_HEAD.unpack_from(batch, 0)
        if (not walk and size >= ENTRY_OVERHEAD and end % size == 0
                and 0 <= body_len <= size - ENTRY_OVERHEAD):
            counts.append(end // size)
            sizes.append(size)
            body_lens.append(body_len)
            continue
        try:
            walked[k] = [e.offset for e in iter_batch(batch)]
        except CorruptRecord:
            return None
        counts.append(len(walked[k]))
        sizes.append(-1)
        body_lens.append(-1)
    buf = np.frombuffer(data, np.uint8)
    if not walked and min(sizes) == max(sizes) and min(body_lens) == max(body_lens):
        found = _one_layout(buf, counts, sizes[0], body_lens[0])
        return found if found is not None else _entries(batches, data, walk=True)
    base = 0
    starts: list[I64] = []
    for k, batch in enumerate(batches):
        if k in walked:
            starts.append(np.array(walked[k], np.int64) + base)
        else:
            starts.append(np.arange(base, base + len(batch), sizes[k], dtype=np.int64))
        base += len(batch)
    pos = np.concatenate(starts) if len(starts) > 1 else starts[0]
    body_len = gather(buf, pos + ENTRY_OFF_BODY_LENGTH, ">i4")
    if walked and len(walked) == len(batches):  # every batch walked: its entries checked
        return pos, counts, body_len, gather(buf, pos + ENTRY_OFF_BODY + body_len, ">i2"), 0
    n = np.array(counts, np.int64)
    want_size = np.repeat(np.array(sizes, np.int64), n)
    want_body = np.repeat(np.array(body_lens, np.int64), n)
    at = want_size >= 0
    want_size, want_body = want_size[at], want_body[at]
    if (gather(buf, pos[at], ">i4") != want_size).any() or (body_len[at] != want_body).any():
        return _entries(batches, data, walk=True)
    props_len = gather(buf, pos + ENTRY_OFF_BODY + body_len, ">i2")  # inside each entry now
    if (props_len[at] != want_size - ENTRY_OVERHEAD - want_body).any():
        return _entries(batches, data, walk=True)
    return pos, counts, body_len, props_len, 0


def _one_layout(buf: U8, counts: list[int], size: int, body_len: int
                ) -> tuple[I64, list[int], I64, I64, int] | None:
    """:func:`_entries` when every batch presumes one layout: the entries are ``size``
    apart from the start, and each must repeat the layout's three length fields."""
    n = len(buf) // size
    props_len = size - ENTRY_OVERHEAD - body_len
    for at, dtype, want in ((ENTRY_OFF_TOTAL_SIZE, ">i4", size),
                            (ENTRY_OFF_BODY_LENGTH, ">i4", body_len),
                            (ENTRY_OFF_BODY + body_len, ">i2", props_len)):
        column = np.ndarray(shape=(n,), dtype=dtype, buffer=buf, offset=at, strides=(size,))
        if (column != want).any():
            return None
    return (np.arange(0, len(buf), size, dtype=np.int64), counts,
            np.full(n, body_len, np.int64), np.full(n, props_len, np.int64), size)
