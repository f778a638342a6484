"""Broker heartbeats as the controller that leads sees them: who is alive, and what each
broker last reported (its epoch and the commit-log offset it holds).

Not replicated, as upstream: a controller that becomes leader has heard from nobody, so
it starts every broker it knows with a fresh lease (:meth:`Heartbeats.grant_all`) rather
than electing away from masters that were merely talking to the previous leader.
Pure: the caller passes the time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

__all__ = ["BrokerKey", "Heartbeats", "LiveBroker"]

#: (broker name, controller broker id)
BrokerKey = tuple[str, int]


@dataclasses.dataclass(slots=True)
class LiveBroker:
    address: str
    last_ms: int
    timeout_ms: int
    epoch: int = 0
    max_offset: int = 0
    election_priority: int = 0

    def alive(self, now_ms: int) -> bool:
        return now_ms - self.last_ms < self.timeout_ms


class Heartbeats:
    def __init__(self, default_timeout_ms: int) -> None:
        self.default_timeout_ms = default_timeout_ms
        self._table: dict[BrokerKey, LiveBroker] = {}

    def beat(self, key: BrokerKey, address: str, now_ms: int, *, timeout_ms: int | None = None,
             epoch: int | None = None, max_offset: int | None = None,
             election_priority: int | None = None) -> None:
        old = self._table.get(key)
        entry = LiveBroker(address, now_ms, timeout_ms or self.default_timeout_ms)
        if old is not None and old.address == address:
            entry.epoch, entry.max_offset = old.epoch, old.max_offset
            entry.election_priority = old.election_priority
        if epoch is not None:
            entry.epoch = epoch
        if max_offset is not None:
            entry.max_offset = max_offset
        if election_priority is not None:
            entry.election_priority = election_priority
        self._table[key] = entry

    def grant_all(self, brokers: Iterable[tuple[BrokerKey, str]], now_ms: int) -> None:
        """Give every broker named a fresh lease from ``now_ms`` (a new leader's start)."""
        for key, address in brokers:
            old = self._table.get(key)
            if old is None or old.address != address:
                self._table[key] = LiveBroker(address, now_ms, self.default_timeout_ms)
            else:
                old.last_ms = max(old.last_ms, now_ms)

    def alive(self, key: BrokerKey, now_ms: int) -> bool:
        entry = self._table.get(key)
        return entry is not None and entry.alive(now_ms)

    def get(self, key: BrokerKey) -> LiveBroker | None:
        return self._table.get(key)

    def forget(self, key: BrokerKey) -> None:
        self._table.pop(key, None)
