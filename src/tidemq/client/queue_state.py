"""A pull consumer's per-queue state (:class:`QueueState`): its fetch offset, the
messages pulled and not yet returned (as objects or as columns), the pull in flight and
the one that follows it; and what a finished pull brings back (:class:`Fetched`).

:class:`~tidemq.client.consumer.PullConsumer` keeps one per assigned queue and decides
what to pull from them; this module only holds and hands out what was pulled.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from tidemq.client.message_batch import MessageBatch
from tidemq.client.pull import PullBatch, PullResult
from tidemq.types import MessageExt, MessageQueue

__all__ = ["Fetched", "QueueState", "discard"]


@dataclasses.dataclass(frozen=True, slots=True)
class Fetched:
    """What one task brings back: a queue's start offset and whether it is the group's
    committed one (``result`` is ``None``), or where a pull started and its result."""

    offset: int
    from_group: bool
    result: PullResult | PullBatch | None


@dataclasses.dataclass(slots=True)
class QueueState:
    """One queue: the pulled messages not returned yet are ``buffer[head:]`` (taken by
    slices, not one by one) or, read as columns, ``batches`` -- one of the two is empty,
    and no batch is."""

    fetch_offset: int | None = None
    buffer: list[MessageExt] = dataclasses.field(default_factory=list)
    head: int = 0
    batches: list[MessageBatch] = dataclasses.field(default_factory=list)
    #: The pull in flight: its own task, or its place in a round (:meth:`PullConsumer._round`).
    task: asyncio.Future[Fetched] | None = None
    #: The pull that follows ``task``, started when its answer came (before decoding it),
    #: and the offset it reads from; it becomes ``task`` once ``task`` is applied.
    next: asyncio.Future[Fetched] | None = None
    next_offset: int = -1
    backoff: float = 0.0
    committed: int | None = None
    #: Grows on every :meth:`reset` (a seek, an offset reset): a commit answered after
    #: one no longer says what is committed.
    generation: int = 0
    #: The last pull brought less than a full batch: the queue is caught up, so the
    #: broker will likely hold its next pull, which then goes as a request of its own.
    caught_up: bool = False

    @property
    def buffered(self) -> int:
        if self.batches:
            return sum(len(b) for b in self.batches)
        return len(self.buffer) - self.head

    @property
    def position(self) -> int | None:
        if self.head < len(self.buffer):
            return self.buffer[self.head].queue_offset
        if self.batches:
            return self.batches[0].first_offset
        return self.fetch_offset

    def take(self, limit: int) -> list[MessageExt]:
        """Up to ``limit`` buffered messages, oldest first."""
        if self.batches:
            self._unbatch()
        head = self.head
        if head == 0 and limit >= len(self.buffer):
            out, self.buffer = self.buffer, []
            return out
        out = self.buffer[head:head + limit]
        self.head = head + len(out)
        if self.head >= len(self.buffer):
            self.buffer, self.head = [], 0
        return out

    def take_batches(self, queue: MessageQueue, limit: int) -> list[MessageBatch]:
        """Buffered batches of up to ``limit`` messages in all, oldest first (the last one
        cut when it would go over)."""
        self._batch_buffer(queue)
        out: list[MessageBatch] = []
        batches = self.batches
        while batches and limit > 0:
            first = batches[0]
            if len(first) <= limit:
                out.append(batches.pop(0))
                limit -= len(first)
            else:
                out.append(first[:limit])
                batches[0] = first[limit:]
                limit = 0
        return out

    def _unbatch(self) -> None:
        """Turn the buffered batches into buffered messages."""
        msgs = [m for b in self.batches for m in b.messages()]
        self.batches = []
        self.add(msgs)

    def _batch_buffer(self, queue: MessageQueue) -> None:
        """Turn the buffered messages, if any, into one buffered batch."""
        if self.head < len(self.buffer):
            self.batches = [MessageBatch.of_messages(queue, self.buffer[self.head:])]
            self.buffer, self.head = [], 0

    def add_batch(self, batch: MessageBatch) -> None:
        self._batch_buffer(batch.queue)
        self.batches.append(batch)

    def add(self, msgs: list[MessageExt]) -> None:
        if self.batches:
            self._unbatch()
        if self.head:
            del self.buffer[:self.head]
            self.head = 0
        if self.buffer:
            self.buffer.extend(msgs)
        else:
            self.buffer = msgs

    def reset(self, offset: int | None) -> None:
        """Forget buffered messages and the pull in flight; continue at ``offset``."""
        self.generation += 1
        self.buffer, self.head = [], 0
        self.batches = []
        self.backoff = 0.0
        self.caught_up = False
        self.fetch_offset = offset
        if self.task is not None:
            discard(self.task)
            self.task = None
        self.drop_next()

    def drop_next(self) -> None:
        if self.next is not None:
            discard(self.next)
            self.next = None


def discard(task: asyncio.Future[Any]) -> None:
    """Drop a pull: cancel it if it runs, mark its failure seen if it failed."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()
