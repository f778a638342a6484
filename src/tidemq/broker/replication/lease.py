"""A controller-mode master's lease: how long it may still acknowledge sends.

A master in controller mode may acknowledge a send only while its lease holds. The
lease is renewed from the answers to one round of BROKER_HEARTBEAT, sent at ``s``
(:func:`renews` decides whether a round's answers renew it), and then runs until
``s + duration``. The controllers replace a master only once their leader has not heard
from it for ``controllerHeartBeatTimeoutMills`` (``T``); the lease's ``duration`` is
shorter than ``T``, so the old master stops acknowledging before the new one can be
elected (the timing argument is in ``docs/replication.md``).

A round renews the lease when

* more than half of the configured controllers answered it,
* every one of those answers names the same Raft leader,
* that leader is among them, and it says this broker is its group's master of the
  epoch the broker holds.

Why all of them must agree: a controller elected leader after the round began gives
every broker a fresh lease when it takes over, so it elects no one before ``s + T``;
one elected before needed the votes of a majority, which shares a controller with the
majority that answered -- and that controller names the new leader (or none), not the
old one.

Pure but for the clock, which the caller may pass.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

__all__ = ["HeartbeatAnswer", "MasterLease", "lease_ms", "renews"]


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """One controller's answer to a BROKER_HEARTBEAT."""

    leader_id: str | None
    is_leader: bool
    master_id: int | None = None
    master_epoch: int | None = None


def renews(answers: Sequence[HeartbeatAnswer], controllers: int, me: int, epoch: int) -> bool:
    """Whether ``answers`` (from distinct controllers of the ``controllers`` configured)
    renew the lease of broker ``me`` as master of ``epoch``."""
    if 2 * len(answers) <= controllers:
        return False
    leaders = {a.leader_id for a in answers}
    if len(leaders) != 1 or None in leaders:
        return False
    leading = [a for a in answers if a.is_leader]
    return (len(leading) == 1 and leading[0].master_id == me
            and leading[0].master_epoch == epoch)


def lease_ms(heartbeat_timeout_ms: int, heartbeat_interval_ms: int) -> int:
    """The lease a broker holds: its controllers' timeout for it less two heartbeat
    intervals, the margin by which the old master stops before a new one is elected."""
    return heartbeat_timeout_ms - 2 * heartbeat_interval_ms


class MasterLease:
    """Until when (on ``clock``, seconds) the broker may acknowledge sends as master."""

    def __init__(self, duration_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        if duration_ms <= 0:
            raise ValueError(f"a lease of {duration_ms} ms")
        self.duration = duration_ms / 1000
        self.clock = clock
        #: The lease ends here; 0: never renewed, or revoked.
        self.until = 0.0

    def renew(self, sent_at: float) -> None:
        """A heartbeat round sent at ``sent_at`` renewed the lease."""
        self.until = max(self.until, sent_at + self.duration)

    def revoke(self) -> None:
        self.until = 0.0

    def holds(self) -> bool:
        return self.clock() < self.until

    def remaining(self) -> float:
        """Seconds the lease still holds (0 when it has lapsed)."""
        return max(0.0, self.until - self.clock())
