"""LockKeeper: the broker locks of an orderly push consumer's queues (remoting.md §2.13).

An orderly consumer consumes a queue only under the broker's lock
(:mod:`tidemq.client.locks` has the requests). The keeper

* asks for the locks of newly assigned queues at once (:meth:`LockKeeper.lock`); a
  granted queue in ``LOCKING`` moves on to ``STARTING`` (``on_granted``);
* asks again every ``lock_retry_interval`` for queues still waiting, and renews every
  held lock every ``lock_renew_interval`` (:meth:`LockKeeper.run`);
* marks a queue whose lock the broker did not confirm as not locked -- its consumption
  pauses until a renewal succeeds, and stops anyway once the last confirmation is
  ``lock_stale_after`` old;
* unlocks queues given up (:meth:`LockKeeper.unlock`), and a queue granted after it was
  already revoked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from tidemq.client.instance import ClientInstance
from tidemq.client.locks import by_broker, lock_request, read_locked, unlock_request
from tidemq.client.offsets import check_success
from tidemq.client.process_queue import ProcessQueue
from tidemq.client.push_options import PushOptions
from tidemq.client.rebalance import OWNED_STATES, QueueEvent, QueueState
from tidemq.errors import TideMQError
from tidemq.types import MessageQueue

__all__ = ["LockKeeper"]

log = logging.getLogger(__name__)


class LockKeeper:
    """See the module docstring. ``owned()`` returns the consumer's current queues;
    ``on_granted(pq)`` is called when a queue's first lock arrives."""

    def __init__(self, group: str, instance: ClientInstance, options: PushOptions, *,
                 owned: Callable[[], Mapping[MessageQueue, ProcessQueue]],
                 on_granted: Callable[[ProcessQueue], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.group = group
        self.instance = instance
        self.options = options
        self._owned = owned
        self._on_granted = on_granted
        self._clock = clock

    def __repr__(self) -> str:
        return f"<LockKeeper group={self.group!r}>"

    async def run(self) -> None:
        """Ask for waiting queues every ``lock_retry_interval``; renew every held lock
        every ``lock_renew_interval``."""
        opts = self.options
        renewed = self._clock()
        while True:
            await asyncio.sleep(opts.lock_retry_interval)
            owned = [pq for pq in self._owned().values() if pq.state in OWNED_STATES]
            if self._clock() - renewed >= opts.lock_renew_interval:
                renewed = self._clock()
                targets = owned
            else:
                targets = [pq for pq in owned if pq.state is QueueState.LOCKING]
            if targets:
                await self.lock(targets)

    async def lock(self, pqs: Sequence[ProcessQueue]) -> None:
        """LOCK_BATCH_MQ for ``pqs``, one request per broker."""
        inst = self.instance
        by_mq = {pq.mq: pq for pq in pqs}
        for queues in by_broker(by_mq).values():
            try:
                addr = await inst.master_address(queues[0])
                response = await inst.request(
                    addr, lock_request(self.group, inst.client_id, queues))
                granted = read_locked(response, address=addr)
            except TideMQError as exc:
                log.info("%r: locking %s failed: %s", self, queues, exc)
                continue
            stray = self._apply(by_mq, queues, granted)
            if stray:
                await self.unlock(stray)

    def _apply(self, by_mq: Mapping[MessageQueue, ProcessQueue],
               asked: Sequence[MessageQueue], granted: set[MessageQueue]
               ) -> list[MessageQueue]:
        """Record a lock answer; returns the queues granted but no longer ours."""
        now = self._clock()
        owned = self._owned()
        stray: list[MessageQueue] = []
        for mq in asked:
            pq = by_mq[mq]
            if mq not in granted:
                pq.lock_lost()
            elif owned.get(mq) is pq:
                pq.locked(now)
                if pq.fire(QueueEvent.LOCKED):
                    self._on_granted(pq)
            elif mq not in owned:
                stray.append(mq)  # revoked while the lock was asked for
        return stray

    async def unlock(self, queues: Sequence[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ for ``queues``; a failure is logged (the lock expires)."""
        inst = self.instance
        for group in by_broker(queues).values():
            try:
                addr = await inst.master_address(group[0])
                check_success(await inst.request(
                    addr, unlock_request(self.group, inst.client_id, group)), address=addr)
            except TideMQError as exc:
                log.info("%r: unlocking %s failed (it expires by itself): %s", self, group,
                         exc)
