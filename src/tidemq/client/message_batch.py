"""MessageBatch: the messages one pull brought for one queue, as columns.

:meth:`PullConsumer.poll_batches <tidemq.client.PullConsumer.poll_batches>` returns these
instead of one :class:`~tidemq.types.MessageExt` per message. A batch holds what ``poll``
would have returned from that pull -- the same rows, after the same filtering (inner-batch
messages below the requested offset dropped, the subscription's tags applied) -- as
columns:

=======================  ==================  =============================================
column                   type                ``MessageExt`` field
=======================  ==================  =============================================
``queue``                MessageQueue        ``topic``, ``queue_id``, ``broker_name``
``queue_offsets``        int64 array         ``queue_offset``
``bodies``               list of bytes       ``body``
``body_lengths``         int64 array         ``len(body)``
``store_timestamps``     int64 array (ms)    ``store_timestamp``
``born_timestamps``      int64 array (ms)    ``born_timestamp``
``flags``                int64 array         ``flag``
``sys_flags``            int64 array         ``sys_flag`` (compression bits cleared)
``commit_log_offsets``   int64 array         ``commit_log_offset``
``reconsume_times``      int64 array         ``reconsume_times``
=======================  ==================  =============================================

Row ``i`` has per-row accessors for what is parsed from the property text, lazily:
:meth:`~MessageBatch.properties` (with the pull's ``MIN_OFFSET``/``MAX_OFFSET`` added, as
``poll`` adds them), :meth:`~MessageBatch.tags`, :meth:`~MessageBatch.keys`,
:meth:`~MessageBatch.msg_id`, :meth:`~MessageBatch.topic`. Iterating a batch, indexing it
with an int, or :meth:`~MessageBatch.messages` gives the ``MessageExt`` objects ``poll``
gives, equal field by field (they are made by the same decoder, on first use); slicing
gives a batch.

``bodies`` are ``bytes``, not memoryviews: the same type ``MessageExt.body`` has
(hashable, usable as a dict key or with any bytes API), and a bytes slice costs about
what a memoryview slice does, without keeping the whole pull response (up to megabytes)
alive while any one body is.

Two backings behind one interface (:attr:`MessageBatch.columnar` says which). Columns
(:mod:`tidemq.codec.columns`): a pull body of single records or of inner batches (RIP-26,
inflated when compressed) is read by :func:`~tidemq.codec.columns.decode_columns` /
:func:`~tidemq.codec.columns.decode_entry_columns` with no object per message; the fixed
fields are numpy gathers, bodies are cut by one ``struct`` unpack per run of equal
entries. Objects: a body outside the columns' scope (compressed single messages, IPv6
hosts, a mix of records and inner batches, several topics, non-ASCII property text --
checked by the general decoder, which also reports corrupt records) is decoded by
:func:`~tidemq.codec.message.decode_messages` and the columns are built from its objects
-- as is a small body (under :data:`SMALL_BODY` bytes, some tens of messages; a quarter of
that for compressed inner batches), where the columns' fixed cost per pull (tens of numpy
calls) outweighs what they save. Small bodies that came together as the pull children
of one batch-protocol parent are read as columns all the same, in one pass over all of
them (:class:`ParentColumns`, when a reader first asks), each child taking its own rows.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import overload

import numpy as np
import numpy.typing as npt

from tidemq.codec.columns import (
    EntryColumns,
    RecordColumns,
    decode_columns,
    decode_entry_columns,
    spans_are_ascii,
)
from tidemq.codec.message import decode_messages
from tidemq.formats.properties import PropertyKey, decode_properties
from tidemq.formats.record import MIN_RECORD_SIZE, OFF_SYSFLAG
from tidemq.types import MessageExt, MessageQueue

__all__ = ["SMALL_BODY", "MessageBatch", "ParentColumns", "decode_pulled", "pull_properties",
           "read_batch"]

I64 = npt.NDArray[np.int64]
Columns = RecordColumns | EntryColumns
_TAGS_KEY = b"TAGS\x01"
#: Bodies shorter than this are read through objects: the columns' fixed cost per pull
#: (some tens of numpy calls) outweighs their saving per message below ~100 messages.
SMALL_BODY = 20_000  # a quarter of it for compressed inner batches
_SYSFLAG = struct.Struct(">i")
_ZIPPED = 0x40 | 0x80 | 0x1  # NEED_UNWRAP, INNER_BATCH, COMPRESSED

#: Column name -> the :data:`tidemq.codec.columns.FIELDS` field, and the MessageExt field.
_FIELD_OF: dict[str, tuple[str, str]] = {
    "store_timestamps": ("store_timestamp", "store_timestamp"),
    "born_timestamps": ("born_timestamp", "born_timestamp"),
    "flags": ("flag", "flag"),
    "sys_flags": ("sys_flag", "sys_flag"),
    "commit_log_offsets": ("physical_offset", "commit_log_offset"),
    "reconsume_times": ("reconsume_times", "reconsume_times"),
}


class _Pull:
    """What the batches cut from one pull body share: the body, its columns, what every
    message gets (:attr:`extra`: MIN_OFFSET/MAX_OFFSET, from the queue's offset
    ``bounds``), and its messages once decoded. A child of a :class:`ParentColumns`
    takes its part of the parent's columns when first asked (most readers never ask)."""

    __slots__ = ("_cols", "_extra", "body", "bounds", "messages", "parent", "queue", "topic")

    def __init__(self, body: bytes | bytearray | memoryview, queue: MessageQueue,
                 bounds: tuple[int, int] | None, cols: Columns | None, topic: str,
                 parent: tuple[ParentColumns, int] | None = None) -> None:
        self.body = body
        self.queue = queue
        #: The queue's min and max offsets (``None``: no properties are added).
        self.bounds = bounds
        self._cols = cols
        self._extra: dict[str, str] | None = None
        self.topic = topic
        self.messages: list[MessageExt] | None = None
        #: Child ``i`` of a :class:`ParentColumns` (whose columns ``cols`` are a part of).
        self.parent = parent

    @property
    def cols(self) -> Columns | None:
        cols = self._cols
        if cols is None and self.parent is not None:
            shared, index = self.parent
            cols = self._cols = shared.part(index)
        return cols

    @property
    def extra(self) -> dict[str, str]:
        extra = self._extra
        if extra is None:
            extra = self._extra = ({} if self.bounds is None
                                   else pull_properties(*self.bounds))
        return extra

    def decoded(self) -> list[MessageExt]:
        """Every message of the body as ``poll`` decodes it (before filtering)."""
        if self.messages is None:
            self.messages = decode_messages(self.body, queue_id=self.queue.queue_id,
                                            broker_name=self.queue.broker_name,
                                            extra_properties=self.extra)
        return self.messages


class MessageBatch:
    """The messages of one pull of one queue, as columns (see the module docstring).

    Made by the consumer; ``len(batch)`` rows, never zero.
    """

    __slots__ = ("_cache", "_msgs", "_offsets", "_pull", "_rows", "queue")

    queue: MessageQueue

    def __init__(self, pull: _Pull, rows: I64 | None, offsets: I64 | None,
                 msgs: list[MessageExt] | None) -> None:
        self.queue = pull.queue
        #: ``None`` until read when backed by objects.
        self._offsets = offsets
        self._pull = pull
        #: Rows of the pull's columns (or decoded messages) this batch holds; ``None``:
        #: all of them.
        self._rows = rows
        #: Object backing: the messages themselves (``_pull.cols`` is ``None``).
        self._msgs = msgs
        self._cache: dict[str, object] = {}

    @classmethod
    def of_messages(cls, queue: MessageQueue, messages: list[MessageExt]) -> MessageBatch:
        """A batch backed by ``messages`` (already decoded and filtered)."""
        pull = _Pull(b"", queue, None, None, messages[0].topic if messages else queue.topic)
        return cls(pull, None, None, messages)

    def __repr__(self) -> str:
        span = (f"{self.queue_offsets[0]}..{self.queue_offsets[-1]}" if len(self) else "-")
        kind = "objects" if self._msgs is not None else "columns"
        return f"<MessageBatch {self.queue} rows={len(self)} offsets={span} {kind}>"

    def __len__(self) -> int:
        return len(self._msgs) if self._msgs is not None else len(self.queue_offsets)

    @property
    def queue_offsets(self) -> I64:
        """Each row's queue offset, ascending."""
        offsets = self._offsets
        if offsets is None:
            msgs = self._msgs
            assert msgs is not None
            offsets = self._offsets = np.fromiter((m.queue_offset for m in msgs), np.int64,
                                                  len(msgs))
        return offsets

    @property
    def first_offset(self) -> int:
        """The queue offset of the first row."""
        if self._msgs is not None:
            return self._msgs[0].queue_offset
        return int(self.queue_offsets[0])

    @property
    def columnar(self) -> bool:
        """Whether the batch is read from columns (``False``: backed by objects)."""
        return self._msgs is None

    # ------------------------------------------------------------------ columns

    def _column(self, name: str) -> I64:
        got = self._cache.get(name)
        if got is None:
            field, attr = _FIELD_OF[name]
            if self._msgs is not None:
                got = np.fromiter((getattr(m, attr) for m in self._msgs), np.int64,
                                  len(self._msgs))
            else:
                cols = self._pull.cols
                assert cols is not None
                got = cols.field(field)
                if self._rows is not None:
                    got = got[self._rows]
            self._cache[name] = got
        assert isinstance(got, np.ndarray)
        return got

    @property
    def store_timestamps(self) -> I64:
        return self._column("store_timestamps")

    @property
    def born_timestamps(self) -> I64:
        return self._column("born_timestamps")

    @property
    def flags(self) -> I64:
        return self._column("flags")

    @property
    def sys_flags(self) -> I64:
        return self._column("sys_flags")

    @property
    def commit_log_offsets(self) -> I64:
        return self._column("commit_log_offsets")

    @property
    def reconsume_times(self) -> I64:
        return self._column("reconsume_times")

    @property
    def bodies(self) -> list[bytes]:
        """Each row's body (``bytes``; see the module docstring)."""
        got = self._cache.get("bodies")
        if got is None:
            if self._msgs is not None:
                got = [m.body for m in self._msgs]
            else:
                shared = self._pull.parent
                if shared is not None:
                    # cut once for every child: a cut costs some numpy calls per call
                    every = shared[0].bodies(shared[1])
                    got = (every if self._rows is None
                           else [every[r] for r in self._rows.tolist()])
                else:
                    cols = self._pull.cols
                    assert cols is not None
                    got = cols.values(cols.body, self._rows)
            self._cache["bodies"] = got
        assert isinstance(got, list)
        return got

    @property
    def body_lengths(self) -> I64:
        got = self._cache.get("body_lengths")
        if got is None:
            if self._msgs is not None:
                got = np.fromiter((len(m.body) for m in self._msgs), np.int64,
                                  len(self._msgs))
            else:
                cols = self._pull.cols
                assert cols is not None
                got = cols.body.length
                if self._rows is not None:
                    got = got[self._rows]
            self._cache["body_lengths"] = got
        assert isinstance(got, np.ndarray)
        return got

    # ------------------------------------------------------------------ rows

    def _row(self, i: int) -> int:
        """Row ``i`` (negative counts from the end) of this batch in its pull."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} of a batch of {n}")
        i %= n
        return i if self._rows is None else int(self._rows[i])

    def _raw_properties(self, i: int) -> bytes:
        cols = self._pull.cols
        assert cols is not None
        return cols.values(cols.properties, np.array([self._row(i)], np.int64))[0]

    def properties(self, i: int) -> dict[str, str]:
        """Row ``i``'s properties, as ``MessageExt.properties`` (a new dict each call)."""
        if self._msgs is not None:
            return dict(self._msgs[self._row(i)].properties)
        props = decode_properties(self._raw_properties(i))
        props.update(self._pull.extra)
        return props

    def tags(self, i: int) -> str | None:
        if self._msgs is not None:
            return self._msgs[self._row(i)].tags
        return _tag_of(self._raw_properties(i))

    def keys(self, i: int) -> list[str]:
        return [k for k in self.properties(i).get(PropertyKey.KEYS, "").split(" ") if k]

    def msg_id(self, i: int) -> str:
        """The ``UNIQ_KEY`` property, else the offset message id (as ``MessageExt.msg_id``)."""
        if self._msgs is not None:
            return self._msgs[self._row(i)].msg_id
        key = decode_properties(self._raw_properties(i)).get(PropertyKey.UNIQ_KEY)
        if key:
            return key
        cols = self._pull.cols
        assert cols is not None
        return cols.offset_msg_ids(np.array([self._row(i)], np.int64))[0]

    def topic(self, i: int) -> str:
        if self._msgs is not None:
            return self._msgs[self._row(i)].topic
        self._row(i)
        return self._pull.topic

    # ------------------------------------------------------------------ objects

    def messages(self) -> list[MessageExt]:
        """The rows as the ``MessageExt`` objects ``poll`` gives (made on first call)."""
        if self._msgs is not None:
            return self._msgs
        got = self._cache.get("messages")
        if got is None:
            every = self._pull.decoded()
            got = every if self._rows is None else [every[r] for r in self._rows.tolist()]
            self._cache["messages"] = got
        assert isinstance(got, list)
        return got

    def __iter__(self) -> Iterator[MessageExt]:
        return iter(self.messages())

    @overload
    def __getitem__(self, key: int) -> MessageExt: ...
    @overload
    def __getitem__(self, key: slice) -> MessageBatch: ...

    def __getitem__(self, key: int | slice) -> MessageExt | MessageBatch:
        if isinstance(key, slice):
            return self._slice(key)
        self._row(key)  # IndexError as a list gives it
        return self.messages()[key]

    def _slice(self, key: slice) -> MessageBatch:
        if self._msgs is not None:
            return MessageBatch(self._pull, None, None, self._msgs[key])
        offsets = self.queue_offsets[key]
        rows = (np.arange(len(self), dtype=np.int64) if self._rows is None
                else self._rows)[key]
        return MessageBatch(self._pull, rows, offsets, None)


def _compressed_batches(body: bytes | bytearray | memoryview) -> bool:
    """Whether the first record is a compressed inner batch: its body stands for some
    four times its size in messages."""
    return (len(body) >= OFF_SYSFLAG + 4
            and _SYSFLAG.unpack_from(body, OFF_SYSFLAG)[0] & _ZIPPED == _ZIPPED)


def _tag_of(raw: bytes) -> str | None:
    """The TAGS property of a property text (decoded only when it names one)."""
    if _TAGS_KEY not in raw:
        return None
    return decode_properties(raw).get(PropertyKey.TAGS)


class ParentColumns:
    """The small FOUND pull bodies of one batch-protocol parent, read as ONE set of
    columns on first ask (:meth:`columns`), each child then taking its own rows.

    The bodies of a parent's children arrive together; each alone is below
    :data:`SMALL_BODY` (read through objects: the columns' fixed cost per call does not
    pay off for some tens of messages), but together they are not. Nothing is decoded
    until a reader asks (``poll`` never does). The bodies are joined into one buffer (a
    copy of some hundred kilobytes) and read by
    :func:`~tidemq.codec.columns.decode_columns`; when that buffer is outside the
    columns' scope (a record that needs the general decoder, several topics, non-ASCII
    property text), or a child's body does not start at a record, every child is read
    on its own, as without a parent.
    """

    __slots__ = ("_bodies", "_bounds", "_cols", "_cut", "_offsets", "_topic")

    def __init__(self, bodies: list[bytes | bytearray | memoryview]) -> None:
        #: Child ``i``'s body; emptied once decoded.
        self._bodies: list[bytes | bytearray | memoryview] | None = bodies
        self._cols: RecordColumns | None = None
        self._offsets: I64 = np.zeros(0, np.int64)  # every row's queue offset
        self._cut: list[bytes] | None = None  # every row's body, once asked for
        self._topic = ""
        #: Child ``i`` holds rows ``_bounds[i]:_bounds[i + 1]`` of ``_cols``.
        self._bounds: list[int] = []

    @staticmethod
    def pick(bodies: list[bytes | bytearray | memoryview | None]) -> list[int]:
        """Which of a parent's FOUND child bodies (``None``: not FOUND) to read as one:
        those that alone would be read through objects -- small, single records (the
        first record is not an inner batch) -- when there are several and together they
        come to :data:`SMALL_BODY` at least; else none."""
        picked = [i for i, body in enumerate(bodies)
                  if body is not None and MIN_RECORD_SIZE <= len(body) < SMALL_BODY
                  and not _SYSFLAG.unpack_from(body, OFF_SYSFLAG)[0] & _ZIPPED]
        if len(picked) < 2 or sum(len(bodies[i] or b"") for i in picked) < SMALL_BODY:
            return []
        return picked

    def offsets(self, index: int) -> I64 | None:
        """The queue offsets of child ``index``'s rows (``None``: read the child on its
        own). The first call decodes every child."""
        if self._bodies is not None:
            self._decode(self._bodies)
            self._bodies = None
        if self._cols is None:
            return None
        return self._offsets[self._bounds[index]:self._bounds[index + 1]]

    def part(self, index: int) -> RecordColumns:
        """Child ``index``'s rows as columns of their own (after :meth:`offsets` gave
        offsets)."""
        cols = self._cols
        assert cols is not None
        return cols.part(self._bounds[index], self._bounds[index + 1])

    def bodies(self, index: int) -> list[bytes]:
        """Child ``index``'s bodies (after :meth:`columns` gave columns): the bodies of
        every child are cut on the first call."""
        cols = self._cols
        assert cols is not None
        if self._cut is None:
            self._cut = cols.values(cols.body)
        return self._cut[self._bounds[index]:self._bounds[index + 1]]

    @property
    def topic(self) -> str:
        """The topic of every record (once :meth:`columns` gave columns)."""
        return self._topic

    def _decode(self, bodies: list[bytes | bytearray | memoryview]) -> None:
        lengths = np.fromiter((len(b) for b in bodies), np.int64, len(bodies))
        joined = b"".join(bodies)
        cols = decode_columns(joined)
        if cols is None:
            return
        topic = cols.single_topic()
        if topic is None or not spans_are_ascii(cols.buf, cols.properties):
            return
        starts = np.cumsum(lengths) - lengths
        at = np.searchsorted(cols.pos, starts)
        # each child (but empty ones at the end) starts a record
        inner = starts < len(joined)
        probe = np.minimum(at[inner], len(cols) - 1)
        if not len(cols) or not bool((cols.pos[probe] == starts[inner]).all()):
            return
        self._bounds = [*at.tolist(), len(cols)]
        self._cols, self._topic = cols, topic
        self._offsets = cols.field("queue_offset")


def read_batch(body: bytes | bytearray | memoryview, queue: MessageQueue, min_offset: int,
               max_offset: int, offset: int | None, tags: frozenset[str],
               parent: tuple[ParentColumns, int] | None = None) -> MessageBatch | None:
    """The messages of a FOUND pull body as a batch, filtered as ``poll`` filters them:
    those below ``offset`` dropped (inner batches come whole), those whose tag is not in
    ``tags`` dropped (unless ``tags`` is empty). ``None`` when none is left. Raises
    :class:`~tidemq.errors.CorruptRecord` as :func:`~tidemq.codec.message.decode_messages`
    does. ``parent``: the body is child ``i`` of a batch-protocol parent whose small
    bodies are read as one (:class:`ParentColumns`)."""
    bounds = (min_offset, max_offset)
    cols: Columns | None
    if parent is not None:
        shared, index = parent
        offsets = shared.offsets(index)
        if offsets is not None:
            pull = _Pull(body, queue, bounds, None, shared.topic, parent=parent)
            return _read_columns(pull, offset, tags, offsets)
    extra = pull_properties(min_offset, max_offset)
    if len(body) < (SMALL_BODY // 4 if _compressed_batches(body) else SMALL_BODY):
        return _read_objects(body, queue, extra, offset, tags)
    cols = decode_columns(body)
    if cols is None:
        cols = decode_entry_columns(body)
    topic = cols.single_topic() if cols is not None else None
    if cols is None or topic is None or not spans_are_ascii(cols.buf, cols.properties):
        return _read_objects(body, queue, extra, offset, tags)
    return _read_columns(_Pull(body, queue, bounds, cols, topic), offset, tags)


def _read_columns(pull: _Pull, offset: int | None, tags: frozenset[str],
                  offsets: I64 | None = None) -> MessageBatch | None:
    """:func:`read_batch` from the pull's columns (``offsets``: their queue offsets, when
    known)."""
    if offsets is None:
        cols = pull.cols
        assert cols is not None
        offsets = cols.field("queue_offset")
    rows: I64 | None = None
    if offset is not None and len(offsets) and offsets[0] < offset:
        rows = np.flatnonzero(offsets >= offset)
    if tags:
        rows = _tagged(pull, rows, tags)
    if rows is not None:
        if not len(rows):
            return None
        offsets = offsets[rows]
    if not len(offsets):
        return None
    return MessageBatch(pull, rows, offsets, None)


def _tagged(pull: _Pull, rows: I64 | None, tags: frozenset[str]) -> I64:
    """The rows among ``rows`` (``None``: all) whose TAGS property is in ``tags``."""
    cols = pull.cols
    assert cols is not None
    texts = cols.values(cols.properties, rows)
    keep = np.fromiter((_tag_of(text) in tags for text in texts), np.bool_, len(texts))
    picked: I64 = np.flatnonzero(keep) if rows is None else rows[keep]
    return picked


def pull_properties(min_offset: int, max_offset: int) -> dict[str, str]:
    """The properties a pull adds to each of its messages: the queue's offset bounds."""
    return {PropertyKey.MIN_OFFSET: str(min_offset), PropertyKey.MAX_OFFSET: str(max_offset)}


def decode_pulled(body: bytes | bytearray | memoryview, queue: MessageQueue,
                  extra: dict[str, str], offset: int | None,
                  tags: frozenset[str]) -> list[MessageExt]:
    """The messages of a FOUND pull body of ``queue`` as ``poll`` returns them: decoded in
    one pass (queue id, broker and ``extra`` properties set while decoding, properties
    left undecoded until read), those below ``offset`` dropped (inner batches (RIP-26)
    come whole), those whose tag is not in ``tags`` dropped (unless ``tags`` is
    empty)."""
    messages = decode_messages(body, queue_id=queue.queue_id, broker_name=queue.broker_name,
                               extra_properties=extra)
    if offset is not None and messages and messages[0].queue_offset < offset:
        messages = [m for m in messages if m.queue_offset >= offset]
    if tags:
        messages = [m for m in messages if m.properties.get(PropertyKey.TAGS) in tags]
    return messages


def _read_objects(body: bytes | bytearray | memoryview, queue: MessageQueue, extra: dict[str, str],
                  offset: int | None, tags: frozenset[str]) -> MessageBatch | None:
    """:func:`read_batch` through ``decode_messages`` (what ``read_pull_response`` does)."""
    messages = decode_pulled(body, queue, extra, offset, tags)
    return MessageBatch.of_messages(queue, messages) if messages else None
