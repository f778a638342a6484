"""Deleting a topic so that a crash at any step leaves it deleted or whole, never between.

The steps, each on disk before the next begins:

1. the store marks the deletion, pending (:meth:`MessageStore.begin_delete_topic`):
   from here on the topic is deleted for good -- its records are never dispatched again,
   and a start that finds the deletion pending finishes it;
2. the topic table is written without the topic;
3. the topic's consumer offsets are dropped and the offset table written;
4. the store removes the topic's queues and marks the deletion finished.

Before step 1 the store refuses every put into the topic until the deletion is answered
(:meth:`MessageStore.refuse_topic`): one decision at the store's append point, under the
lock every put writes under, so no message is stored above the mark into queues the
deletion then removes or leaves behind, whichever writer stores it and whenever it looked.
Each writer answers the store's :class:`~tidemq.errors.TopicRefused` in its own terms: a
send TOPIC_NOT_EXIST, a transaction's commit SYSTEM_ERROR with the transaction left open
(:mod:`tidemq.broker.half_queue`), a send-back or a retry send SYSTEM_ERROR
(:mod:`tidemq.broker.processors.retry`), and a delayed or timer message that falls due
waits for the end (:mod:`tidemq.broker.schedule`). The topic also leaves the table in
memory at once, and until the deletion is answered neither a send (TOPIC_NOT_EXIST) nor an
admin request (SYSTEM_ERROR) nor a logical-queue mapping change
(:mod:`tidemq.broker.processors.logical.mappings`) puts it back
(:attr:`TopicManager.deleting <tidemq.broker.topics.TopicManager.deleting>`, the store's
refusals). A process that stops before step 1 is on disk leaves the topic whole; one
that stops after it leaves steps 2-4 to the next start (:func:`finish_pending`), as Kafka
marks a topic deleted first and removes its files after.
"""

from __future__ import annotations

import asyncio
import logging

from tidemq.broker.context import BrokerContext

__all__ = ["delete_topic", "finish_pending"]

log = logging.getLogger(__name__)

#: Why the store refuses a topic's puts during its deletion (``TopicRefused.why``).
_UNDER_WAY = "its deletion is under way"


async def delete_topic(ctx: BrokerContext, topic: str) -> bool:
    """Delete ``topic`` (whether it was there); the slow steps run on threads."""
    topics = ctx.topics
    old = topics.get(topic)
    if old is None:
        return False
    ctx.store.refuse_topic(topic, _UNDER_WAY)
    try:
        with topics.file.deferred():  # written in step 2
            topics.delete(topic)
        try:
            # every message of the topic is below the mark: the store refuses its puts
            await asyncio.to_thread(ctx.store.begin_delete_topic, topic)
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
        ctx.store.admit_topic(topic)
        ctx.schedule.deletion_ended()
    return True


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
