"""The set of consume queues of a store: lookup, lazy creation, load, flush, retention.

A topic's queues are all of one type: classic 20-byte ConsumeQueues (SimpleCQ) or
46-byte BatchConsumeQueues (RIP-26, ``queue.type=BatchCQ``). The type of a new queue
comes from :attr:`ConsumeQueueSet.batch_topics`, which the broker fills from topic
attributes; queues found on disk keep the type of their directory. The record of deleted
topics (:mod:`tidemq.store.deleted_topics`) says which records no queue takes again.
"""

from __future__ import annotations

import threading

from tidemq.store.batch_consume_queue import BatchConsumeQueue
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.deleted_topics import FILE_NAME, DeletedTopics
from tidemq.store.layout import StoreLayout
from tidemq.store.lmq_store import LmqStore

__all__ = ["AnyQueue", "ConsumeQueueSet"]

AnyQueue = ConsumeQueue | BatchConsumeQueue


class ConsumeQueueSet:
    def __init__(self, layout: StoreLayout, file_size: int, batch_file_size: int = 13_800_000
                 ) -> None:
        self.layout = layout
        self.file_size = file_size
        self.batch_file_size = batch_file_size
        self.batch_topics: set[str] = set()
        #: The RocksDB store of light message queues (RIP-28), when LMQ is enabled.
        self.lmq: LmqStore | None = None
        self.deleted = DeletedTopics(layout.config_file(FILE_NAME))
        self._queues: dict[tuple[str, int], AnyQueue] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        self.deleted.load()
        for topic, queue_id, _path in self.layout.queues():
            cq = ConsumeQueue(self.layout, topic, queue_id, self.file_size)
            cq.load()
            self._queues[(topic, queue_id)] = cq
        for topic, queue_id, _path in self.layout.queues(batch=True):
            bcq = BatchConsumeQueue(self.layout, topic, queue_id, self.batch_file_size)
            bcq.load()
            self._queues[(topic, queue_id)] = bcq
            self.batch_topics.add(topic)

    def get(self, topic: str, queue_id: int) -> AnyQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> AnyQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            with self._lock:
                cq = self._queues.get((topic, queue_id))
                if cq is None:
                    if topic in self.batch_topics:
                        cq = BatchConsumeQueue(self.layout, topic, queue_id,
                                               self.batch_file_size)
                    else:
                        cq = ConsumeQueue(self.layout, topic, queue_id, self.file_size)
                    self._queues[(topic, queue_id)] = cq
        return cq

    def all(self) -> list[AnyQueue]:
        return list(self._queues.values())

    def queue_keys(self) -> list[tuple[str, int]]:
        return list(self._queues)

    def remove(self, topic: str, queue_id: int) -> None:
        cq = self._queues.pop((topic, queue_id), None)
        if cq is not None:
            cq.destroy()

    def max_phys_end(self) -> int:
        return max((cq.max_phys_end for cq in self._queues.values()), default=0)

    def flush(self) -> None:
        for cq in self.all():
            cq.flush()

    def close(self) -> None:
        for cq in self.all():
            cq.close()
        if self.lmq is not None:
            self.lmq.close()
            self.lmq = None
