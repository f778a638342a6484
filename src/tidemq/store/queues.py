"""The set of consume queues of a store: lookup, lazy creation, load, flush, retention."""

from __future__ import annotations

import threading

from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.layout import StoreLayout

__all__ = ["ConsumeQueueSet"]


class ConsumeQueueSet:
    def __init__(self, layout: StoreLayout, file_size: int) -> None:
        self.layout = layout
        self.file_size = file_size
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        for topic, queue_id, _path in self.layout.queues():
            cq = ConsumeQueue(self.layout, topic, queue_id, self.file_size)
            cq.load()
            self._queues[(topic, queue_id)] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            with self._lock:
                cq = self._queues.get((topic, queue_id))
                if cq is None:
                    cq = ConsumeQueue(self.layout, topic, queue_id, self.file_size)
                    self._queues[(topic, queue_id)] = cq
        return cq

    def all(self) -> list[ConsumeQueue]:
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
