"""Tracer: records a client's message-trace events and sends them to the trace topic in
the background (RocketMQ's ``AsyncTraceDispatcher``).

A producer or consumer with ``enable_msg_trace`` on owns one. Recording
(:meth:`Tracer.record`) only appends an event to a bounded queue: a full queue drops the
event and counts it (:attr:`Tracer.dropped`), so tracing never blocks or fails a send or
a consume. An event is a trace record, or a function that makes records (a batch send
costs one append; its records are made by the background task, from what the event
holds: of a batch whose messages differ only in their ids, its first message, the ids
and the result -- :func:`alike_pub_records` -- not the batch). The background task
takes what is queued, encodes the records (:mod:`tidemq.codec.trace`) into trace messages
of at most :data:`MAX_BODY` bytes, each with the msgIds and keys of its records as its
``KEYS`` so the broker's key index finds them, and sends them with the given send
function (up to :data:`BATCH_MESSAGES` messages per request, up to :data:`IN_FLIGHT`
requests at a time, so tracing keeps up with a fast producer). A trace message goes
alone, as upstream's do, so its body is compressed (:func:`trace_send_options`): the
records of a busy producer are much alike and pack to a few bytes each. Like
upstream's dispatcher it lets events gather before it sends them, for at most
:data:`LINGER` seconds or until :data:`GATHER_EVENTS` are queued: a producer sending one
message at a time would otherwise pay a trace request for every send. A drain lets the
event loop run after every :data:`YIELD_EVERY` events it turns into records, so the
answers of the sends it would otherwise hold up are read meanwhile. A failed
trace send is counted (:attr:`Tracer.failed_records`) and logged, never raised. A record
that is not sent for any other reason -- a full queue, a close whose timeout ends while
records are still queued or being sent -- is counted in :attr:`Tracer.dropped` and
logged (at most once every :data:`LOG_EVERY` seconds), never lost silently.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import dataclasses
import functools
import itertools
import logging
import operator
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from tidemq.codec.compression import FAST_ZLIB_LEVEL, CompressionType
from tidemq.codec.message import SendOptions
from tidemq.codec.trace import (
    EndTransactionRecord,
    MessageType,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    encode_pubs,
    encode_record,
    pub_parts,
)
from tidemq.codec.trace_text import pub_run, unique_words
from tidemq.errors import TideMQError
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.types import Message, MessageExt, SendResult, SendStatus

__all__ = ["BATCH_MESSAGES", "GATHER_EVENTS", "IN_FLIGHT", "LINGER", "LOG_EVERY", "MAX_BODY",
           "YIELD_EVERY",
           "EncodedRecords", "RecordRun",
           "TraceEvent", "Tracer",
           "alike_pub_records", "end_transaction_record", "pub_records", "sub_after_records",
           "sub_before_records", "trace_send_options"]

log = logging.getLogger(__name__)

#: Largest trace-message body, bytes (upstream's ``maxMsgSize``).
MAX_BODY = 128_000
#: Trace messages sent in one request at most (one: a single send's body is compressed,
#: an outer batch's are not), and requests in flight.
BATCH_MESSAGES = 1
IN_FLIGHT = 4
#: Seconds the background task lets events gather before it sends them, and the queued
#: events that end the wait early. :meth:`Tracer.flush` and :meth:`Tracer.close` send at
#: once.
LINGER = 0.1
GATHER_EVENTS = 256
#: Events a drain turns into records between two passes of the event loop, so that a
#: drain does not hold up the sends whose answers arrive meanwhile.
YIELD_EVERY = 16
#: Seconds between two warnings about failed or dropped trace records, at least.
LOG_EVERY = 10.0
#: Characters of a trace message's ``KEYS`` at most (a property value stays well under
#: the 32 KiB the property string may hold).
_MAX_KEYS = 24_000
REGION = "DefaultRegion"
#: The compression (type and level) of each ``trace_compression``; ``None``: none. zlib,
#: the default, is what Java's trace producer sends and what every RocketMQ reader
#: inflates (RocketMQ 4's cannot read zstd or lz4); at ISA-L's level
#: (:data:`~tidemq.codec.compression.FAST_ZLIB_LEVEL`) a trace body packs as tightly as
#: at Java's level 5, at the CPU cost of zstd's first fast level.
_COMPRESSIONS: dict[str, tuple[CompressionType, int] | None] = {
    "zstd": (CompressionType.ZSTD, -1), "zlib": (CompressionType.ZLIB, FAST_ZLIB_LEVEL),
    "lz4": (CompressionType.LZ4, 0), "none": None}


def trace_send_options(opts: SendOptions, compression: str) -> SendOptions:
    """``opts`` (a trace producer's) with the trace messages' ``compression`` (a
    ``trace_compression`` value): bodies of ``opts.compress_over`` bytes or more are
    compressed so."""
    chosen = _COMPRESSIONS[compression]
    if chosen is None:
        return dataclasses.replace(opts, compress_over=0)
    return dataclasses.replace(opts, compression=chosen[0], compression_level=chosen[1])


class EncodedRecords:
    """Records already encoded (:func:`~tidemq.codec.trace.encode_pubs`), as columns:
    each record's own text (``texts[i]``: the record is ``prefix + texts[i] + suffix``),
    and the msgId and keys its trace message is indexed under."""

    __slots__ = ("keys", "msg_ids", "prefix", "suffix", "texts")

    def __init__(self, texts: list[str], msg_ids: list[str], keys: list[str], *,
                 prefix: str = "", suffix: str = "") -> None:
        self.texts, self.msg_ids, self.keys = texts, msg_ids, keys
        self.prefix, self.suffix = prefix, suffix


class RecordRun:
    """The Pub records of a batch whose messages differ only in their ids, as one text
    (:func:`~tidemq.codec.trace_text.pub_run`): record ``i`` is ``prefix``, its core,
    ``suffix``, and ``text`` is the ``count`` cores joined by ``suffix + prefix``, each
    ``core_width`` characters. ``ids`` are the records' msgIds joined by commas, each
    ``id_width`` characters, and ``keys`` the keys every record has: what the trace
    message is indexed under."""

    __slots__ = ("core_width", "count", "id_width", "ids", "keys", "prefix", "suffix",
                 "text")

    def __init__(self, text: str, count: int, core_width: int, ids: str, id_width: int,
                 keys: str, *, prefix: str, suffix: str) -> None:
        self.text, self.count, self.core_width = text, count, core_width
        self.ids, self.id_width, self.keys = ids, id_width, keys
        self.prefix, self.suffix = prefix, suffix


TraceEvent = (TraceRecord | list[TraceRecord]
              | Callable[[], Iterable[TraceRecord] | EncodedRecords | RecordRun])
SendTrace = Callable[[Sequence[Message]], Awaitable[SendResult]]


def _store_host(offset_msg_id: str) -> str:
    """The ``ip:port`` an offset msgId names ("" if it names none); the id's last 16 hex
    digits are the offset, the rest the host."""
    return _host_text(offset_msg_id[:-16]) if len(offset_msg_id) > 16 else ""


@functools.lru_cache(maxsize=256)
def _host_text(host_hex: str) -> str:
    try:
        host, _ = decode_offset_msg_id(host_hex + "0" * 16)
    except (TideMQError, ValueError):
        return ""
    return str(host)


def _msg_type(msg: Message) -> MessageType:
    props = msg.properties
    if props.get("TRAN_MSG") == "true":
        return MessageType.TRANS_HALF
    if "DELAY" in props or "TIMER_DELAY_SEC" in props or "TIMER_DELIVER_MS" in props:
        return MessageType.DELAY
    return MessageType.NORMAL


_PROPERTIES = operator.attrgetter("properties")
_BODY = operator.attrgetter("body")


class _Keyed(Protocol):
    @property
    def keys(self) -> list[str]: ...

    @property
    def alike(self) -> bool: ...


def pub_records(group: str, msgs: Sequence[Message], msg_ids: Sequence[str] | _Keyed,
                result: SendResult, born_ms: int, cost_ms: int
                ) -> EncodedRecords | RecordRun:
    """The Pub records, encoded, of a send of ``msgs`` (one, or a batch whose
    ``UNIQ_KEY``\\ s are ``msg_ids``, or the ``keys`` of a prepared batch) answered by
    ``result``. The messages of a prepared batch that are :attr:`alike` are read once,
    and their records made as one text (:class:`RecordRun`) when their ids are of one
    width."""
    ok = result.status is SendStatus.SEND_OK
    if len(msgs) == 1:  # a single send: no columns
        only, offset_id = msgs[0], result.offset_msg_id
        # the exact types first: an ABC's isinstance is the slow one
        msg_id = msg_ids[0] if isinstance(msg_ids, (tuple, list, Sequence)) else (
            msg_ids.keys[0])
        own = only.properties
        tag, key = own.get("TAGS", ""), own.get("KEYS", "")
        one = encode_pubs(born_ms, REGION, group, only.topic, _store_host(offset_id), cost_ms,
                          _msg_type(only), ok, (msg_id,), (tag,), (key,), (len(only.body),),
                          (offset_id,))
        return EncodedRecords(one.cores, [msg_id], [key], prefix=one.prefix,
                              suffix=one.suffix)
    n = len(msgs)
    if not isinstance(msg_ids, (tuple, list, Sequence)):
        if msg_ids.alike:
            return alike_pub_records(group, msgs[0], _joined_ids(result, msg_ids.keys, n),
                                     result, born_ms, cost_ms, n)
        msg_ids = msg_ids.keys
    first = msgs[0]
    # map over dict.get and operator: C loops
    if not isinstance(msgs, (list, tuple)):
        msgs = list(msgs)  # a view that makes its messages when read: once
    props = list(map(_PROPERTIES, msgs))
    tags = list(map(dict.get, props, itertools.repeat("TAGS"), itertools.repeat("")))
    keys = list(map(dict.get, props, itertools.repeat("KEYS"), itertools.repeat("")))
    lengths = list(map(len, map(_BODY, msgs)))
    return _column_records(group, first, list(msg_ids[:n]), tags, keys, lengths, result,
                           born_ms, cost_ms, ok)


def _joined_ids(result: SendResult, keys: Sequence[str], n: int) -> str:
    """The msgIds of a batch of ``n`` messages whose ``UNIQ_KEY``\\ s are ``keys``,
    joined by commas: an outer batch's result names them so; an inner batch's names its
    own key."""
    joined = result.msg_id
    return joined if "," in joined else ",".join(keys[:n])


def _column_records(group: str, first: Message, ids: list[str], tags: list[str],
                    keys: list[str], lengths: list[int], result: SendResult, born_ms: int,
                    cost_ms: int, ok: bool) -> EncodedRecords:
    """The Pub records of a batch whose messages' ids, tags, keys and body lengths are
    the columns given, made one by one."""
    n = len(ids)
    offset_ids = result.offset_msg_id.split(",")
    if len(offset_ids) != n:
        offset_ids = [result.offset_msg_id] * n
    texts = encode_pubs(born_ms, REGION, group, first.topic, _store_host(offset_ids[0]),
                        cost_ms, _msg_type(first), ok, ids,
                        tags, keys, lengths, offset_ids[:n])
    return EncodedRecords(texts.cores, ids, keys, prefix=texts.prefix, suffix=texts.suffix)


def alike_pub_records(group: str, first: Message, joined_ids: str, result: SendResult,
                      born_ms: int, cost_ms: int, n: int) -> EncodedRecords | RecordRun:
    """The Pub records of a send of ``n`` messages alike but for their ids (one topic,
    the properties, flag and body length of ``first``), whose msgIds are ``joined_ids``
    (joined by commas), answered by ``result``: what a batch's trace needs of it, so an
    event keeps these and not the batch (:meth:`Tracer.record`). One text
    (:class:`RecordRun`) when the ids are of one width, else made one by one."""
    run = _alike_run(group, first, joined_ids, result, born_ms, cost_ms, n)
    if run is not None:
        return run
    props = first.properties
    ids = joined_ids.split(",")[:n]
    return _column_records(group, first, ids, [props.get("TAGS", "")] * n,
                           [props.get("KEYS", "")] * n, [len(first.body)] * n, result,
                           born_ms, cost_ms, result.status is SendStatus.SEND_OK)


def _alike_run(group: str, first: Message, joined: str, result: SendResult, born_ms: int,
               cost_ms: int, n: int) -> RecordRun | None:
    """The records of a batch of ``n`` alike messages whose msgIds are ``joined`` as one
    :class:`RecordRun`, or ``None`` when its ids or offset ids are not all of one width
    (or their count is not ``n``): then they are made one by one."""
    offsets = result.offset_msg_id
    props = first.properties
    tag, key = props.get("TAGS", ""), props.get("KEYS", "")
    prefix, mid, suffix = pub_parts(born_ms, REGION, group, first.topic,
                                    _store_host(offsets.partition(",")[0]), cost_ms,
                                    _msg_type(first), result.status is SendStatus.SEND_OK,
                                    tag, key, len(first.body))
    try:
        text, count, id_width, offset_width = pub_run(mid, suffix + prefix, joined, offsets)
    except ValueError:  # the offset ids are not one a message: made one by one
        return None
    if count != n or id_width < 0 or offset_width < 0:
        return None
    return RecordRun(text, n, id_width + len(mid) + offset_width, joined, id_width,
                     key, prefix=prefix, suffix=suffix)


def end_transaction_record(group: str, msg: Message | MessageExt, msg_id: str, transaction_id: str,
                           offset_msg_id: str, state: str, *, from_check: bool, now: int
                           ) -> TraceRecord:
    """The EndTransaction record of producer ``group`` ending the transaction of ``msg``
    with ``state`` (``COMMIT_MESSAGE``, ``ROLLBACK_MESSAGE``, ``UNKNOW``), after a
    broker's check-back when ``from_check``; its type is TRANS_COMMIT, as upstream's."""
    props = msg.properties
    return EndTransactionRecord(now, REGION, group, msg.topic, msg_id, props.get("TAGS", ""),
                                props.get("KEYS", ""), _store_host(offset_msg_id),
                                MessageType.TRANS_COMMIT, transaction_id, state, from_check)


def sub_before_records(group: str, request_id: str, msgs: Sequence[MessageExt],
                       begin_ms: int) -> list[TraceRecord]:
    """The SubBefore records of a delivery of ``msgs`` to ``group``."""
    return [SubBeforeRecord(begin_ms, REGION, group, request_id, m.msg_id, m.reconsume_times,
                            " ".join(m.keys)) for m in msgs]


def sub_after_records(request_id: str, msgs: Sequence[MessageExt], cost_ms: int,
                      success: bool, code: int, end_ms: int) -> list[TraceRecord]:
    """The SubAfter records of the delivery ``request_id``: its cost shared out over its
    messages, as upstream."""
    each = cost_ms // max(1, len(msgs))
    return [SubAfterRecord(request_id, m.msg_id, each, success, " ".join(m.keys), code,
                           end_ms) for m in msgs]


class Tracer:
    """See the module docstring. ``send`` sends a batch of trace messages; ``capacity``
    bounds the queued events and ``max_bytes`` the message bytes they hold on to (an
    event that makes its records later keeps the messages it describes until then);
    ``linger`` and ``gather``: see :data:`LINGER`."""

    def __init__(self, send: SendTrace, *, topic: str, capacity: int = 20_000,
                 max_bytes: int = 64 * 1024 * 1024, linger: float = LINGER,
                 gather: int = GATHER_EVENTS,
                 on_close: Callable[[], Awaitable[None]] | None = None) -> None:
        if capacity < 1 or max_bytes < 1:
            raise ValueError("the trace queue needs room for at least one event")
        if linger < 0 or gather < 1:
            raise ValueError("the trace linger must not be negative, nor gather below 1")
        self.topic = topic
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.linger = linger
        self.gather = gather
        #: Message bytes the queued events hold on to.
        self.held_bytes = 0
        self._send = send
        self._on_close = on_close
        self._queue: collections.deque[tuple[TraceEvent, int]] = collections.deque()
        self._wake = asyncio.Event()
        self._full = asyncio.Event()  # ``gather`` events queued: stop lingering
        self._draining = asyncio.Lock()  # one drain at a time: close waits for the task's
        self._task: asyncio.Task[None] | None = None
        #: Trace sends in flight.
        self._sends: set[asyncio.Task[None]] = set()
        self._closing = False
        #: Set by :meth:`close` before it cancels what is still being sent: the records so
        #: cancelled are counted as dropped (an abort drops them without counting).
        self._give_up = False
        #: Events refused (a full queue, a closed tracer), records left unsent by a close
        #: whose timeout ended, and pull-consumer deliveries forgotten before their commit.
        self.dropped = 0
        #: Records sent to the trace topic, and records whose trace message failed.
        self.sent_records = 0
        self.failed_records = 0
        self._last_failure_log = 0.0
        self._last_drop_log = 0.0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def record(self, event: TraceEvent, held: int = 0) -> None:
        """Queue ``event``, which holds on to ``held`` bytes of messages until its records
        are made; a full queue drops it (counted). Never blocks, never raises."""
        if (len(self._queue) >= self.capacity or self.held_bytes + held > self.max_bytes
                or self._closing):
            self.drop(1, "the tracer is closed" if self._closing else "the trace queue is full")
            return
        self.held_bytes += held
        self._queue.append((event, held))
        if len(self._queue) >= self.gather:
            self._full.set()
        if not self._wake.is_set():
            self._wake.set()

    def drop(self, count: int, why: str) -> None:
        """Count ``count`` trace records or events as dropped because ``why``, with a
        warning at most every :data:`LOG_EVERY` seconds."""
        self.dropped += count
        now = time.monotonic()
        if now - self._last_drop_log >= LOG_EVERY:
            self._last_drop_log = now
            log.warning("%d trace record(s) for %s dropped (%d in all): %s", count,
                        self.topic, self.dropped, why)

    @property
    def queued(self) -> int:
        return len(self._queue)

    async def flush(self) -> None:
        """Send everything queued now (the background task's work, done here)."""
        await self._drain()

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most ``timeout`` seconds; what is left then --
        queued, or taken and not yet answered -- is dropped and counted), then stop."""
        self._closing = True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._drain()
        if self._queue:
            self.drop(len(self._queue), f"still queued when the close's {timeout} s ended")
        self._give_up = True
        await self._cancel()
        if self._on_close is not None:
            await self._on_close()
            self._on_close = None

    async def abort(self) -> None:
        """Stop at once, sending nothing more (what a crash leaves behind)."""
        self._closing = True
        await self._cancel()

    async def _cancel(self) -> None:
        self._queue.clear()
        self.held_bytes = 0
        tasks = [*self._sends, *([self._task] if self._task is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._sends.clear()
        self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            if len(self._queue) < self.gather:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.linger):
                        await self._full.wait()
            self._wake.clear()
            self._full.clear()
            await self._drain()

    async def _drain(self) -> None:
        async with self._draining:
            sends = self._sends
            try:
                await self._drain_locked(sends)
            finally:
                if sends:
                    await asyncio.wait(sends)
                    sends.clear()

    async def _drain_locked(self, sends: set[asyncio.Task[None]]) -> None:
        """Turn the queued events into trace messages and send them, a batch of up to
        :data:`BATCH_MESSAGES` messages per request and :data:`IN_FLIGHT` requests at a
        time, while events keep coming."""
        builder = _MessageBuilder(self.topic)
        try:
            await self._build_and_launch(builder, sends)
        except asyncio.CancelledError:
            if self._closing:  # a close (whose timeout may have ended this drain) or an abort
                self._lost(builder.pending())
            raise

    async def _build_and_launch(self, builder: _MessageBuilder,
                                sends: set[asyncio.Task[None]]) -> None:
        made = 0
        while self._queue:
            if made == YIELD_EVERY:
                made = 0
                await asyncio.sleep(0)
                continue  # a close may have emptied the queue meanwhile
            made += 1
            event, held = self._queue.popleft()
            self.held_bytes -= held
            if isinstance(event, list):
                records: Iterable[TraceRecord] | EncodedRecords | RecordRun = event
            elif callable(event):
                try:
                    records = event()
                except Exception:  # a trace must never take the client down
                    log.exception("making trace records failed")
                    continue
            else:
                records = (event,)
            if isinstance(records, (EncodedRecords, RecordRun)):
                builder.extend(records)
            else:
                for record in records:
                    if not builder.add(record):
                        self.failed_records += 1
            if len(builder.messages) >= BATCH_MESSAGES:
                await self._launch(sends, builder)
        builder.close()
        if builder.messages:
            await self._launch(sends, builder)

    async def _launch(self, sends: set[asyncio.Task[None]], builder: _MessageBuilder) -> None:
        """Send the builder's finished messages, :data:`BATCH_MESSAGES` a request, each
        request once fewer than :data:`IN_FLIGHT` are in flight (a message stays the
        builder's until its request is made). One event's records may fill several."""
        while builder.messages:
            while len(sends) >= IN_FLIGHT:
                done, _ = await asyncio.wait(sends, return_when=asyncio.FIRST_COMPLETED)
                sends -= done
            batch = builder.take(BATCH_MESSAGES)
            sends.add(asyncio.get_running_loop().create_task(self._send_batch(batch)))

    def _lost(self, count: int) -> None:
        if count:
            self.drop(count, "the close's timeout ended before they were sent")

    async def _send_batch(self, batch: list[tuple[Message, int]]) -> None:
        count = sum(n for _, n in batch)
        try:
            await self._send([m for m, _ in batch])
        except asyncio.CancelledError:
            if self._give_up:
                self._lost(count)
            raise
        except Exception as exc:  # counted and logged: tracing never fails the client
            self.failed_records += count
            now = time.monotonic()
            if now - self._last_failure_log >= LOG_EVERY:
                self._last_failure_log = now
                log.warning("sending %d trace record(s) to %s failed: %s", count,
                            self.topic, exc)
            return
        self.sent_records += count


class _MessageBuilder:
    """Records laid into trace messages of at most :data:`MAX_BODY` bytes and
    :data:`_MAX_KEYS` characters of keys. The keys of the message being built are kept as
    texts of space-separated keys, in the order of its records, and made its ``KEYS``
    when it ends, each key once (:func:`~tidemq.codec.trace_text.unique_words`)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.messages: list[tuple[Message, int]] = []
        self._body: list[str] = []
        self._keys: list[str] = []
        self._size = self._keys_len = self._count = 0

    def add(self, record: TraceRecord) -> bool:
        """Add ``record``; ``False`` when it cannot be written (a separator in a field)."""
        try:
            text = encode_record(record)
        except ValueError as exc:
            log.warning("a trace record was left out: %s", exc)
            return False
        self._add_one(text, record.msg_id, record.keys)
        return True

    def _add_one(self, text: str, msg_id: str, keys: str) -> None:
        """One record's whole text, counted as :meth:`extend` counts it."""
        key_length = len(msg_id) + 1 + (len(keys) + 1 if keys else 0)
        if self._count and (self._size + len(text) > MAX_BODY
                            or self._keys_len + key_length > _MAX_KEYS):
            self.close()
        self._body.append(text)
        self._keys.append(f"{msg_id} {keys}" if keys else msg_id)
        self._size += len(text)
        self._keys_len += key_length
        self._count += 1

    def extend(self, records: EncodedRecords | RecordRun) -> None:
        """Add records already encoded, as many at a time as fit in the message being
        built (lengths summed and cut points found by C loops: a batch's hundreds)."""
        if isinstance(records, RecordRun):
            self._extend_run(records)
            return
        texts, msg_ids, keys = records.texts, records.msg_ids, records.keys
        prefix, suffix = records.prefix, records.suffix
        if len(texts) == 1:  # a single send's
            self._add_one(f"{prefix}{texts[0]}{suffix}", msg_ids[0], keys[0])
            return
        shared = len(prefix) + len(suffix)
        between = suffix + prefix
        start, n = 0, len(texts)
        with_keys = any(keys)
        if shared and not with_keys and n:
            self._extend_alike(records)
            return
        while start < n:
            lengths = map(len, texts[start:])
            if shared:
                lengths = map(shared.__add__, lengths)
            sizes = list(itertools.accumulate(lengths, initial=self._size))
            cut = bisect.bisect_right(sizes, MAX_BODY) - 1
            # a separator after each msgId and each record's keys, counted without
            # removing repeats: never less than the keys take
            key_lengths = map(len, msg_ids[start:])
            if with_keys:
                key_lengths = map(operator.add, key_lengths, map(len, keys[start:]))
            key_sizes = list(itertools.accumulate(
                map((2 if with_keys else 1).__add__, key_lengths), initial=self._keys_len))
            cut = min(cut, bisect.bisect_right(key_sizes, _MAX_KEYS) - 1)
            if cut == 0:
                if self._count:
                    self.close()
                    continue
                cut = 1  # one record larger than a message: it goes alone
            end = start + cut
            if shared:
                # three parts, joined with the rest at close: the records copied once
                self._body += (prefix, between.join(texts[start:end]), suffix)
            else:
                self._body.extend(texts[start:end])
            self._keys.append(" ".join(msg_ids[start:end]))
            if with_keys:
                self._keys.append(" ".join(keys[start:end]))
            self._size = sizes[cut]
            self._keys_len = key_sizes[cut]
            self._count += cut
            start = end
            if start < n:
                self.close()

    def _extend_alike(self, records: EncodedRecords) -> None:
        """:meth:`extend` for records around one shared text, without keys of their own
        (a uniform batch's): each record counted as wide as the widest, so cut points
        are two divisions, not sums over the records (a message may stay a little under
        its bounds when the ids differ in width)."""
        texts, msg_ids = records.texts, records.msg_ids
        prefix, suffix = records.prefix, records.suffix
        between = suffix + prefix
        width = len(prefix) + len(suffix) + max(map(len, texts))
        key_width = 1 + max(map(len, msg_ids))  # and a separator
        start, n = 0, len(texts)
        while start < n:
            room = self._room(width, key_width)
            if not room:
                continue  # a full message closed: the next one takes them
            end = min(n, start + room)
            self._body += (prefix, between.join(texts[start:end]), suffix)
            self._keys.append(" ".join(msg_ids[start:end]))
            self._took(end - start, width, key_width)
            start = end
            if start < n:
                self.close()

    def _took(self, records: int, width: int, key_width: int) -> None:
        """Count ``records`` of ``width`` body and ``key_width`` key characters as added."""
        self._size += records * width
        self._keys_len += records * key_width
        self._count += records

    def _room(self, width: int, key_width: int) -> int:
        """How many records of ``width`` body characters and ``key_width`` key characters
        the open message takes: 0 once it is full (it is closed), 1 for a record larger
        than a message (it goes alone)."""
        room = min((MAX_BODY - self._size) // width, (_MAX_KEYS - self._keys_len) // key_width)
        if room > 0:
            return room
        if self._count:
            self.close()
            return 0
        return 1

    def _extend_run(self, run: RecordRun) -> None:
        """:meth:`extend` for a :class:`RecordRun`: its records are of one width, so the
        cut points are two divisions and each part of the run a slice of its text, and
        of its ids."""
        prefix, suffix, text, ids, keys = run.prefix, run.suffix, run.text, run.ids, run.keys
        step = run.core_width + len(suffix) + len(prefix)  # a core and what follows it
        width = len(prefix) + len(suffix) + run.core_width
        id_step = run.id_width + 1  # an id and its comma
        key_width = id_step + (len(keys) + 1 if keys else 0)  # and their separators
        start, n = 0, run.count
        while start < n:
            room = self._room(width, key_width)
            if not room:
                continue  # a full message closed: the next one takes them
            end = min(n, start + room)
            self._body += (prefix, text[start * step:end * step - step + run.core_width],
                           suffix)
            self._keys.append(ids[start * id_step:end * id_step - 1].replace(",", " "))
            if keys:
                self._keys.append(keys)
            self._took(end - start, width, key_width)
            start = end
            if start < n:
                self.close()

    def close(self) -> None:
        """End the message being built."""
        if self._count:
            body = "".join(self._body).encode()
            keys = unique_words(" ".join(self._keys))
            self.messages.append((Message(self.topic, body, {"KEYS": keys}),
                                  self._count))
        self._body, self._keys = [], []
        self._size = self._keys_len = self._count = 0

    def pending(self) -> int:
        """Records added and not yet taken (finished messages and the open one)."""
        return sum(n for _, n in self.messages) + self._count

    def take(self, count: int) -> list[tuple[Message, int]]:
        """The first ``count`` finished messages, no longer the builder's."""
        out, self.messages = self.messages[:count], self.messages[count:]
        return out
