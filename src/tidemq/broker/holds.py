"""Held pulls (long polling): one table for single pulls and batch-protocol parents.

A request that finds nothing new and allows suspension is parked under every ``(topic,
queue id)`` it reads, each with the offset it waits beyond, and with one deadline: a single
pull waits on one queue, a merged batch parent on the queues of all its children. The first
of its queues whose max offset passes its offset wakes it: it is taken out of every queue's
list and handed to its ``answer`` callback, which evaluates it again without suspension and
sends the response. The deadline answers it the same way.

Wakes come from the store's dispatch round hook (the queues the round moved that anyone
waits on, one C-level intersection, and only for those ``call_soon_threadsafe`` on the
dispatcher thread, ``call_soon`` for a round applied on the loop by the append that
filled it) or from
:meth:`HoldTable.notify` on the loop. Deciding who is woken is synchronous; the callbacks
run after. No polling loop: deadlines are timer handles.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Collection, Mapping, Sequence

from tidemq.codec.command import RemotingCommand
from tidemq.net import Connection

__all__ = ["Held", "HoldTable"]

Key = tuple[str, int]


@dataclasses.dataclass(eq=False, slots=True)
class Held:
    """One parked request: its connection and request, the ``(queue, offset)`` pairs it
    waits on, the callback that answers it and whatever that callback needs."""

    conn: Connection
    cmd: RemotingCommand
    waits: tuple[tuple[Key, int], ...]
    answer: Callable[[Held], None]
    payload: object = None
    timer: asyncio.TimerHandle | None = None


class HoldTable:
    """Parked requests by queue; see the module docstring."""

    def __init__(self) -> None:
        self._by_queue: dict[Key, list[tuple[Held, int]]] = {}
        self._held: set[Held] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0  # the loop's thread (threading.get_ident)
        self.woken = 0
        self.expired = 0
        #: Called on the loop for every hold (the broker's ``DispatchLinger.held``).
        self.on_hold: Callable[[], None] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Answer on ``loop``; called on its thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    @property
    def held_count(self) -> int:
        """Requests parked now."""
        return len(self._held)

    def hold(self, conn: Connection, cmd: RemotingCommand,
             waits: Sequence[tuple[Key, int]], timeout_ms: int,
             answer: Callable[[Held], None], payload: object = None) -> Held:
        """Park ``cmd`` until one of its queues passes its offset or ``timeout_ms``
        elapses; then ``answer(held)`` is called once, on the loop."""
        loop = self._loop or asyncio.get_running_loop()
        held = Held(conn, cmd, tuple(waits), answer, payload)
        held.timer = loop.call_later(max(timeout_ms, 0) / 1000, self._expire, held)
        self._held.add(held)
        for key, offset in held.waits:
            self._by_queue.setdefault(key, []).append((held, offset))
        if self.on_hold is not None:
            self.on_hold()
        return held

    # ------------------------------------------------------------------ store hook

    def on_round(self, touched: Mapping[Key, int]) -> None:
        """The store's dispatch round hook (dispatcher thread, or the loop's when a send
        applied the round): wake the pulls waiting on the queues the round moved
        (``touched``: queue -> its new max offset). Those queues are found with one
        C-level intersection, atomic under the GIL (the loop's changes to the table
        cannot interleave), not a call per queue moved. On the loop the wake-ups run
        after the current callback, without the loop's self-pipe."""
        loop = self._loop
        if not self._by_queue or loop is None:
            return
        keys = touched.keys() & self._by_queue.keys()
        if not keys:
            return
        call = (loop.call_soon if threading.get_ident() == self._loop_thread
                else loop.call_soon_threadsafe)
        for key in keys:
            call(self._wake, key, touched[key])

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Same as the hook, from the event loop itself."""
        self._wake((topic, queue_id), max_offset)

    # ------------------------------------------------------------------ on the loop

    def _wake(self, key: Key, max_offset: int) -> None:
        waiting = self._by_queue.get(key)
        if not waiting:
            return
        if len(waiting) == 1:  # the usual: one pull waits on the queue
            held, offset = waiting[0]
            if offset >= max_offset:
                return
            self._take((held,))
            self.woken += 1
            held.answer(held)
            return
        ready = list(dict.fromkeys(h for h, offset in waiting if offset < max_offset))
        if not ready:
            return
        self._take(ready)
        for held in ready:
            self.woken += 1
            held.answer(held)

    def _expire(self, held: Held) -> None:
        if held in self._held:
            self._take((held,))
            self.expired += 1
            held.answer(held)

    def _take(self, helds: Collection[Held]) -> None:
        """Take parked requests out of every queue's list and cancel their deadlines."""
        if len(helds) == 1:
            (held,) = helds
            if len(held.waits) == 1:  # a single pull: one queue's list to cut
                self._take_one(held, held.waits[0][0])
                return
        gone = set(helds)
        self._held -= gone
        keys: set[Key] = set()
        for held in gone:
            if held.timer is not None:
                held.timer.cancel()
            keys.update(key for key, _ in held.waits)
        for key in keys:
            rest = [e for e in self._by_queue.get(key, ()) if e[0] not in gone]
            if rest:
                self._by_queue[key] = rest
            else:
                self._by_queue.pop(key, None)

    def _take_one(self, held: Held, key: Key) -> None:
        """:meth:`_take` of one request parked on ``key`` alone."""
        self._held.discard(held)
        if held.timer is not None:
            held.timer.cancel()
        entries = self._by_queue.get(key)
        if entries is None:
            return
        if len(entries) == 1 and entries[0][0] is held:
            del self._by_queue[key]
            return
        rest = [e for e in entries if e[0] is not held]
        if rest:
            self._by_queue[key] = rest
        else:
            del self._by_queue[key]

    def drop_connection(self, conn: Connection) -> None:
        """Forget the requests of a closed connection (nobody is left to answer)."""
        self._take([h for h in self._held if h.conn is conn])

    def release_all(self) -> None:
        """Answer every parked request now (shutdown)."""
        held = list(self._held)
        self._take(held)
        for h in held:
            h.answer(h)
