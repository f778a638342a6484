"""Broker liveness in the name server: a state table per broker address.

Pure: no I/O, no asyncio; time comes from an injected clock (milliseconds). The route
table (:mod:`tidemq.namesrv.routes`) feeds events in and removes a broker from the routes
whenever its address leaves ``ALIVE``.

=========================  ====================  =============================================
from                       event                 to
=========================  ====================  =============================================
UNREGISTERED / EXPIRED     REGISTER              ALIVE (timeout restarts)
ALIVE                      REGISTER, HEARTBEAT   ALIVE (timeout restarts)
ALIVE                      TIMEOUT               EXPIRED (nothing heard within its timeout)
ALIVE                      CONNECTION_CLOSED     UNREGISTERED (its registering socket closed)
ALIVE                      UNREGISTER            UNREGISTERED (it asked to leave)
=========================  ====================  =============================================

A broker is due for TIMEOUT when ``last_update + timeout < now`` (the Java test), the
timeout being the ``heartbeatTimeoutMillis`` it registered with, or the default.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Iterator

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "REFRESHING_EVENTS",
    "TRANSITIONS",
    "BrokerState",
    "Clock",
    "Liveness",
    "LivenessEvent",
    "LivenessTable",
    "Transition",
    "monotonic_ms",
]

#: Upstream ``DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``: two minutes.
DEFAULT_TIMEOUT_MS = 120_000

#: A clock in milliseconds.
Clock = Callable[[], int]


def monotonic_ms() -> int:
    """The default clock: monotonic, so wall-clock jumps never expire every broker at once."""
    return time.monotonic_ns() // 1_000_000


class BrokerState(enum.Enum):
    UNREGISTERED = "unregistered"  # never registered, asked to leave, or its socket closed
    ALIVE = "alive"  # registered and heard from within its timeout; in the routes
    EXPIRED = "expired"  # not heard from within its timeout; dropped from the routes


class LivenessEvent(enum.Enum):
    REGISTER = "register"  # REGISTER_BROKER (103)
    HEARTBEAT = "heartbeat"  # BROKER_HEARTBEAT (904), QUERY_DATA_VERSION (322)
    TIMEOUT = "timeout"  # the periodic scan found it past its deadline
    CONNECTION_CLOSED = "connection_closed"  # the socket it registered on went away
    UNREGISTER = "unregister"  # UNREGISTER_BROKER (104)


# Rule 1: every change of a broker's BrokerState goes through this table. A pair that is
# missing changes nothing (a heartbeat from a broker we do not know, a second timeout) and
# Liveness.apply returns None for it, so the caller can tell.
TRANSITIONS: dict[tuple[BrokerState, LivenessEvent], BrokerState] = {
    (BrokerState.UNREGISTERED, LivenessEvent.REGISTER): BrokerState.ALIVE,
    (BrokerState.EXPIRED, LivenessEvent.REGISTER): BrokerState.ALIVE,
    (BrokerState.ALIVE, LivenessEvent.REGISTER): BrokerState.ALIVE,
    (BrokerState.ALIVE, LivenessEvent.HEARTBEAT): BrokerState.ALIVE,
    (BrokerState.ALIVE, LivenessEvent.TIMEOUT): BrokerState.EXPIRED,
    (BrokerState.ALIVE, LivenessEvent.CONNECTION_CLOSED): BrokerState.UNREGISTERED,
    (BrokerState.ALIVE, LivenessEvent.UNREGISTER): BrokerState.UNREGISTERED,
}

#: Events that restart a broker's timeout (and may change its length).
REFRESHING_EVENTS = frozenset({LivenessEvent.REGISTER, LivenessEvent.HEARTBEAT})


@dataclasses.dataclass(frozen=True, slots=True)
class Transition:
    """One applied table entry."""

    event: LivenessEvent
    old: BrokerState
    new: BrokerState

    @property
    def joined(self) -> bool:
        """The broker entered the routes."""
        return self.old is not BrokerState.ALIVE and self.new is BrokerState.ALIVE

    @property
    def left(self) -> bool:
        """The broker must be dropped from the routes."""
        return self.old is BrokerState.ALIVE and self.new is not BrokerState.ALIVE


@dataclasses.dataclass(slots=True)
class Liveness:
    """The liveness record of one broker address."""

    state: BrokerState = BrokerState.UNREGISTERED
    last_update_ms: int = 0
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    @property
    def deadline_ms(self) -> int:
        """After this instant (exclusive) the broker is due for TIMEOUT."""
        return self.last_update_ms + self.timeout_ms

    def is_due(self, now_ms: int) -> bool:
        return self.state is BrokerState.ALIVE and self.deadline_ms < now_ms

    def apply(self, event: LivenessEvent, now_ms: int,
              timeout_ms: int | None = None) -> Transition | None:
        """Apply ``event`` per :data:`TRANSITIONS`; ``None`` if the pair is not in it."""
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            return None
        if event in REFRESHING_EVENTS:
            self.last_update_ms = now_ms
            if timeout_ms is not None and timeout_ms > 0:
                self.timeout_ms = timeout_ms
        transition = Transition(event, self.state, new)
        self.state = new
        return transition


class LivenessTable:
    """The records of every broker address that is ``ALIVE``; the others are forgotten.

    An address that is not in the table is ``UNREGISTERED`` (or was ``EXPIRED``; the
    :class:`Transition` that removed it says which).
    """

    def __init__(self, clock: Clock = monotonic_ms,
                 default_timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        self.clock = clock
        self.default_timeout_ms = default_timeout_ms
        self._records: dict[str, Liveness] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __contains__(self, addr: object) -> bool:
        return addr in self._records

    def get(self, addr: str) -> Liveness | None:
        """The record of ``addr`` (a copy), or ``None`` when it is not alive."""
        record = self._records.get(addr)
        return dataclasses.replace(record) if record is not None else None

    def state(self, addr: str) -> BrokerState:
        record = self._records.get(addr)
        return record.state if record is not None else BrokerState.UNREGISTERED

    def apply(self, addr: str, event: LivenessEvent, *, timeout_ms: int | None = None,
              now_ms: int | None = None) -> Transition | None:
        """Apply ``event`` to ``addr`` at ``now_ms`` (default: the clock)."""
        record = self._records.get(addr)
        if record is None:
            record = Liveness(timeout_ms=self.default_timeout_ms)
        now = self.clock() if now_ms is None else now_ms
        transition = record.apply(event, now, timeout_ms)
        if transition is None:
            return None
        if record.state is BrokerState.ALIVE:
            self._records[addr] = record
        else:
            self._records.pop(addr, None)
        return transition

    def due(self, now_ms: int | None = None) -> list[str]:
        """Addresses past their deadline at ``now_ms`` (default: the clock), oldest first."""
        now = self.clock() if now_ms is None else now_ms
        late = [(r.deadline_ms, addr) for addr, r in self._records.items() if r.is_due(now)]
        return [addr for _, addr in sorted(late)]
