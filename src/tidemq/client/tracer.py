"""Tracer: records a client's message-trace events and sends them to the trace topic in
the background (RocketMQ's ``AsyncTraceDispatcher``).

A producer or consumer with ``enable_msg_trace`` on owns one. Recording
(:meth:`Tracer.record`) only appends an event to a bounded queue: a full queue drops the
event and counts it (:attr:`Tracer.dropped`), so tracing never blocks or fails a send or
a consume. An event is a trace record, or a function that makes records (a batch send
costs one append; its records are made by the background task). The background task
takes what is queued, encodes the records (:mod:`tidemq.codec.trace`) into trace messages
of at most :data:`MAX_BODY` bytes and :data:`MAX_RECORDS` records, each with the msgIds
and keys of its records as its ``KEYS`` so the broker's key index finds them, and sends
them with the given send function. A failed trace send is counted
(:attr:`Tracer.failed_records`) and logged, never raised.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from tidemq.codec.trace import (
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    encode_record,
    trace_keys,
)
from tidemq.errors import TideMQError
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.types import Message, MessageExt, SendResult, SendStatus

__all__ = ["MAX_BODY", "MAX_RECORDS", "TraceEvent", "Tracer", "pub_records",
           "sub_after_records", "sub_before_records"]

log = logging.getLogger(__name__)

#: Largest trace-message body, bytes (upstream's ``maxMsgSize``).
MAX_BODY = 128_000
#: Records in one trace message at most (bounds its ``KEYS`` property).
MAX_RECORDS = 100
#: Characters of a trace message's ``KEYS`` at most (a property value stays well under
#: the 32 KiB the property string may hold).
_MAX_KEYS = 16_000
REGION = "DefaultRegion"

TraceEvent = TraceRecord | Callable[[], Iterable[TraceRecord]]
SendTrace = Callable[[Message], Awaitable[SendResult]]


def _store_host(offset_msg_id: str) -> str:
    try:
        host, _ = decode_offset_msg_id(offset_msg_id)
    except (TideMQError, ValueError):
        return ""
    return str(host)


def _msg_type(msg: Message) -> MessageType:
    props = msg.properties
    if "DELAY" in props or "TIMER_DELAY_SEC" in props or "TIMER_DELIVER_MS" in props:
        return MessageType.DELAY
    return MessageType.NORMAL


class _Keyed(Protocol):
    @property
    def keys(self) -> list[str]: ...


def pub_records(group: str, msgs: Sequence[Message], msg_ids: Sequence[str] | _Keyed,
                result: SendResult, born_ms: int, cost_ms: int) -> list[PubRecord]:
    """The Pub records of a send of ``msgs`` (one, or a batch whose ``UNIQ_KEY``\\ s are
    ``msg_ids``, or the ``keys`` of a prepared batch) answered by ``result``."""
    if not isinstance(msg_ids, Sequence):
        msg_ids = msg_ids.keys
    offset_ids = result.offset_msg_id.split(",")
    if len(offset_ids) != len(msgs):
        offset_ids = [result.offset_msg_id] * len(msgs)
    ok = result.status is SendStatus.SEND_OK
    host = _store_host(offset_ids[0])
    return [PubRecord(born_ms, REGION, group, msg.topic, msg_id, msg.tags or "",
                      " ".join(msg.keys), host, len(msg.body), cost_ms, _msg_type(msg),
                      offset_id, ok)
            for msg, msg_id, offset_id in zip(msgs, msg_ids, offset_ids, strict=False)]


def sub_before_records(group: str, request_id: str, msgs: Sequence[MessageExt],
                       begin_ms: int) -> list[SubBeforeRecord]:
    """The SubBefore records of a delivery of ``msgs`` to ``group``."""
    return [SubBeforeRecord(begin_ms, REGION, group, request_id, m.msg_id, m.reconsume_times,
                            " ".join(m.keys)) for m in msgs]


def sub_after_records(request_id: str, msgs: Sequence[MessageExt], cost_ms: int,
                      success: bool, code: int, end_ms: int) -> list[SubAfterRecord]:
    """The SubAfter records of the delivery ``request_id``: its cost shared out over its
    messages, as upstream."""
    each = cost_ms // max(1, len(msgs))
    return [SubAfterRecord(request_id, m.msg_id, each, success, " ".join(m.keys), code,
                           end_ms) for m in msgs]


class Tracer:
    """See the module docstring. ``send`` sends one trace message; ``capacity`` bounds
    the queued events."""

    def __init__(self, send: SendTrace, *, topic: str, capacity: int = 20_000,
                 on_close: Callable[[], Awaitable[None]] | None = None) -> None:
        if capacity < 1:
            raise ValueError("the trace queue needs room for at least one event")
        self.topic = topic
        self.capacity = capacity
        self._send = send
        self._on_close = on_close
        self._queue: collections.deque[TraceEvent] = collections.deque()
        self._wake = asyncio.Event()
        self._draining = asyncio.Lock()  # one drain at a time: close waits for the task's
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        #: Events refused because the queue was full.
        self.dropped = 0
        #: Records sent to the trace topic, and records whose trace message failed.
        self.sent_records = 0
        self.failed_records = 0
        self._last_failure_log = 0.0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def record(self, event: TraceEvent) -> None:
        """Queue ``event``; a full queue drops it (counted). Never blocks, never raises."""
        if len(self._queue) >= self.capacity or self._closing:
            self.dropped += 1
            return
        self._queue.append(event)
        if not self._wake.is_set():
            self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    async def flush(self) -> None:
        """Send everything queued now (the background task's work, done here)."""
        await self._drain()

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then stop."""
        self._closing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drain(), timeout)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._on_close is not None:
            await self._on_close()
            self._on_close = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._drain()

    async def _drain(self) -> None:
        async with self._draining:
            await self._drain_locked()

    async def _drain_locked(self) -> None:
        pending: list[TraceRecord] = []
        while self._queue:
            event = self._queue.popleft()
            if callable(event):
                try:
                    pending.extend(event())
                except Exception:  # a trace must never take the client down
                    log.exception("making trace records failed")
            else:
                pending.append(event)
            if len(pending) >= MAX_RECORDS:
                await self._send_records(pending)
                pending = []
        if pending:
            await self._send_records(pending)

    async def _send_records(self, records: list[TraceRecord]) -> None:
        body: list[str] = []
        size = 0
        group: list[TraceRecord] = []
        keys_len = 0
        for record in records:
            try:
                text = encode_record(record)
            except ValueError as exc:
                self.failed_records += 1
                log.warning("a trace record was left out: %s", exc)
                continue
            record_keys = len(record.msg_id) + len(record.keys) + 2
            if group and (size + len(text) > MAX_BODY or keys_len + record_keys > _MAX_KEYS):
                await self._send_one(body, group)
                body, group, size, keys_len = [], [], 0, 0
            body.append(text)
            group.append(record)
            size += len(text)
            keys_len += record_keys
        if group:
            await self._send_one(body, group)

    async def _send_one(self, body: list[str], records: list[TraceRecord]) -> None:
        msg = Message(self.topic, "".join(body).encode(),
                      {"KEYS": " ".join(trace_keys(records))})
        try:
            await self._send(msg)
        except Exception as exc:  # counted and logged: tracing never fails the client
            self.failed_records += len(records)
            now = time.monotonic()
            if now - self._last_failure_log >= 10.0:
                self._last_failure_log = now
                log.warning("sending %d trace record(s) to %s failed: %s", len(records),
                            self.topic, exc)
            return
        self.sent_records += len(records)
