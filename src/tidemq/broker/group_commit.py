"""SYNC_FLUSH sends waiting for the group commit that makes them durable.

Sends waiting for durability are queued on the event loop in commit-log order. One flush
request per loop iteration triggers the group commit; the flusher's listener posts one
callback per commit with the durable offset, which answers every waiter up to it. A
request that fails or times out answers its waiters as not durable (FLUSH_DISK_TIMEOUT),
as a per-message future would have.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
from collections import deque
from collections.abc import Callable
from typing import Any

from tidemq.store.flush import FlushService, FlushStatus

__all__ = ["GroupCommitWaiters"]


class GroupCommitWaiters:
    """SYNC_FLUSH sends waiting for their group commit, answered on the event loop.

    ``wait(end, item)`` queues ``item`` until the commit log is durable up to ``end``
    (ends arrive in increasing order: every append happens on the loop thread).
    ``complete(item, durable)`` is called on the loop for each, exactly once.
    """

    def __init__(self, flusher: FlushService, complete: Callable[[Any, bool], None]) -> None:
        self._flusher = flusher
        self._complete = complete
        self._queue: deque[tuple[int, Any]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._asking = False
        flusher.add_flush_listener(self._flushed_threadsafe)

    def __len__(self) -> int:
        return len(self._queue)

    def wait(self, end: int, item: Any) -> bool:
        """Queue ``item``; ``False`` (nothing queued) when ``end`` is durable already."""
        if end <= self._flusher.flushed_offset:
            return False
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._queue.append((end, item))
        if not self._asking:
            self._asking = True
            loop.call_soon(self._ask)
        return True

    def _ask(self) -> None:
        """One flush request for everything queued in this loop iteration."""
        self._asking = False
        if self._queue:
            end = self._queue[-1][0]
            if end <= self._flusher.flushed_offset:
                return  # flushed meanwhile: the listener's callback answers them
            self._flusher.request(end).add_done_callback(
                functools.partial(self._requested_threadsafe, end))

    def _flushed_threadsafe(self, offset: int) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(self._flushed, offset)

    def _requested_threadsafe(self, end: int, fut: concurrent.futures.Future[FlushStatus]
                              ) -> None:
        if fut.cancelled() or fut.result() is not FlushStatus.FLUSHED:
            loop = self._loop
            if loop is not None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._failed, end)

    def _flushed(self, offset: int) -> None:
        queue, complete = self._queue, self._complete
        while queue and queue[0][0] <= offset:
            complete(queue.popleft()[1], True)

    def _failed(self, end: int) -> None:
        """The request for ``end`` timed out or failed: its waiters are answered."""
        queue, complete = self._queue, self._complete
        durable = self._flusher.flushed_offset
        while queue and queue[0][0] <= end:
            e, item = queue.popleft()
            complete(item, e <= durable)
