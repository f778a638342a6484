"""Topics whose messages a broker's store holds but whose configs its topic table lacks.

A send that creates its topic (``autoCreateTopicEnable``) is acknowledged once the
in-sync replicas hold its message, but the topic's config reaches a replica only with
its next copy of the master's metadata (``slaveMetadataSyncInterval``). A replica made
master in between would hold the topic's messages in its consume queues without a
config: pulls answered TOPIC_NOT_EXIST, routes left the topic out, and acknowledged
messages stayed hidden until a producer sent to the topic again.

So a broker that becomes master adopts each such topic (:func:`adoptable`): read and
write permission, as many queues as the store holds and at least the broker's
``defaultTopicQueueNums`` (the queue count the send chose is not on record here) -- but
for the topics the broker creates with one queue (``%RETRY%``, ``%DLQ%``, the system's
``RMQ_SYS_``/``rmq_sys_`` topics), which keep as many as they hold -- and the BatchCQ
queue type when its queues are batch consume queues. Light message queues live in the
LMQ store, not in consume queues, and need no config.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from tidemq.broker.topics import DLQ_PREFIX, PERM_READ, PERM_WRITE, QUEUE_TYPE, RETRY_PREFIX
from tidemq.codec.bodies import TopicConfig

__all__ = ["adoptable"]

#: Topics given as many queues as the store holds of them: the broker creates them with
#: one queue.
_AS_HELD = (RETRY_PREFIX, DLQ_PREFIX, "RMQ_SYS_", "rmq_sys_")


def adoptable(table: Collection[str], stored: Mapping[str, list[int]], *,
              is_batch: Callable[[str], bool], default_queue_nums: int) -> list[TopicConfig]:
    """The configs to create for the topics of ``stored`` (topic -> its queue ids in the
    store) that ``table`` (the topic table's names) lacks, in name order."""
    out = []
    for topic in sorted(stored.keys() - set(table)):
        queues = max(stored[topic], default=0) + 1
        if not topic.startswith(_AS_HELD):
            queues = max(queues, default_queue_nums)
        attributes = {QUEUE_TYPE: "BatchCQ"} if is_batch(topic) else {}
        out.append(TopicConfig(topic_name=topic, read_queue_nums=queues,
                               write_queue_nums=queues, perm=PERM_READ | PERM_WRITE,
                               attributes=attributes))
    return out
