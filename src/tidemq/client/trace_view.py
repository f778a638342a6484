"""A message's trace as people read it: who sent it and when it was stored, which groups
consumed it, how long each took and after how many retries.

:func:`query_trace` finds the trace messages that name a msgId in the trace topic (the
broker's key index: a trace message's ``KEYS`` hold its records' msgIds) and
:func:`build_trace` turns their records into a :class:`MessageTrace`: one
:class:`SendTrace` per Pub record and one :class:`ConsumeTrace` per delivery, a SubAfter
joined to the SubBefore of the same request id (the SubAfter does not carry the group),
and one :class:`TransactionTrace` per EndTransaction record (a transactional message's
end: its producer's own, or its answer to a broker's check-back).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable

from tidemq.client.admin import AdminClient
from tidemq.codec.trace import (
    DEFAULT_TRACE_TOPIC,
    EndTransactionRecord,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    decode_trace_data,
)
from tidemq.errors import TideMQError
from tidemq.types import MessageExt

__all__ = ["CONSUMES_MAY_LAG", "RECENT_MS", "ConsumeTrace", "MessageTrace", "SendTrace",
           "TransactionTrace", "build_trace", "consumes_may_lag", "query_trace"]

#: How long after a message is stored a query may still miss its consume records: a
#: consumer gathers its trace records for up to 0.1 s before it sends them, and the
#: broker indexes a trace message's keys just after it stores it.
RECENT_MS = 5000
#: What to tell whoever reads a trace that :func:`consumes_may_lag`.
CONSUMES_MAY_LAG = "consume records may not be indexed yet; query again in a moment"


@dataclasses.dataclass(frozen=True, slots=True)
class SendTrace:
    group: str
    client_host: str
    send_ms: int
    cost_ms: int
    success: bool
    topic: str
    tags: str
    keys: str
    store_host: str
    offset_msg_id: str
    #: When the broker stored the message (0: not known).
    store_ms: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeTrace:
    group: str
    client_host: str
    #: When the delivery began (the SubBefore), else when it ended.
    consume_ms: int
    retry_times: int
    #: ``None``: no SubAfter (yet): the outcome is not known.
    cost_ms: int | None
    success: bool | None


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionTrace:
    """How a producer ended the message's transaction."""

    group: str
    client_host: str
    end_ms: int
    #: ``COMMIT_MESSAGE``, ``ROLLBACK_MESSAGE`` or ``UNKNOW`` (upstream's names).
    state: str
    #: Whether it answered a broker's check-back.
    from_check: bool
    transaction_id: str
    store_host: str


@dataclasses.dataclass(frozen=True, slots=True)
class MessageTrace:
    msg_id: str
    sends: list[SendTrace]
    consumes: list[ConsumeTrace]
    #: Records of the trace topic that could not be read (why, for each).
    refused: list[str]
    transactions: list[TransactionTrace] = dataclasses.field(default_factory=list)
    #: A send but no delivery yet, of a message stored so recently that its consume
    #: records may not be indexed yet (:func:`consumes_may_lag` when it was queried).
    consumes_may_lag: bool = False


def _records(trace_msgs: Iterable[MessageExt]
             ) -> tuple[list[tuple[TraceRecord, MessageExt]], list[str]]:
    out: list[tuple[TraceRecord, MessageExt]] = []
    refused: list[str] = []
    for tm in trace_msgs:
        decoded = decode_trace_data(tm.body)
        out += [(r, tm) for r in decoded.records]
        refused += [f"{tm.msg_id} record {i}: {why}" for i, why in decoded.refused]
    return out, refused


def build_trace(msg_id: str, trace_msgs: Iterable[MessageExt]) -> MessageTrace:
    """The trace of ``msg_id`` that the trace messages ``trace_msgs`` hold."""
    records, refused = _records(trace_msgs)
    sends: list[SendTrace] = []
    befores: dict[str, tuple[SubBeforeRecord, MessageExt]] = {}
    afters: list[tuple[SubAfterRecord, MessageExt]] = []
    ends: list[TransactionTrace] = []
    for record, tm in records:
        if record.msg_id != msg_id:
            continue
        if isinstance(record, PubRecord):
            sends.append(SendTrace(record.group, tm.born_host, record.timestamp,
                                   record.cost_ms, record.success, record.topic, record.tags,
                                   record.keys, record.store_host, record.offset_msg_id))
        elif isinstance(record, SubBeforeRecord):
            befores[record.request_id] = (record, tm)
        elif isinstance(record, SubAfterRecord):
            afters.append((record, tm))
        elif isinstance(record, EndTransactionRecord):
            ends.append(TransactionTrace(record.group, tm.born_host, record.timestamp,
                                         record.transaction_state, record.from_check,
                                         record.transaction_id, record.store_host))
    consumes: list[ConsumeTrace] = []
    for after, tm in afters:
        pair = befores.pop(after.request_id, None)
        if pair is None:
            consumes.append(ConsumeTrace("", tm.born_host, after.timestamp, 0, after.cost_ms,
                                         after.success))
        else:
            before, btm = pair
            consumes.append(ConsumeTrace(before.group, btm.born_host, before.timestamp,
                                         before.retry_times, after.cost_ms, after.success))
    for before, btm in befores.values():
        consumes.append(ConsumeTrace(before.group, btm.born_host, before.timestamp,
                                     before.retry_times, None, None))
    sends.sort(key=lambda s: s.send_ms)
    consumes.sort(key=lambda c: (c.group, c.consume_ms))
    ends.sort(key=lambda e: e.end_ms)
    return MessageTrace(msg_id, sends, consumes, refused, ends)


def consumes_may_lag(trace: MessageTrace, now_ms: int) -> bool:
    """Whether ``trace`` shows a send and no delivery of a message stored (or, when its
    store time is not known, sent; committed, for a transaction) less than
    :data:`RECENT_MS` before ``now_ms``: its consumers' records may be on their way."""
    if trace.consumes or not trace.sends:
        return False
    stored = max([s.store_ms or s.send_ms for s in trace.sends]
                 + [t.end_ms for t in trace.transactions])
    return now_ms - stored < RECENT_MS


async def query_trace(admin: AdminClient, msg_id: str, *, trace_topic: str = DEFAULT_TRACE_TOPIC,
                      max_num: int = 64, begin_ms: int = 0, end_ms: int | None = None
                      ) -> MessageTrace:
    """The trace of ``msg_id`` recorded in ``trace_topic`` between ``begin_ms`` and
    ``end_ms``, with each send's store time read from the message itself where it can be."""
    found = await admin.query_messages_by_key(trace_topic, msg_id, max_num=max_num,
                                              begin_ms=begin_ms, end_ms=end_ms)
    trace = build_trace(msg_id, found)
    sends = []
    for send in trace.sends:
        store_ms = 0
        # retention may have removed it, or its broker be away: the time stays unknown
        with contextlib.suppress(TideMQError, ValueError):
            if send.offset_msg_id:
                store_ms = (await admin.view_message(send.offset_msg_id)).store_timestamp
        sends.append(dataclasses.replace(send, store_ms=store_ms))
    trace = dataclasses.replace(trace, sends=sends)
    return dataclasses.replace(
        trace, consumes_may_lag=consumes_may_lag(trace, int(time.time() * 1000)))
