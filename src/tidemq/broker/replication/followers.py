"""A controller-mode master's sync-state set, as the controllers may hold it, and the
rounds that ask its members whether they still follow the master
(``masterWithoutControllerQuorum=SYNC_STATE_SET_FOLLOWS``, see
:mod:`tidemq.broker.replication.standing`).

The set the master must hear from is every set the controllers may hold: the last one
they answered for the master's epoch, and each set the master asked for since
(CONTROLLER_ALTER_SYNC_STATE_SET) whose outcome it has not learnt. A change is a
compare-and-set on the set's epoch, so one based on an epoch older than a set the
controllers answered can no longer be applied, and a refused one never was.

A round asks each other member for its epoch cache (GET_BROKER_EPOCH_CACHE): a member
that answers with the master's epoch as its last follows it, and its log ends at the
``max_offset`` it gives. A round every member answered so goes to
:meth:`Standing.confirm <tidemq.broker.replication.standing.Standing.confirm>`. Rounds
run every ``interval`` and at once when a send waits for one (:meth:`wake`), and only
for a master whose lease a quorum of controllers confirmed at least once in its epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from tidemq.broker.replication.role import RoleHolder
from tidemq.broker.replication.standing import Standing
from tidemq.codec.controller import EpochEntryCache
from tidemq.net.tasks import cancel_and_wait

__all__ = ["SyncStateSetFollowers"]

log = logging.getLogger(__name__)


class SyncStateSetFollowers:
    def __init__(self, me: int, role: RoleHolder, standing: Standing,
                 own_end: Callable[[], int],
                 epoch_cache: Callable[[str], Awaitable[EpochEntryCache | None]],
                 interval: float) -> None:
        self.me = me
        self.role = role
        self.standing = standing
        self._own_end = own_end
        self._epoch_cache = epoch_cache
        self.interval = interval
        #: The group's members' request addresses by id, as last listed (kept while the
        #: controllers cannot be reached).
        self.addresses: dict[int, str] = {}
        #: The epoch whose lease a quorum of controllers confirmed at least once.
        self.leased_epoch = -1
        #: (master epoch, set epoch, members) the controllers last answered.
        self._answered: tuple[int, int, frozenset[int]] | None = None
        #: Sets asked for, by the set epoch they were based on, outcome unknown.
        self._asked: dict[int, frozenset[int]] = {}
        self._now = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ the set

    def answered(self, master_epoch: int, set_epoch: int, members: frozenset[int]) -> None:
        """The controllers answered ``members`` as the set of epoch ``set_epoch``."""
        self._answered = (master_epoch, set_epoch, members)
        for base in [b for b in self._asked if b < set_epoch]:
            del self._asked[base]

    def asked(self, set_epoch: int, members: frozenset[int]) -> None:
        """The master asks for ``members`` in place of the set of epoch ``set_epoch``."""
        self._asked[set_epoch] = members

    def refused(self, set_epoch: int) -> None:
        self._asked.pop(set_epoch, None)

    def possible(self) -> frozenset[int] | None:
        """Every broker the controllers may hold in the set of the master's epoch now
        (``None``: no set known for that epoch)."""
        answered = self._answered
        if answered is None or answered[0] != self.role.state.epoch:
            return None
        out = answered[2]
        for members in self._asked.values():
            out |= members
        return out

    # ------------------------------------------------------------------ the rounds

    async def confirm(self) -> None:
        """One round: ask every other member of :meth:`possible`; when each follows
        this master's epoch, the standing records where their logs end."""
        state = self.role.state
        members = self.possible()
        if not state.is_master or members is None or self.leased_epoch != state.epoch:
            return
        sent_at = self.standing.clock()
        own_end = self._own_end()
        addresses = [self.addresses.get(i) for i in sorted(members - {self.me})]
        if None in addresses:
            return  # a member never listed: it cannot confirm
        caches = await asyncio.gather(*(self._epoch_cache(a) for a in addresses if a))
        offsets: list[int] = []
        for cache in caches:
            if (cache is None or not cache.epoch_list
                    or cache.epoch_list[-1].epoch != state.epoch):
                return  # gone, or following another master (or elected)
            offsets.append(cache.max_offset)
        if self.role.state == state:
            self.standing.confirm(state.epoch, offsets, sent_at, own_end)

    def wake(self) -> None:
        """A send waits for a round: run one now."""
        self._now.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="broker-sync-state-set-followers")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            # Not wait_for: on Python 3.11 it drops a cancellation (stop()) that lands
            # in the step the event is set.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._now.wait()
            self._now.clear()
            try:
                await self.confirm()
            except Exception:  # a bug here must not stop the rounds for good
                log.exception("sync-state set confirmation round failed")
