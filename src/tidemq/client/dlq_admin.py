"""Dead-letter queues (``%DLQ%<group>``), as RocketMQ Dashboard's "DLQ message" page
handles them: every DLQ with its message count, one DLQ's messages newest first, and
each message resent to a consumer of the group it came from.

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:func:`dlq_counts`               GET_ALL_TOPIC_LIST_FROM_NAMESERVER, then 202
                                 GET_TOPIC_STATS_INFO on the masters of each DLQ
:func:`dead_letters`             202 on the DLQ's masters, then 11 PULL_MESSAGE backwards
                                 from each queue's end, a pull's worth at a time, merged
                                 by store time
:func:`every_dead_letter`        11 PULL_MESSAGE over each queue, oldest first
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

from tidemq.client import group_admin, message_scan, monitor
from tidemq.client.retry import DLQ_PREFIX
from tidemq.codec.bodies import CMResult, ConsumeMessageDirectlyResult
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.record import pack_host
from tidemq.types import MessageExt, MessageQueue

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["DeadLetter", "DeadLetterPage", "dead_letters", "dlq_counts",
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


async def dlq_counts(admin: AdminClient) -> dict[str, int | None]:
    """Group -> messages its DLQ holds, for every ``%DLQ%<group>`` the name servers know
    (None: its count could not be read)."""
    topics = [t for t in await admin.topic_list() if t.startswith(DLQ_PREFIX)]
    limit = asyncio.Semaphore(_AT_ONCE)

    async def one(topic: str) -> int:
        async with limit:
            return (await monitor.topic_stats(admin, topic)).messages

    counts = await asyncio.gather(*map(one, topics), return_exceptions=True)
    return {t[len(DLQ_PREFIX):]: c if isinstance(c, int) else None
            for t, c in zip(topics, counts, strict=True)}


async def _queues(admin: AdminClient, group: str
                  ) -> list[tuple[MessageQueue, int, int]]:
    """(queue, min offset, max offset) of every queue of ``group``'s DLQ."""
    stats = await monitor.topic_stats(admin, DLQ_PREFIX + group)
    return [(MessageQueue(stats.topic, q.broker_name, q.queue_id), q.min_offset,
             q.max_offset) for q in stats.queues]


async def _backwards(admin: AdminClient, mq: MessageQueue, lo: int, hi: int
                     ) -> AsyncGenerator[MessageExt, None]:
    """The messages of ``mq`` from ``hi`` down to ``lo``, newest first."""
    while hi > lo:
        start = max(lo, hi - _CHUNK)
        chunk: list[MessageExt] = []
        async for batch in message_scan.scan_queue(admin, mq, start, hi):
            chunk.extend(batch)
        for msg in reversed(chunk):
            yield msg
        hi = start


async def dead_letters(admin: AdminClient, group: str, *, skip: int = 0, limit: int = 20
                       ) -> DeadLetterPage:
    """``limit`` messages of ``group``'s DLQ after the ``skip`` newest, newest first
    (by store time over its queues); only the messages up to the page are read."""
    queues = await _queues(admin, group)
    total = sum(hi - lo for _mq, lo, hi in queues)
    streams = [_backwards(admin, mq, lo, hi) for mq, lo, hi in queues]
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
            out.append(DeadLetter.of(msg, queues[i][0].broker_name))
        seen += 1
        following = await anext(streams[i], None)
        if following is not None:
            heapq.heappush(heads, (-following.store_timestamp, i, following))
    for stream in streams:
        await stream.aclose()
    return DeadLetterPage(total, out)


async def every_dead_letter(admin: AdminClient, group: str) -> AsyncIterator[DeadLetter]:
    """Every message of ``group``'s DLQ, queue by queue, oldest first."""
    for mq, lo, hi in await _queues(admin, group):
        async for batch in message_scan.scan_queue(admin, mq, lo, hi):
            for msg in batch:
                yield DeadLetter.of(msg, mq.broker_name)


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

