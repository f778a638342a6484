"""Held batch-protocol pulls: a merged pull parked while every child queue is empty.

A BATCH_REQUEST of pulls whose children all found nothing (and that allows suspension) is
parked once, under every ``(topic, queue id)`` one of its children reads, with the offset
that child waits beyond and one deadline for the parent. The first of those queues whose
max offset passes its child's offset wakes the whole parent: it is taken out of every
queue's list and handed to the ``answer`` callback, which re-runs every child without
suspension and sends the merged response. The deadline answers it the same way.

Wakes come from the store's dispatch hook (on the dispatcher thread: an O(1) check
whether anyone waits on that queue, and only then ``call_soon_threadsafe``) or from
:meth:`BatchHoldService.notify` on the loop. Deciding who is woken is synchronous; the
callback runs after. No polling loop: deadlines are timer handles.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence

from tidemq.codec.command import RemotingCommand
from tidemq.net import Connection

__all__ = ["BatchHoldService", "HeldBatch"]

Key = tuple[str, int]


@dataclasses.dataclass(eq=False, slots=True)
class HeldBatch:
    """One parked parent: its connection and request, the ``(queue, offset)`` pairs it
    waits on, and whatever the answer callback needs (``payload``)."""

    conn: Connection
    cmd: RemotingCommand
    waits: tuple[tuple[Key, int], ...]
    payload: object
    timer: asyncio.TimerHandle | None = None


class BatchHoldService:
    """Parked merged pulls by queue; ``answer(held)`` produces and sends their response."""

    def __init__(self, answer: Callable[[HeldBatch], None]) -> None:
        self._answer = answer
        self._by_queue: dict[Key, list[tuple[HeldBatch, int]]] = {}
        self._parents: set[HeldBatch] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.woken = 0
        self.expired = 0
        #: Called on the loop for every hold (the broker's ``DispatchLinger.held``).
        self.on_hold: Callable[[], None] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def held_count(self) -> int:
        """Parents parked now."""
        return len(self._parents)

    def hold(self, conn: Connection, cmd: RemotingCommand,
             waits: Sequence[tuple[Key, int]], timeout_ms: int, payload: object) -> HeldBatch:
        """Park a parent until one of ``waits``' queues passes its offset or ``timeout_ms``
        elapses."""
        loop = self._loop or asyncio.get_running_loop()
        held = HeldBatch(conn, cmd, tuple(waits), payload)
        held.timer = loop.call_later(max(timeout_ms, 0) / 1000, self._expire, held)
        self._parents.add(held)
        for key, offset in held.waits:
            self._by_queue.setdefault(key, []).append((held, offset))
        if self.on_hold is not None:
            self.on_hold()
        return held

    # ------------------------------------------------------------------ store hook

    def on_dispatched(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called from the dispatcher thread; cheap when nobody waits on the queue."""
        if (topic, queue_id) in self._by_queue and self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, (topic, queue_id), max_offset)

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Same as the hook, from the event loop itself."""
        self._wake((topic, queue_id), max_offset)

    # ------------------------------------------------------------------ on the loop

    def _wake(self, key: Key, max_offset: int) -> None:
        waiting = self._by_queue.get(key)
        if not waiting:
            return
        ready = list(dict.fromkeys(h for h, offset in waiting if offset < max_offset))
        for held in ready:
            if self._release(held):
                self.woken += 1
                self._answer(held)

    def _expire(self, held: HeldBatch) -> None:
        if self._release(held):
            self.expired += 1
            self._answer(held)

    def _release(self, held: HeldBatch) -> bool:
        """Take ``held`` out of every queue's list; ``False`` if it was not parked."""
        if held not in self._parents:
            return False
        self._parents.discard(held)
        if held.timer is not None:
            held.timer.cancel()
        for key in {key for key, _ in held.waits}:
            rest = [e for e in self._by_queue.get(key, ()) if e[0] is not held]
            if rest:
                self._by_queue[key] = rest
            else:
                self._by_queue.pop(key, None)
        return True

    def drop_connection(self, conn: Connection) -> None:
        """Forget the parents of a closed connection (nobody is left to answer)."""
        for held in [h for h in self._parents if h.conn is conn]:
            self._release(held)

    def release_all(self) -> None:
        """Answer every parked parent now (shutdown)."""
        for held in list(self._parents):
            if self._release(held):
                self._answer(held)
