"""Deleting a topic so that a crash at any step leaves it deleted or whole, never between.

The steps, each on disk before the next begins:

1. the store marks the deletion, pending (:meth:`MessageStore.begin_delete_topic`):
   from here on the topic is deleted for good -- its records are never dispatched again,
   and a start that finds the deletion pending finishes it;
2. the topic table is written without the topic;
3. the topic's consumer offsets are dropped and the offset table written;
4. the store removes the topic's queues and marks the deletion finished.

The topic leaves the table in memory first, so that no send after the mark stores
a message of the old topic; until the deletion is answered a send does not create it
again (TOPIC_NOT_EXIST) nor does an admin request (SYSTEM_ERROR), so that no message is
stored above the mark into queues the deletion then removes or leaves behind; a delayed or
timer message that falls due meanwhile waits for the end too
(:mod:`tidemq.broker.schedule`), a transaction's commit into the topic is refused,
the transaction left open (:mod:`tidemq.broker.half_queue`), and so is a send-back or a
retry send bound for a retry or DLQ topic being deleted
(:func:`~tidemq.broker.processors.retry.ensure_group_topic`); a logical-queue mapping
that changes meanwhile does not register the topic again
(:mod:`tidemq.broker.processors.logical.mappings`). A process
that stops before step 1 is on disk leaves the topic whole; one that stops after it
leaves steps 2-4 to the next start (:func:`finish_pending`), as Kafka marks a topic
deleted first and removes its files after.
"""

from __future__ import annotations

import asyncio
import logging

from tidemq.broker.context import BrokerContext

__all__ = ["delete_topic", "finish_pending"]

log = logging.getLogger(__name__)


async def delete_topic(ctx: BrokerContext, topic: str) -> bool:
    """Delete ``topic`` (whether it was there); the slow steps run on threads."""
    topics = ctx.topics
    old = topics.get(topic)
    if old is None:
        return False
    topics.deleting.add(topic)
    try:
        with topics.file.deferred():  # written in step 2
            topics.delete(topic)
        try:
            await asyncio.to_thread(_begin, ctx, topic)
        except BaseException:
            with topics.file.deferred():  # nothing is removed: the topic stays as it is
                topics.upsert(old)
            raise
        await asyncio.to_thread(topics.file.write_pending)
        ctx.offsets.delete_topic(topic)
        await asyncio.to_thread(ctx.offsets.persist)
        ctx.pulled.forget(topic=topic)
        await asyncio.to_thread(ctx.store.delete_topic, topic)
        ctx.stats.forget_topic(topic)
    finally:
        topics.deleting.discard(topic)
        ctx.schedule.deletion_ended()
    return True


def _begin(ctx: BrokerContext, topic: str) -> None:
    """Step 1, once no delayed or timer message is being stored into ``topic``: one
    stored from here waits for the deletion's end, one stored before lies below the mark
    and is deleted with the topic, as a message sent before the deletion."""
    ctx.schedule.settle()
    ctx.store.begin_delete_topic(topic)


def finish_pending(ctx: BrokerContext) -> list[str]:
    """At start, with the store started and the tables loaded: finish every deletion a
    stop cut off after its first step. Returns the topics."""
    pending = ctx.store.pending_topic_deletions()
    if not pending:
        return pending
    # a master's marks a replica took: its table is the copy taken with them, written
    # before them, where the topic may be, created again on the master
    adopted = set(ctx.store.adopted_topic_deletions())
    with ctx.topics.file.deferred():  # steps 2-4 for all of them, each file written once
        for topic in pending:
            if topic not in adopted:
                ctx.topics.delete(topic)
    ctx.topics.file.write_pending()
    for topic in pending:
        ctx.offsets.delete_topic(topic)
    ctx.offsets.persist()
    ctx.store.delete_topics(pending, requeue=True)  # a replica's marks: see there
    for topic in pending:
        log.warning("topic %s: its deletion was cut off by the last stop; finished now",
                    topic)
    return pending
