"""Dead-letter queues (``%DLQ%<group>``), as RocketMQ Dashboard's "DLQ message" page
handles them: every DLQ with its message count, one DLQ's messages newest first, and
each message resent to a consumer of the group it came from.

A DLQ is found on the brokers that hold it, not only in the name servers' topic list:
a broker creates it at the first message a group gives up on, and the name servers
know it only once that broker's registration carrying it has reached them.

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:func:`dlq_counts`               GET_ALL_TOPIC_LIST_FROM_NAMESERVER and 21
                                 GET_ALL_TOPIC_CONFIG on every master, then 202
                                 GET_TOPIC_STATS_INFO on the masters holding each DLQ
:func:`dlq_stats`                202 on every master (those without the DLQ answer 17)
:func:`dead_letters`             :func:`dlq_stats`, then 11 PULL_MESSAGE backwards from
                                 each queue's end, a pull's worth at a time, merged by
                                 store time
:func:`every_dead_letter`        :func:`dlq_stats`, then 11 PULL_MESSAGE over each queue,
                                 oldest first
:func:`resend`                   :func:`~tidemq.client.group_admin.consume_message_directly`
                                 (33 VIEW_MESSAGE_BY_ID, 309 CONSUME_MESSAGE_DIRECTLY)
===============================  ==========================================================
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING

from tidemq.client import group_admin, message_scan, monitor, request_deadline
from tidemq.client.retry import DLQ_PREFIX
from tidemq.codec.bodies import CMResult, ConsumeMessageDirectlyResult
from tidemq.errors import BrokerResponseError, ResponseCode
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.record import pack_host
from tidemq.types import MessageExt, MessageQueue

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["DeadLetter", "DeadLetterPage", "dead_letters", "dlq_counts", "dlq_stats",
           "every_dead_letter", "failed", "resend"]

#: The property a dead letter keeps its first topic in (set at its first send-back).
RETRY_TOPIC = "RETRY_TOPIC"
#: Messages one backwards read of a queue takes.
_CHUNK = 32
#: DLQs whose counts are asked for at once.
_AT_ONCE = 8


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message of a DLQ: ``msg_id`` is its offset id in the DLQ (what a resend
    names), ``uniq_key`` the id its producer gave it, ``topic`` the topic it was first
    sent to; ``store_timestamp`` is when the DLQ stored it (epoch ms)."""

    msg_id: str
    uniq_key: str | None
    topic: str
    reconsume_times: int
    store_timestamp: int
    broker_name: str
    queue_id: int
    queue_offset: int
    tags: str | None
    keys: tuple[str, ...]
    body: bytes

    @classmethod
    def of(cls, msg: MessageExt, broker_name: str) -> DeadLetter:
        return cls(msg_id=encode_offset_msg_id(pack_host(msg.store_host),
                                               msg.commit_log_offset),
                   uniq_key=msg.uniq_key, topic=msg.properties.get(RETRY_TOPIC, ""),
                   reconsume_times=msg.reconsume_times, store_timestamp=msg.store_timestamp,
                   broker_name=broker_name, queue_id=msg.queue_id,
                   queue_offset=msg.queue_offset, tags=msg.tags, keys=tuple(msg.keys),
                   body=bytes(msg.body))


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """``letters`` of the ``total`` messages the DLQ holds, newest first."""

    total: int
    letters: list[DeadLetter]


async def _held(admin: AdminClient) -> dict[str, list[str]]:
    """DLQ topic -> the addresses of the masters whose topic configs hold it (a master
    the open request deadline names as unanswered is left out)."""
    addrs = sorted((await admin.masters()).values())
    results = await asyncio.gather(*(monitor.topic_configs(admin, a) for a in addrs),
                                   return_exceptions=True)
    answered = request_deadline.answers([r if isinstance(r, BaseException) else (a, r)
                                         for a, r in zip(addrs, results, strict=True)])
    held: dict[str, list[str]] = {}
    for addr, wrapper in answered:
        for topic in wrapper.topic_config_table:
            if topic.startswith(DLQ_PREFIX):
                held.setdefault(topic, []).append(addr)
    return held


async def dlq_counts(admin: AdminClient) -> dict[str, int | None]:
    """Group -> messages its DLQ holds, for every ``%DLQ%<group>`` a master holds or the
    name servers know (None: its count could not be read)."""
    listed, held = await asyncio.gather(admin.topic_list(), _held(admin))
    topics = sorted({t for t in listed if t.startswith(DLQ_PREFIX)} | set(held))
    limit = asyncio.Semaphore(_AT_ONCE)

    async def one(topic: str) -> int:
        async with limit:  # a DLQ no answered master holds: the masters of its route
            return (await monitor.topic_stats(admin, topic, addresses=held.get(topic))
                    ).messages

    counts = await asyncio.gather(*map(one, topics), return_exceptions=True)
    return {t[len(DLQ_PREFIX):]: c if isinstance(c, int) else None
            for t, c in zip(topics, counts, strict=True)}


async def dlq_stats(admin: AdminClient, group: str) -> monitor.TopicStats:
    """The queues of ``group``'s DLQ on every master that holds it, whether the name
    servers know it yet or not (no queues: none holds it)."""
    return await _stats_on(admin, group, await admin.masters())


async def _stats_on(admin: AdminClient, group: str, masters: dict[str, str]
                    ) -> monitor.TopicStats:
    topic = DLQ_PREFIX + group
    results = await asyncio.gather(
        *(monitor.topic_stats(admin, topic, addresses=[a]) for a in masters.values()),
        return_exceptions=True)
    found = request_deadline.answers([r for r in results if not _not_held(r)])
    queues = sorted((q for stats in found for q in stats.queues),
                    key=lambda q: (q.broker_name, q.queue_id))
    return monitor.TopicStats(topic, queues, sum(stats.put_tps for stats in found))


def _not_held(result: object) -> bool:
    return (isinstance(result, BrokerResponseError)
            and result.code == ResponseCode.TOPIC_NOT_EXIST)


@dataclasses.dataclass(frozen=True, slots=True)
class _Queue:
    """One queue of a DLQ, with the master that holds it (pulled from directly: the
    name servers may not route the DLQ yet)."""

    mq: MessageQueue
    address: str
    lo: int
    hi: int


async def _queues(admin: AdminClient, group: str) -> list[_Queue]:
    masters = await admin.masters()
    stats = await _stats_on(admin, group, masters)
    return [_Queue(MessageQueue(stats.topic, q.broker_name, q.queue_id),
                   masters[q.broker_name], q.min_offset, q.max_offset)
            for q in stats.queues]


async def _backwards(admin: AdminClient, queue: _Queue) -> AsyncGenerator[MessageExt, None]:
    """The messages of ``queue`` from its end down to its start, newest first."""
    lo, hi = queue.lo, queue.hi
    while hi > lo:
        start = max(lo, hi - _CHUNK)
        chunk: list[MessageExt] = []
        async for batch in message_scan.scan_queue(admin, queue.mq, start, hi,
                                                   address=queue.address):
            chunk.extend(batch)
        for msg in reversed(chunk):
            yield msg
        hi = start


async def dead_letters(admin: AdminClient, group: str, *, skip: int = 0, limit: int = 20
                       ) -> DeadLetterPage:
    """``limit`` messages of ``group``'s DLQ after the ``skip`` newest, newest first
    (by store time over its queues); only the messages up to the page are read."""
    queues = await _queues(admin, group)
    total = sum(q.hi - q.lo for q in queues)
    streams = [_backwards(admin, q) for q in queues]
    heads: list[tuple[int, int, MessageExt]] = []
    for i, stream in enumerate(streams):
        first = await anext(stream, None)
        if first is not None:
            heads.append((-first.store_timestamp, i, first))
    heapq.heapify(heads)
    out: list[DeadLetter] = []
    seen = 0
    while heads and len(out) < limit:
        _when, i, msg = heapq.heappop(heads)
        if seen >= skip:
            out.append(DeadLetter.of(msg, queues[i].mq.broker_name))
        seen += 1
        following = await anext(streams[i], None)
        if following is not None:
            heapq.heappush(heads, (-following.store_timestamp, i, following))
    for stream in streams:
        await stream.aclose()
    return DeadLetterPage(total, out)


async def every_dead_letter(admin: AdminClient, group: str) -> AsyncIterator[DeadLetter]:
    """Every message of ``group``'s DLQ, queue by queue, oldest first."""
    for q in await _queues(admin, group):
        async for batch in message_scan.scan_queue(admin, q.mq, q.lo, q.hi,
                                                   address=q.address):
            for msg in batch:
                yield DeadLetter.of(msg, q.mq.broker_name)


async def resend(admin: AdminClient, group: str, client_id: str, msg_id: str
                 ) -> ConsumeMessageDirectlyResult:
    """Have consumer ``client_id`` of ``group`` consume the dead letter ``msg_id`` (its
    offset id in the DLQ) now; what its listener answered. Nothing is committed: the
    message stays in the DLQ."""
    return await group_admin.consume_message_directly(admin, group, client_id,
                                                      DLQ_PREFIX + group, msg_id)


def failed(result: ConsumeMessageDirectlyResult) -> str | None:
    """Why a resend's answer is a failure (the listener did not answer CR_SUCCESS), or
    None."""
    if result.consume_result == CMResult.CR_SUCCESS:
        return None
    said = result.consume_result or "no answer"
    return f"{said} ({result.remark})" if result.remark else said

