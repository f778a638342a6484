"""What lets a controller-mode master acknowledge sends: its lease, and -- when
``masterWithoutControllerQuorum`` allows it -- its sync-state set following it.

A master normally acknowledges only while its lease from a quorum of controllers holds
(:mod:`tidemq.broker.replication.lease`). When no quorum of controllers answers -- two of
three are down, or the master is cut off from them -- the lease lapses and the master,
under ``STEP_DOWN`` (the default), stops acknowledging and steps down.

Under ``SYNC_STATE_SET_FOLLOWS`` a master whose lease lapsed may go on acknowledging a
send once every other member of its sync-state set has said, over its request port
(GET_BROKER_EPOCH_CACHE), that it still follows this master's epoch and that its commit
log reaches past the send. Why that is safe: the controllers elect a new master only
from the sync-state set (unless ``enableElectUncleanMaster``). A member that is elected
records its new epoch before it takes a send, and from then on answers with that epoch,
confirming nothing more; everything it confirmed before is in its log, before the start
of its epoch, and is kept by it and by every broker that follows it. So every message
the old master acknowledged this way survives whichever member is elected, and a member
that stopped following (elected, killed, cut off) stops the old master's
acknowledgements. The sync-state set used is every set the controllers may hold: the
last one they answered and those this master asked for since without learning the
outcome.

A round of confirmations sent at ``s`` that every member answered for the current epoch
also keeps the master from stepping down until ``s`` plus the lease's duration: a
master whose members stop confirming steps down as under ``STEP_DOWN``.

Pure but for the clock, which the caller may pass.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

from tidemq.broker.replication.lease import MasterLease

__all__ = ["NO_LIMIT", "QuorumLossMode", "Standing"]

#: An offset beyond any log: nothing to wait for.
NO_LIMIT = 2**63 - 1


class QuorumLossMode(enum.Enum):
    """``masterWithoutControllerQuorum``: what a master does once no quorum of
    controllers confirms it."""

    #: Stop acknowledging when the lease lapses, and step down.
    STEP_DOWN = "STEP_DOWN"
    #: Go on acknowledging what every member of the sync-state set confirms it holds
    #: while following this master; step down once they stop confirming.
    SYNC_STATE_SET_FOLLOWS = "SYNC_STATE_SET_FOLLOWS"


class Standing:
    """Whether, and up to which commit-log offset, a master may acknowledge sends."""

    def __init__(self, lease: MasterLease, mode: QuorumLossMode,
                 clock: Callable[[], float] | None = None) -> None:
        self.lease = lease
        self.mode = mode
        self.clock = clock if clock is not None else lease.clock
        #: The epoch the confirmations below are for (-1: none).
        self.epoch = -1
        #: Every member holds the log up to here, following this master.
        self.confirmed = 0
        #: Until here (on ``clock``) the members' confirmations keep the master standing.
        self.until = 0.0
        #: Called after the confirmed offset advanced (the waiting sends re-checked).
        self.on_confirmed: list[Callable[[], None]] = []
        #: Called when a send waits for confirmations (the link asks at once).
        self.on_wanted: list[Callable[[], None]] = []

    @property
    def follows_allowed(self) -> bool:
        return self.mode is QuorumLossMode.SYNC_STATE_SET_FOLLOWS

    def reset(self, epoch: int) -> None:
        """A new mastership (or none): no confirmation holds any more."""
        self.epoch = epoch
        self.confirmed = 0
        self.until = 0.0

    def confirm(self, epoch: int, offsets: Iterable[int], sent_at: float,
                own_end: int) -> None:
        """Every member answered a round sent at ``sent_at`` following ``epoch``, their
        logs ending at ``offsets`` (none: the set is this master alone, whose log ends
        at ``own_end``: no other member can be elected)."""
        if not self.follows_allowed or epoch != self.epoch:
            return
        ends = list(offsets)
        reach = min(ends) if ends else own_end
        self.until = max(self.until, sent_at + self.lease.duration)
        if reach > self.confirmed:
            self.confirmed = reach
            for fn in self.on_confirmed:
                fn()

    def _followed(self) -> bool:
        return self.follows_allowed and self.clock() < self.until

    def may_take(self) -> bool:
        """Whether a send may be taken now (it is still refused an acknowledgement
        unless :meth:`acknowledges` its end), and the master stays master."""
        return self.lease.holds() or self._followed()

    def limit(self) -> int:
        """Sends ending at or before this offset may be acknowledged now."""
        if self.lease.holds() or not self.follows_allowed:
            return NO_LIMIT
        return self.confirmed

    def acknowledges(self, end: int) -> bool:
        """Whether a send whose record ends at ``end`` may be answered SEND_OK now."""
        if self.lease.holds():
            return True
        return self.follows_allowed and end <= self.confirmed

    def want(self) -> None:
        """A send waits for confirmations beyond :attr:`confirmed`."""
        for fn in self.on_wanted:
            fn()
