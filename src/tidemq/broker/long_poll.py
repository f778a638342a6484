"""Held pull requests (long polling), woken by the store's dispatch hook.

A pull that finds nothing new and allows suspension is parked per (topic, queue id) with
its deadline. The store's dispatcher thread reports every queue whose max offset moved;
the hook checks in O(1) whether anyone waits on that queue and only then hops onto the
event loop (``call_soon_threadsafe``). On the loop, :meth:`PullHoldService._wake` decides
synchronously which requests are satisfied, then re-runs each once without suspension and
sends its response. No polling loop: timeouts are timer handles.

:class:`DispatchLinger` turns the store dispatcher's linger (``dispatchLingerMs``) off
while pulls are held: a held pull waits for exactly the round the linger delays.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Protocol

from tidemq.codec.command import RemotingCommand
from tidemq.net import Connection

__all__ = ["DispatchLinger", "HeldPull", "PullHoldService", "SupportsLinger"]

Key = tuple[str, int]


@dataclasses.dataclass(eq=False, slots=True)
class HeldPull:
    conn: Connection
    cmd: RemotingCommand
    key: Key
    offset: int
    timer: asyncio.TimerHandle | None = None
    #: What the processor parsed from ``cmd`` (its header), handed back to ``rerun``.
    parsed: object = None


class PullHoldService:
    """``rerun(conn, cmd, parsed)`` produces the final answer of a held request
    (``parsed``: what :meth:`hold` was given)."""

    def __init__(self, rerun: Callable[[Connection, RemotingCommand, object],
                                       RemotingCommand | None]) -> None:
        self._rerun = rerun
        self._held: dict[Key, list[HeldPull]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.woken = 0
        self.expired = 0
        #: Called on the loop for every hold (:meth:`DispatchLinger.held`).
        self.on_hold: Callable[[], None] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def hold(self, conn: Connection, cmd: RemotingCommand, topic: str, queue_id: int,
             offset: int, timeout_ms: int, parsed: object = None) -> None:
        """Park a request until its queue passes ``offset`` or ``timeout_ms`` elapses;
        ``parsed`` (the request's parsed header, say) goes back to ``rerun`` with it."""
        loop = self._loop or asyncio.get_running_loop()
        key = (topic, queue_id)
        held = HeldPull(conn, cmd, key, offset, parsed=parsed)
        held.timer = loop.call_later(max(timeout_ms, 0) / 1000, self._expire, held)
        self._held.setdefault(key, []).append(held)
        if self.on_hold is not None:
            self.on_hold()

    # ------------------------------------------------------------------ store hook

    def on_dispatched(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called from the dispatcher thread; cheap when nobody waits on the queue."""
        if (topic, queue_id) in self._held and self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, (topic, queue_id), max_offset)

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Same as the hook, from the event loop itself."""
        self._wake((topic, queue_id), max_offset)

    # ------------------------------------------------------------------ on the loop

    def _wake(self, key: Key, max_offset: int) -> None:
        waiting = self._held.get(key)
        if not waiting:
            return
        ready = [h for h in waiting if h.offset < max_offset]
        if not ready:
            return
        rest = [h for h in waiting if h.offset >= max_offset]
        if rest:
            self._held[key] = rest
        else:
            del self._held[key]
        for held in ready:
            self.woken += 1
            self._answer(held)

    def _expire(self, held: HeldPull) -> None:
        waiting = self._held.get(held.key)
        if waiting is None or held not in waiting:
            return
        waiting.remove(held)
        if not waiting:
            del self._held[held.key]
        self.expired += 1
        self._answer(held)

    def _answer(self, held: HeldPull) -> None:
        if held.timer is not None:
            held.timer.cancel()
        if not held.conn.is_open:
            return
        response = self._rerun(held.conn, held.cmd, held.parsed)
        if response is not None:
            held.conn.send_response(response)

    def drop_connection(self, conn: Connection) -> None:
        for key in list(self._held):
            keep = [h for h in self._held[key] if h.conn is not conn]
            for h in self._held[key]:
                if h.conn is conn and h.timer is not None:
                    h.timer.cancel()
            if keep:
                self._held[key] = keep
            else:
                del self._held[key]

    def release_all(self) -> None:
        """Answer every held request now (shutdown)."""
        for key in list(self._held):
            for held in self._held.pop(key, []):
                self._answer(held)


class SupportsLinger(Protocol):
    """The store dispatcher's knob: seconds it waits before taking a small round."""

    linger: float


class DispatchLinger:
    """The dispatcher's linger is 0 while consumers long-poll, the configured one otherwise.

    The dispatcher waits ``linger`` before a round of a few puts so that more of them
    share it; a held pull waits for exactly that round, so the linger is latency it adds.
    :meth:`held` (called for every hold, on the loop) switches the linger off; a check
    every ``grace`` seconds switches it back on once no pull was held since the last
    check and ``waiting()`` says none is held now -- a consumer between two of its pulls
    still counts as waiting.
    """

    def __init__(self, dispatcher: SupportsLinger, waiting: Callable[[], bool], *,
                 grace: float = 1.0) -> None:
        self._dispatcher = dispatcher
        self._waiting = waiting
        self._linger = dispatcher.linger
        self._grace = grace
        self._recent = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def active(self) -> bool:
        """Whether the linger is switched off now."""
        return self._timer is not None

    def held(self) -> None:
        self._recent = True
        if self._timer is None and self._linger:
            self._dispatcher.linger = 0.0
            self._timer = asyncio.get_running_loop().call_later(self._grace, self._check)

    def _check(self) -> None:
        if self._recent or self._waiting():
            self._recent = False
            self._timer = asyncio.get_running_loop().call_later(self._grace, self._check)
            return
        self._timer = None
        self._dispatcher.linger = self._linger

    def close(self) -> None:
        """Restore the configured linger and stop checking."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._dispatcher.linger = self._linger
