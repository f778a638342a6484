"""Whether a queue is young, which is when QUERY_CONSUMER_OFFSET answers a group without
an offset 0 rather than 22 QUERY_NOT_FOUND (remoting.md §2.9).

RocketMQ's rule: the queue's min offset is 0 and its message 0 is still in memory, that
is no further behind the end of the commit log than ``accessMessageInMemoryMaxRatio`` %
of the machine's memory (the rule by which its pulls tell memory from disk). A queue
whose first messages were deleted, an empty one, and an old one whose message 0 lies
further back are not young. An LMQ holding message 0 counts as young (its entries'
commit-log positions are not looked up).
"""

from __future__ import annotations

from tidemq.broker.context import BrokerContext
from tidemq.broker.replication.read_advice import physical_memory
from tidemq.store.lmq_store import LMQ_PREFIX

__all__ = ["YoungQueues"]


class YoungQueues:
    def __init__(self, ctx: BrokerContext, memory: int | None = None) -> None:
        self.store = ctx.store
        total = physical_memory() if memory is None else memory
        self.in_memory = total * ctx.config.access_message_in_memory_max_ratio // 100

    def __call__(self, topic: str, queue_id: int) -> bool:
        store = self.store
        if store.min_offset(topic, queue_id) != 0 or store.max_offset(topic, queue_id) <= 0:
            return False
        if topic.startswith(LMQ_PREFIX):
            return True
        phys = store.physical_offset(topic, queue_id, 0)
        return phys is not None and store.commitlog.max_offset - phys <= self.in_memory
