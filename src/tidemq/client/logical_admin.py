"""Logical-queue administration (RIP-21): create, query, migrate, resize, delete.

Every broker of the cluster holds the whole mapping of a logical topic; these operations
read it from all of them, decide the next mapping synchronously (plain functions below),
then push it to all of them. A migration is a resumable state machine::

    planned   -- the target segment added as PENDING (epoch + 1)
    sealed    -- the old NORMAL segment sealed at its exact end by its broker (epoch + 1)
    committed -- the target made NORMAL, its logical start = the old segment's end

Each step is recognised from the mapping itself, so re-running ``migrate`` after a crash
of the admin process or of a broker between steps continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import TideMQError
from tidemq.formats.logical_mapping import Segment, SegmentState, TopicMapping

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["LogicalQueueAdmin", "MigrationStep", "plan_commit", "plan_create", "plan_migration",
           "plan_resize", "writable"]

#: ``(step, done_now, mapping)`` -- step is "planned", "sealed" or "committed"; done_now is
#: False when a resumed migration found the step already done.
MigrationStep = Callable[[str, bool, TopicMapping], None]


def _epoch(old: int = 0) -> int:
    return max(old + 1, int(time.time() * 1000))


def plan_create(topic: str, total: int, brokers: list[str]) -> TopicMapping:
    """LQ i on broker i mod k, physical queues numbered per broker from 0."""
    if total < 1 or not brokers:
        raise ValueError("a logical topic needs at least one queue and one broker")
    counters = dict.fromkeys(brokers, 0)
    queues: dict[int, tuple[Segment, ...]] = {}
    for lq in range(total):
        broker = brokers[lq % len(brokers)]
        queues[lq] = (Segment(broker, counters[broker], 0),)
        counters[broker] += 1
    return TopicMapping(topic, _epoch(), queues)


def _next_physical(mapping: TopicMapping, broker: str) -> int:
    used = mapping.physical_queues(broker)
    return max(used) + 1 if used else 0


def plan_migration(mapping: TopicMapping, lq: int, target: str) -> TopicMapping | None:
    """The mapping after the *planned* step, or ``None`` when nothing is to plan (already
    on ``target``, or a target segment is already pending)."""
    segs = mapping.queues[lq]
    leader = mapping.leader(lq)
    if mapping.pending(lq) is not None or (leader is not None and leader.broker == target):
        return None
    expired = [s for s in segs if s.broker == target and s.state is SegmentState.EXPIRED]
    if expired:  # RIP-21 scenario (c): reuse the expired physical queue of the target
        queue_id = expired[-1].queue_id
        physical_start = max(s.physical_end for s in segs
                             if s.broker == target and s.queue_id == queue_id)
    else:  # scenario (d) and the rest: a new physical queue, never a readable one
        queue_id, physical_start = _next_physical(mapping, target), 0
    new = Segment(target, queue_id, -1, physical_start, -1, SegmentState.PENDING)
    return mapping.replace(lq, (*segs, new), _epoch(mapping.epoch))


def plan_commit(mapping: TopicMapping, lq: int) -> TopicMapping:
    """After the seal: the pending segment becomes NORMAL, contiguous with the old one."""
    segs = mapping.queues[lq]
    pending = mapping.pending(lq)
    if pending is None:
        return mapping
    sealed = [s for s in segs if s.state is SegmentState.READONLY and s.logical_end >= 0]
    start = max((s.logical_end for s in sealed), default=0)
    committed = dataclasses.replace(pending, logical_start=start, state=SegmentState.NORMAL)
    return mapping.replace(lq, tuple(committed if s == pending else s for s in segs),
                           _epoch(mapping.epoch))


def writable(mapping: TopicMapping) -> list[int]:
    """The LQs that take sends: those with an open (or pending) segment."""
    return [lq for lq in sorted(mapping.queues)
            if mapping.leader(lq) is not None or mapping.pending(lq) is not None]


def plan_resize(mapping: TopicMapping, total: int, brokers: list[str]) -> TopicMapping:
    """The mapping with ``total`` writable LQs, as far as that needs no seal: LQs below
    ``total`` sealed by an earlier decrease are re-opened (a new physical queue, starting
    at the sealed end), LQs beyond the current count are added round robin on new
    physical queues. Sealing the LQs at or above ``total`` is the decrease
    (:meth:`LogicalQueueAdmin.resize`). ``mapping`` itself when nothing is to do."""
    if total < 1 or not brokers:
        raise ValueError("a logical topic needs at least one queue and one broker")
    work = mapping
    for lq in range(total):
        segs = work.queues.get(lq, ())
        if segs and (work.leader(lq) is not None or work.pending(lq) is not None):
            continue
        broker = brokers[lq % len(brokers)]
        start = max((s.logical_end for s in segs if s.logical_end >= 0), default=0)
        work = work.replace(lq, (*segs, Segment(broker, _next_physical(work, broker), start)),
                            work.epoch)
    if work is mapping:
        return mapping
    return TopicMapping(work.topic, _epoch(mapping.epoch), work.queues)


class LogicalQueueAdmin:
    def __init__(self, admin: AdminClient, cluster: str | None = None) -> None:
        self.admin = admin
        self.cluster = cluster

    async def _brokers(self) -> dict[str, str]:
        return await self.admin.masters(self.cluster)

    async def _push(self, mapping: TopicMapping, brokers: dict[str, str], *,
                    force: bool = False, first: str | None = None) -> None:
        """To every broker, ``first`` (a name) before the others."""
        body = json.dumps(mapping.to_json()).encode()
        ext = {"brokerAddrs": json.dumps(brokers, sort_keys=True)}
        if force:
            ext["force"] = "true"
        for addr in sorted(brokers.values(), key=lambda a: a != brokers.get(first or "")):
            await self.admin._broker(addr, RemotingCommand.request(
                RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, ext, body))

    async def _seal(self, topic: str, lq: int, broker: str, addrs: dict[str, str]
                    ) -> TopicMapping:
        """SEAL_LOGICAL_QUEUE on the broker holding the open segment; the sealed mapping.
        Only that broker knows the exact end, so a dead one stops the operation here (the
        mapping is left as planned: re-run once the broker is back)."""
        addr = addrs.get(broker)
        if addr is None:
            raise TideMQError(f"broker {broker}, which holds the open segment of {topic}/{lq}, "
                              f"is not registered (live: {sorted(addrs)}); restart it and "
                              "run the operation again")
        resp = await self.admin._broker(addr, RemotingCommand.request(
            RequestCode.SEAL_LOGICAL_QUEUE, {"topic": topic, "lq": str(lq)}))
        return TopicMapping.from_json(json.loads(resp.full_body()))

    async def query(self, topic: str) -> TopicMapping:
        """The newest mapping any broker of the cluster holds for ``topic``."""
        best: TopicMapping | None = None
        for addr in (await self._brokers()).values():
            try:
                resp = await self.admin._broker(addr, RemotingCommand.request(
                    RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": topic}))
            except TideMQError:
                continue
            m = TopicMapping.from_json(json.loads(resp.full_body()))
            if best is None or m.epoch > best.epoch:
                best = m
        if best is None:
            raise TideMQError(f"{topic} has no logical-queue mapping on any broker")
        return best

    async def create(self, topic: str, total: int, brokers: list[str] | None = None
                     ) -> TopicMapping:
        addrs = await self._brokers()
        names = sorted(brokers or addrs)
        mapping = plan_create(topic, total, names)
        await self._push(mapping, addrs)
        return mapping

    async def update(self, mapping: TopicMapping, *, force: bool = False) -> None:
        """Push ``mapping`` to every broker; ``force`` lets it replace a newer epoch."""
        await self._push(mapping, await self._brokers(), force=force)

    async def migrate(self, topic: str, lq: int, target: str,
                      on_step: MigrationStep | None = None) -> TopicMapping:
        """Move ``lq``'s writes to ``target``; resumable (see the module docstring).
        ``on_step`` hears of each step, done now or found done."""
        def step(name: str, now: bool, m: TopicMapping) -> None:
            if on_step is not None:
                on_step(name, now, m)

        addrs = await self._brokers()
        if target not in addrs:
            raise TideMQError(f"no broker {target!r} in the cluster ({sorted(addrs)})")
        mapping = await self.query(topic)
        if lq not in mapping.queues:
            raise TideMQError(f"{topic} has no logical queue {lq}")
        pending = mapping.pending(lq)
        if pending is not None and pending.broker != target:
            raise TideMQError(f"{topic}/{lq} has a migration to {pending.broker} pending: "
                              f"finish it first (migrate to {pending.broker} again)")
        planned = plan_migration(mapping, lq, target)
        if planned is not None:
            await self._push(planned, addrs)
            mapping = planned
        step("planned", planned is not None, mapping)
        leader = mapping.leader(lq)
        sealing = leader is not None and leader.broker != target
        if leader is not None and sealing:
            mapping = await self._seal(topic, lq, leader.broker, addrs)
        step("sealed", sealing, mapping)
        committed = plan_commit(mapping, lq)
        if committed is not mapping:
            # The new leader first: the brokers forwarding the sends held since the seal
            # find it already accepting them.
            await self._push(committed, addrs, first=target)
        step("committed", committed is not mapping, committed)
        return committed

    async def resize(self, topic: str, total: int) -> TopicMapping:
        """``total`` writable LQs: re-open or add below it, seal (decrease) at or above
        it. A sealed LQ stays readable, and its id is never reused by another queue."""
        addrs = await self._brokers()
        mapping = await self.query(topic)
        grown = plan_resize(mapping, total, sorted(addrs))
        if grown is not mapping:
            await self._push(grown, addrs)
            mapping = grown
        for lq in range(total, mapping.total):  # seal the tail: readable, no more writes
            leader = mapping.leader(lq)
            if leader is not None:
                mapping = await self._seal(topic, lq, leader.broker, addrs)
                await self._push(mapping, addrs)  # the next seal must see this one
        return mapping

    async def delete(self, topic: str) -> None:
        for addr in (await self._brokers()).values():
            await self.admin._broker(addr, RemotingCommand.request(
                RequestCode.DELETE_LOGICAL_QUEUE_MAPPING, {"topic": topic}))
