"""SYNC_MASTER sends waiting until enough replicas hold them.

Like the flush's group commit (:mod:`tidemq.broker.group_commit`): sends wait on the
event loop in commit-log order, and each offset report from a replica answers every
waiter it covers at once -- one wake-up per report, not one per message. A send whose
copies are not there within ``timeout`` is answered FLUSH_SLAVE_TIMEOUT; one that
cannot be waited for, because fewer replicas are in sync than it needs, is answered
SLAVE_NOT_AVAILABLE at once (RocketMQ's ``isSlaveOK``). Either way the message is
stored, and the answer carries its id and offset, as upstream's.

How many copies a send needs (the master's included), from RocketMQ's keys:
``inSyncReplicas``; with ``enableAutoInSyncReplicas`` the in-sync copies present, never
fewer than ``minInSyncReplicas``; with ``allAckInSyncStateSet`` every in-sync copy.

A controller-mode master may also cap what it acknowledges (``limit``: a master whose
lease lapsed acknowledges only what its sync-state set confirmed, see
:mod:`tidemq.broker.replication.standing`); a send beyond the cap waits for it to rise
(``want`` asks for it) within the same ``timeout``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from tidemq.errors import ResponseCode

__all__ = ["AckPolicy", "ReplicaAcks"]

SUCCESS = int(ResponseCode.SUCCESS)
SLAVE_NOT_AVAILABLE = int(ResponseCode.SLAVE_NOT_AVAILABLE)
FLUSH_SLAVE_TIMEOUT = int(ResponseCode.FLUSH_SLAVE_TIMEOUT)


class AckPolicy:
    """How many copies (the master's included) a send needs, given the in-sync ones."""

    def __init__(self, in_sync_replicas: int, min_in_sync_replicas: int = 1, *,
                 auto: bool = False, all_in_sync: bool = False) -> None:
        self.in_sync_replicas = in_sync_replicas
        self.min_in_sync_replicas = min_in_sync_replicas
        self.auto = auto
        self.all_in_sync = all_in_sync

    def needed(self, in_sync_copies: int) -> int:
        if self.all_in_sync:
            return max(in_sync_copies, self.min_in_sync_replicas)
        need = self.in_sync_replicas
        if self.auto:
            need = max(min(need, in_sync_copies), self.min_in_sync_replicas)
        return need


class ReplicaAcks:
    """Sends waiting for replica copies, answered on the event loop.

    ``acked()`` gives the replicas' acknowledged offsets (one per connected replica);
    ``in_sync()`` how many of them are in sync. ``complete(item, code)`` is called once
    per queued item with SUCCESS or FLUSH_SLAVE_TIMEOUT. ``limit()``: sends ending
    beyond it wait whatever their copies (``want()`` is called when one does).
    """

    def __init__(self, policy: AckPolicy, acked: Callable[[], Sequence[int]],
                 in_sync: Callable[[], int], complete: Callable[[Any, int], None],
                 timeout: float, *, limit: Callable[[], int] | None = None,
                 want: Callable[[], None] | None = None) -> None:
        self.policy = policy
        self._acked = acked
        self._in_sync = in_sync
        self._complete = complete
        self._limit = limit if limit is not None else _no_limit
        self._want = want if want is not None else _nothing
        self.timeout = timeout
        #: (end, copies needed, deadline, item), in commit-log order.
        self._queue: deque[tuple[int, int, float, Any]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self.timeouts = 0
        self.unavailable = 0

    def __len__(self) -> int:
        return len(self._queue)

    def wait(self, end: int, item: Any) -> int | None:
        """Queue ``item`` until enough copies hold the log up to ``end``: ``None`` when
        queued, else the answer's code now (SUCCESS or SLAVE_NOT_AVAILABLE)."""
        need = self.policy.needed(self._in_sync() + 1)
        if need > 1 and self._in_sync() + 1 < need:
            self.unavailable += 1
            return SLAVE_NOT_AVAILABLE
        capped = end > self._limit()
        if not capped and (need <= 1 or _copies(self._acked(), end) + 1 >= need):
            return SUCCESS
        self._queue.append((end, need, time.monotonic() + self.timeout, item))
        if capped:
            self._want()
        if self._timer is None:
            self._arm()
        return None

    def on_report(self) -> None:
        """A replica reported an offset: answer every waiter now covered."""
        queue = self._queue
        if not queue:
            return
        acked = sorted(self._acked(), reverse=True)
        limit = self._limit()
        complete = self._complete
        while queue:
            end, need, _, item = queue[0]
            if end > limit:
                self._want()
                break
            # the need-1 th highest replica offset covers ``end``
            if need > 1 and (need - 1 > len(acked) or acked[need - 2] < end):
                break
            queue.popleft()
            complete(item, SUCCESS)

    def fail_all(self) -> None:
        """Answer every waiter FLUSH_SLAVE_TIMEOUT (the broker stops or steps down)."""
        while self._queue:
            self.timeouts += 1
            self._complete(self._queue.popleft()[3], FLUSH_SLAVE_TIMEOUT)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._queue[0][2] - time.monotonic())
        self._timer = loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer = None
        self.on_report()  # answered by a report not yet seen here
        now = time.monotonic()
        queue = self._queue
        while queue and queue[0][2] <= now:
            self.timeouts += 1
            self._complete(queue.popleft()[3], FLUSH_SLAVE_TIMEOUT)
        if queue:
            self._arm()


def _no_limit() -> int:
    return 2**63 - 1


def _nothing() -> None:
    pass


def _copies(acked: Sequence[int], end: int) -> int:
    return sum(1 for offset in acked if offset >= end)
