"""ProcessQueue: what a push consumer keeps for one queue it owns (Java ``ProcessQueue``).

Bookkeeping only -- no awaits, no I/O; the consumer's tasks wait on its events.

* ``state`` follows the table of :mod:`tidemq.client.rebalance` (:meth:`fire`).
* The *buffer*: pulled messages not processed yet, by queue offset, oldest first -- those
  waiting for the listener and those in flight. :meth:`put` adds a pull's messages (in bulk when
  none is buffered already, the usual case), :meth:`done` removes processed (or
  sent-back) ones.
* :attr:`commit_offset`: the lowest offset not processed yet -- the oldest buffered
  message, or the fetch offset when the buffer is empty. This is what the consumer
  commits; everything below it was processed.
* Flow control: :meth:`over_limit` says whether the buffer holds more than ``limits``
  allow (messages, body bytes, or -- concurrent consumers -- an offset span), and
  :attr:`space` is set while it does not.
* ``inflight`` counts messages handed to the listener; :attr:`drained` is set while it
  is zero. A queue is released only once drained.
* ``generation`` grows on every :meth:`reset` (offset reset, offset moved): a result
  or a pull of an older generation is stale and ignored.
* Orderly consumers: ``locked_at`` is when the broker last confirmed our lock
  (monotonic seconds); :meth:`lock_fresh` tells whether that is recent enough to
  consume.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from tidemq.client.rebalance import QueueEvent, QueueState, initial_state, next_state
from tidemq.types import MessageExt, MessageQueue

__all__ = ["DEFAULT_LIMITS", "Limits", "ProcessQueue"]


class Limits(NamedTuple):
    """Flow-control thresholds of one queue's buffer (Java ``pullThresholdForQueue``,
    ``pullThresholdSizeForQueue``, ``consumeConcurrentlyMaxSpan``); ``span`` 0 = none."""

    messages: int = 1000
    bytes: int = 100 * 1024 * 1024
    span: int = 2000


#: Java's defaults.
DEFAULT_LIMITS = Limits()



@dataclasses.dataclass(eq=False)
class ProcessQueue:
    """See the module docstring."""

    mq: MessageQueue
    orderly: bool = False
    limits: Limits = DEFAULT_LIMITS
    #: The queue may have been another member's a moment ago (wait before starting).
    handover: bool = False
    #: An earlier ProcessQueue of the same queue still releasing; this one starts after.
    previous: ProcessQueue | None = None

    def __post_init__(self) -> None:
        self.state = initial_state(self.orderly)
        self.generation = 0
        self.fetch_offset: int | None = None
        self.committed: int | None = None
        self.inflight = 0
        self.body_bytes = 0
        self.locked_at: float | None = None
        self._buffer: dict[int, MessageExt] = {}
        self.space = asyncio.Event()
        self.space.set()
        self.drained = asyncio.Event()
        self.drained.set()
        self.revoked = asyncio.Event()
        self.released = asyncio.Event()
        #: Set on anything an orderly consume loop waits for: messages, a lock, revocation.
        self.wakeup = asyncio.Event()

    def __repr__(self) -> str:
        return (f"<ProcessQueue {self.mq.topic}@{self.mq.broker_name}:{self.mq.queue_id} "
                f"{self.state.value} buffered={len(self._buffer)} inflight={self.inflight}>")

    # ------------------------------------------------------------------ state

    def fire(self, event: QueueEvent) -> bool:
        """Apply ``event`` through the table; ``False`` when it changes nothing."""
        new = next_state(self.state, event)
        if new is None:
            return False
        self.state = new
        if new is QueueState.RELEASING:
            self.revoked.set()
            self.wakeup.set()
            self.space.set()  # a pull loop waiting for room must see the revocation
        elif new is QueueState.RELEASED:
            self.released.set()
        return True

    @property
    def active(self) -> bool:
        return self.state is QueueState.ACTIVE

    # ------------------------------------------------------------------ buffer

    def put(self, msgs: Iterable[MessageExt]) -> list[MessageExt]:
        """Buffer a pull's messages; returns those that were not buffered already."""
        batch = msgs if isinstance(msgs, list) else list(msgs)
        buffer = self._buffer
        offsets = [m.queue_offset for m in batch]
        before = len(buffer)
        added = batch
        if buffer.keys().isdisjoint(offsets):  # the usual pull: all new, so in bulk
            buffer.update(zip(offsets, batch, strict=True))
            if len(buffer) - before != len(batch):  # one offset twice: undo, one by one
                for offset in offsets:
                    buffer.pop(offset, None)
                added = []
        else:
            added = []
        if added:
            self.body_bytes += sum([len(m.body) for m in batch])
        else:
            for msg in batch:
                if msg.queue_offset in buffer:
                    continue
                buffer[msg.queue_offset] = msg
                self.body_bytes += len(msg.body)
                added.append(msg)
        if added:
            self.wakeup.set()
        self._update_space()
        return added

    def done(self, msgs: Iterable[MessageExt]) -> None:
        """Forget processed messages; the commit offset moves past them."""
        pop = self._buffer.pop
        freed = 0
        for msg in msgs:
            gone = pop(msg.queue_offset, None)
            if gone is not None:
                freed += len(gone.body)
        self.body_bytes -= freed
        self._update_space()

    def head(self, count: int) -> list[MessageExt]:
        """The ``count`` oldest buffered messages (orderly consumption)."""
        out: list[MessageExt] = []
        for msg in self._buffer.values():
            if len(out) >= count:
                break
            out.append(msg)
        return out

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def has(self, msg: MessageExt) -> bool:
        return self._buffer.get(msg.queue_offset) is msg

    @property
    def commit_offset(self) -> int | None:
        """The lowest offset not processed yet (``None`` before the start is known)."""
        for offset in self._buffer:
            return offset
        return self.fetch_offset

    def over_limit(self) -> bool:
        limits = self.limits
        if len(self._buffer) > limits.messages or self.body_bytes > limits.bytes:
            return True
        if limits.span > 0 and not self.orderly and len(self._buffer) > 1:
            first = next(iter(self._buffer))
            last = next(reversed(self._buffer))
            return last - first > limits.span
        return False

    def _update_space(self) -> None:
        if self.over_limit() and self.state is QueueState.ACTIVE:
            self.space.clear()
        else:
            self.space.set()

    def reset(self, offset: int) -> None:
        """Drop the buffer and continue at ``offset``; results of the dropped messages
        still in flight are ignored (the generation changes)."""
        self.generation += 1
        self._buffer.clear()
        self.body_bytes = 0
        self.fetch_offset = offset
        self.committed = None
        self.space.set()
        self.wakeup.set()

    # ------------------------------------------------------------------ in flight

    def begin(self, msgs: Sequence[MessageExt]) -> None:
        self.inflight += len(msgs)
        self.drained.clear()

    def end(self, msgs: Sequence[MessageExt]) -> None:
        self.inflight -= len(msgs)
        if self.inflight <= 0:
            self.inflight = 0
            self.drained.set()

    # ------------------------------------------------------------------ lock (orderly)

    def lock_fresh(self, now: float, stale_after: float) -> bool:
        """Whether the broker confirmed our lock within ``stale_after`` seconds."""
        return self.locked_at is not None and now - self.locked_at <= stale_after

    def locked(self, now: float) -> None:
        self.locked_at = now
        self.wakeup.set()

    def lock_lost(self) -> None:
        self.locked_at = None
