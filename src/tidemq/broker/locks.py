"""Orderly-consumption locks: which client owns (group, topic, queue id) -- remoting.md §2.13.

Rule 1: a lock belongs to one client id and lives ``expiry_ms`` after its last renewal.

Everything else is the two tables :data:`LOCK_RULES` and :data:`UNLOCK_RULES`: who holds
the queue now (as seen by the requesting client) -> what the request does.

=====================  ===========================  ===========================
holder                 lock by the requester        unlock by the requester
=====================  ===========================  ===========================
NOBODY                 GRANT: it owns it from now   IGNORE
REQUESTER (any age)    RENEW: renewal time is now   RELEASE
OTHER_LIVE             REFUSE: the other keeps it   IGNORE
OTHER_EXPIRED          TAKE_OVER                    IGNORE
=====================  ===========================  ===========================

:meth:`LockTable.decide_lock` and :meth:`LockTable.decide_unlock` read the tables and
never change state; :meth:`LockTable.apply` carries a plan out -- decide, then act.

Locks are in memory only, as upstream: after a broker restart every queue is free and
orderly clients re-lock within their 20 s renewal period. The broker name of a request's
queue is not part of the key (one broker serves one broker name); answers echo the queues
exactly as they were asked for.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Iterable

from tidemq.types import MessageQueue

__all__ = [
    "DEFAULT_LOCK_EXPIRY_MS",
    "LOCK_RULES",
    "UNLOCK_RULES",
    "Holder",
    "LockAction",
    "LockEntry",
    "LockPlan",
    "LockTable",
]

#: Upstream ``rocketmq.broker.rebalance.lockMaxLiveTime``.
DEFAULT_LOCK_EXPIRY_MS = 60_000

QueueKey = tuple[str, int]  # (topic, queue id)


class LockAction(enum.Enum):
    GRANT = "GRANT"
    RENEW = "RENEW"
    TAKE_OVER = "TAKE_OVER"
    REFUSE = "REFUSE"
    RELEASE = "RELEASE"
    IGNORE = "IGNORE"


class Holder(enum.Enum):
    """Who holds a queue, seen from the client asking."""

    NOBODY = "NOBODY"
    REQUESTER = "REQUESTER"
    OTHER_LIVE = "OTHER_LIVE"
    OTHER_EXPIRED = "OTHER_EXPIRED"


LOCK_RULES: dict[Holder, LockAction] = {
    Holder.NOBODY: LockAction.GRANT,
    Holder.REQUESTER: LockAction.RENEW,
    Holder.OTHER_LIVE: LockAction.REFUSE,
    Holder.OTHER_EXPIRED: LockAction.TAKE_OVER,
}

UNLOCK_RULES: dict[Holder, LockAction] = {
    Holder.NOBODY: LockAction.IGNORE,
    Holder.REQUESTER: LockAction.RELEASE,
    Holder.OTHER_LIVE: LockAction.IGNORE,
    Holder.OTHER_EXPIRED: LockAction.IGNORE,
}

#: Actions after which the requesting client holds the queue.
HELD = frozenset({LockAction.GRANT, LockAction.RENEW, LockAction.TAKE_OVER})


@dataclasses.dataclass(slots=True)
class LockEntry:
    client_id: str
    last_renewal_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class LockPlan:
    """What a lock or unlock request does, queue by queue, decided at ``now_ms``."""

    group: str
    client_id: str
    now_ms: int
    steps: tuple[tuple[MessageQueue, LockAction], ...]

    @property
    def held(self) -> list[MessageQueue]:
        """The queues the client holds once the plan is applied (lock requests)."""
        return [mq for mq, action in self.steps if action in HELD]


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class LockTable:
    """``group -> (topic, queue id) -> LockEntry``. ``clock`` returns milliseconds and may
    be replaced (tests inject one)."""

    def __init__(self, expiry_ms: int = DEFAULT_LOCK_EXPIRY_MS,
                 clock: Callable[[], int] = _monotonic_ms) -> None:
        self.expiry_ms = expiry_ms
        self.clock = clock
        self._groups: dict[str, dict[QueueKey, LockEntry]] = {}

    def _expired(self, entry: LockEntry, now_ms: int) -> bool:
        return now_ms - entry.last_renewal_ms > self.expiry_ms

    # ------------------------------------------------------------------ decide

    def holder(self, group: str, client_id: str, mq: MessageQueue, now_ms: int) -> Holder:
        entry = self._groups.get(group, {}).get((mq.topic, mq.queue_id))
        if entry is None:
            return Holder.NOBODY
        if entry.client_id == client_id:
            return Holder.REQUESTER
        return Holder.OTHER_EXPIRED if self._expired(entry, now_ms) else Holder.OTHER_LIVE

    def decide_lock(self, group: str, client_id: str, queues: Iterable[MessageQueue],
                    now_ms: int | None = None) -> LockPlan:
        return self._decide(LOCK_RULES, group, client_id, queues, now_ms)

    def decide_unlock(self, group: str, client_id: str, queues: Iterable[MessageQueue],
                      now_ms: int | None = None) -> LockPlan:
        return self._decide(UNLOCK_RULES, group, client_id, queues, now_ms)

    def _decide(self, rules: dict[Holder, LockAction], group: str, client_id: str,
                queues: Iterable[MessageQueue], now_ms: int | None) -> LockPlan:
        now = self.clock() if now_ms is None else now_ms
        steps = []
        seen: set[QueueKey] = set()
        for mq in queues:
            key = (mq.topic, mq.queue_id)
            if key not in seen:
                seen.add(key)
                steps.append((mq, rules[self.holder(group, client_id, mq, now)]))
        return LockPlan(group, client_id, now, tuple(steps))

    # ------------------------------------------------------------------ act

    def apply(self, plan: LockPlan) -> None:
        table = self._groups.setdefault(plan.group, {})
        for mq, action in plan.steps:
            key = (mq.topic, mq.queue_id)
            if action in HELD:
                table[key] = LockEntry(plan.client_id, plan.now_ms)
            elif action is LockAction.RELEASE:
                entry = table.get(key)
                if entry is not None and entry.client_id == plan.client_id:
                    del table[key]
        if not table:
            del self._groups[plan.group]

    def lock(self, group: str, client_id: str, queues: Iterable[MessageQueue]
             ) -> list[MessageQueue]:
        """Lock or renew ``queues`` for ``client_id``; returns the queues it now holds."""
        plan = self.decide_lock(group, client_id, queues)
        self.apply(plan)
        return plan.held

    def unlock(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> None:
        self.apply(self.decide_unlock(group, client_id, queues))

    # ------------------------------------------------------------------ queries

    def owner(self, group: str, topic: str, queue_id: int) -> str | None:
        """The client holding a live lock on the queue, if any."""
        entry = self._groups.get(group, {}).get((topic, queue_id))
        if entry is None or self._expired(entry, self.clock()):
            return None
        return entry.client_id

    def has_unexpired(self, group: str) -> bool:
        """Whether ``group`` holds any live lock (upstream ``!isLockAllExpired``)."""
        now = self.clock()
        return any(not self._expired(e, now) for e in self._groups.get(group, {}).values())

    def purge_expired(self) -> int:
        """Forget expired entries; returns how many were dropped."""
        now = self.clock()
        dropped = 0
        for group in list(self._groups):
            table = self._groups[group]
            for key in [k for k, e in table.items() if self._expired(e, now)]:
                del table[key]
                dropped += 1
            if not table:
                del self._groups[group]
        return dropped
