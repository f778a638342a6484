"""Logical-queue administration (RIP-21): create, query, migrate, resize, delete.

Every broker of the cluster holds a copy of a logical topic's mapping. ``migrate`` and
``resize`` first read every copy, merge them into the one that knows every fact
(:func:`~tidemq.formats.logical_migration.merge`) and push that to every broker whose
copy differs -- so re-running either repairs what an interrupted one left -- then
decides the next mapping synchronously (plain functions below) and pushes it to every
broker it can reach. A broker it cannot reach catches up from its peers by itself.
:meth:`LogicalQueueAdmin.query` reads and merges the same way but pushes nothing (a
listing must not write), unless asked to repair.

A migration is the state machine of :mod:`tidemq.formats.logical_migration`::

    planned   -- the target segment added as PENDING
    sealed    -- the old NORMAL segment sealed at its exact end by its broker
    committed -- the target made NORMAL, its logical start = the old segment's end

Each step is recognised from the merged mapping, so re-running ``migrate`` after a crash
of the admin process or of any broker continues where it stopped.

When the old leader cannot be reached for the seal, ``migrate(force=True)`` waits up to
``wait`` seconds for it, then cuts its segment without it
(:func:`~tidemq.formats.logical_migration.forced_cut`) at the highest end any reachable
broker knows it reached (the ``ends`` of their QUERY_LOGICAL_QUEUE_MAPPING answers,
:mod:`tidemq.codec.logical_ends`). Only the operator can know that the broker is dead and
not merely cut off from the admin tool, so the cut is never taken without ``force``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.logical_ends import decode_ends
from tidemq.errors import BrokerResponseError, TideMQError
from tidemq.formats.logical_mapping import Segment, SegmentState, TopicMapping
from tidemq.formats.logical_migration import (
    MappingConflict,
    MigrationState,
    forced_cut,
    merge,
    migration_state,
)
from tidemq.formats.logical_migration import plan_commit as commit_at

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["LeaderUnreachable", "LogicalQueueAdmin", "MigrationStep", "plan_commit",
           "plan_create", "plan_migration", "plan_resize", "writable"]

#: ``(step, done_now, mapping)`` -- step is "synced", "planned", "sealed" or "committed";
#: done_now is False when a resumed migration found the step already done. "synced" is
#: heard only when brokers held older copies and were brought up to date.
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
    epoch = _epoch()
    return TopicMapping(topic, epoch, queues, epoch)


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
    return commit_at(mapping, lq, _epoch(mapping.epoch))


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
    return TopicMapping(work.topic, _epoch(mapping.epoch), work.queues, mapping.created)


class LeaderUnreachable(TideMQError):
    """The broker holding a logical queue's open segment could not be asked to seal it."""

    def __init__(self, message: str, broker: str) -> None:
        super().__init__(message)
        self.broker = broker


class PushReport:
    """Which brokers took a mapping and which could not be reached."""

    def __init__(self) -> None:
        self.reached: list[str] = []
        self.missed: dict[str, str] = {}  # broker name -> why


class LogicalQueueAdmin:
    def __init__(self, admin: AdminClient, cluster: str | None = None) -> None:
        self.admin = admin
        self.cluster = cluster
        #: brokers the last operation could not reach (they catch up from their peers)
        self.missed: dict[str, str] = {}
        #: per topic, ``(broker, queueId) -> end`` the brokers last read know of
        self.ends: dict[str, dict[tuple[str, int], int]] = {}

    async def _brokers(self) -> dict[str, str]:
        return await self.admin.masters(self.cluster)

    async def _push(self, mapping: TopicMapping, brokers: dict[str, str], *,
                    force: bool = False, first: str | None = None,
                    only: set[str] | None = None, stale_ok: bool = True) -> PushReport:
        """To every broker (or those in ``only``), ``first`` (a name) before the others.
        An unreachable broker does not stop the others; the report says who missed it.
        A broker that refuses the copy as older counts as reached when its own copy knows
        every fact of it (``stale_ok``: a step of this tool's own, which a peer that took
        it first may have synced and moved on from) and otherwise stops the push."""
        body = json.dumps(mapping.to_json()).encode()
        ext = {"brokerAddrs": json.dumps(brokers, sort_keys=True)}
        if force:
            ext["force"] = "true"
        report = PushReport()
        for name in sorted(brokers, key=lambda n: (n != first, n)):
            if only is not None and name not in only:
                continue
            try:
                await self.admin._broker(brokers[name], RemotingCommand.request(
                    RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, ext, body))
            except BrokerResponseError:
                # It answered and refused: not a broker that will catch up, unless it
                # moved past this copy already (a peer that took it first synced it, and
                # it committed the migration the copy completes: a newer epoch).
                if not stale_ok or not await self._knows(brokers[name], mapping):
                    raise
            except TideMQError as exc:
                report.missed[name] = str(exc)
                self.missed[name] = str(exc)
                continue
            report.reached.append(name)
            self.missed.pop(name, None)
        return report

    async def _knows(self, addr: str, mapping: TopicMapping) -> bool:
        """Whether the broker at ``addr`` holds a copy of the same incarnation of the
        topic that knows every fact of ``mapping`` (a newer incarnation would win a merge
        whole, though it knows nothing of this one)."""
        try:
            resp = await self.admin._broker(addr, RemotingCommand.request(
                RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": mapping.topic}))
            held = TopicMapping.from_json(json.loads(resp.full_body()))
            return held.created == mapping.created and merge(held, mapping) == held
        except (TideMQError, ValueError, KeyError, TypeError):
            return False

    async def _seal(self, mapping: TopicMapping, lq: int, broker: str,
                    addrs: dict[str, str]) -> TopicMapping:
        """SEAL_LOGICAL_QUEUE on the broker holding the open segment, carrying ``mapping``
        (so the broker knows the pending segment even if it missed that push); the sealed
        mapping. Only that broker knows the exact end: when it cannot be reached this
        raises :class:`LeaderUnreachable` (the mapping is left as planned)."""
        addr = addrs.get(broker)
        topic = mapping.topic
        hint = ("restart it and run the operation again, or, if it is dead, run it with "
                "--force to cut the queue where the other brokers know it reached")
        if addr is None:
            raise LeaderUnreachable(f"broker {broker}, which holds the open segment of "
                                    f"{topic}/{lq}, is not registered (live: {sorted(addrs)}); "
                                    f"{hint}", broker)
        try:
            resp = await self.admin._broker(addr, RemotingCommand.request(
                RequestCode.SEAL_LOGICAL_QUEUE, {"topic": topic, "lq": str(lq)},
                json.dumps(mapping.to_json()).encode()))
        except BrokerResponseError as exc:
            raise TideMQError(f"sealing {topic}/{lq} on {broker} was refused ({exc})") from exc
        except TideMQError as exc:
            raise LeaderUnreachable(f"sealing {topic}/{lq} on {broker} failed ({exc}); {hint}",
                                    broker) from exc
        return TopicMapping.from_json(json.loads(resp.full_body()))

    async def _seal_or_cut(self, mapping: TopicMapping, lq: int, broker: str,
                           addrs: dict[str, str], force: bool, wait: float,
                           margin: int = 0) -> TopicMapping:
        """The seal; with ``force``, a leader that stays unreachable for ``wait`` seconds
        is cut out instead: its segment sealed ``margin`` offsets past the highest end a
        reachable broker knows it reached (at least its start), pushed to every broker
        reached."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return await self._seal(mapping, lq, broker, addrs)
            except LeaderUnreachable:
                if not force or time.monotonic() >= deadline:
                    if not force:
                        raise
                    break
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            addrs = await self._brokers()
        live = {n: a for n, a in addrs.items() if n != broker}
        mapping, _ = await self.merged(mapping.topic, live)  # the newest ends, too
        leader = mapping.leader(lq)
        if leader is None or leader.broker != broker:
            return mapping  # sealed meanwhile (the broker came back)
        end = self.ends.get(mapping.topic, {}).get((broker, leader.queue_id), -1)
        end = max(end, leader.physical_start) + max(margin, 0)
        cut = forced_cut(mapping, lq, end, _epoch(mapping.epoch))
        await self._push(cut, live)
        return cut

    async def copies(self, topic: str, addrs: dict[str, str]
                     ) -> dict[str, TopicMapping | None]:
        """Each reachable broker's copy of ``topic``'s mapping (None: it holds none)."""
        out: dict[str, TopicMapping | None] = {}
        for name, addr in sorted(addrs.items()):
            try:
                resp = await self.admin._broker(addr, RemotingCommand.request(
                    RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": topic}))
            except BrokerResponseError:
                out[name] = None  # reachable, holds no copy
                continue
            except TideMQError as exc:
                self.missed[name] = str(exc)
                continue
            out[name] = TopicMapping.from_json(json.loads(resp.full_body()))
            ends = self.ends.setdefault(topic, {})
            for key, end in decode_ends(resp.ext_fields.get("ends")).items():
                ends[key] = max(end, ends.get(key, -1))
        return out

    async def merged(self, topic: str, addrs: dict[str, str] | None = None
                     ) -> tuple[TopicMapping, set[str]]:
        """Every reachable copy merged, and the brokers whose copy differs from it. Reads
        only: nothing is pushed."""
        addrs = addrs if addrs is not None else await self._brokers()
        copies = await self.copies(topic, addrs)
        held = [m for m in copies.values() if m is not None]
        if not held:
            raise TideMQError(f"{topic} has no logical-queue mapping on any broker")
        truth = held[0]
        try:
            for m in held[1:]:
                truth = merge(truth, m)
        except MappingConflict as exc:
            raise TideMQError(f"the brokers' copies of {topic} conflict ({exc}); push the "
                              "right one with updateLogicalQueueMapping --force") from None
        # A broker holding no copy is not behind: it may have missed a delete.
        return truth, {n for n, m in copies.items() if m is not None and m != truth}

    async def converge(self, topic: str, addrs: dict[str, str] | None = None,
                       on_step: MigrationStep | None = None) -> TopicMapping:
        """Every copy merged; brokers whose copy differs get the merged one."""
        addrs = addrs if addrs is not None else await self._brokers()
        truth, behind = await self.merged(topic, addrs)
        if behind:
            report = await self._push(truth, addrs, only=behind)
            if report.reached and on_step is not None:
                on_step("synced", True, truth)
        return truth

    async def query(self, topic: str, *, repair: bool = False) -> TopicMapping:
        """The mapping of ``topic``: every broker's copy merged. Read-only unless
        ``repair``, which also pushes the merged copy to the brokers whose copy was behind
        (what ``migrate`` and ``resize`` do first)."""
        if repair:
            return await self.converge(topic)
        truth, _ = await self.merged(topic)
        return truth

    async def create(self, topic: str, total: int, brokers: list[str] | None = None
                     ) -> TopicMapping:
        addrs = await self._brokers()
        names = sorted(brokers or addrs)
        mapping = plan_create(topic, total, names)
        report = await self._push(mapping, addrs)
        if any(n in report.missed for n in names):
            raise TideMQError(f"creating {topic}: brokers {sorted(report.missed)} were not "
                              f"reached ({'; '.join(report.missed.values())})")
        return mapping

    async def update(self, mapping: TopicMapping, *, force: bool = False) -> None:
        """Push ``mapping`` to every broker; ``force`` lets it replace a newer epoch."""
        report = await self._push(mapping, await self._brokers(), force=force,
                                  stale_ok=False)  # given by hand: a stale one is refused
        if not report.reached:
            raise TideMQError(f"no broker took the mapping of {mapping.topic}: "
                              f"{'; '.join(report.missed.values())}")

    async def migrate(self, topic: str, lq: int, target: str,
                      on_step: MigrationStep | None = None, *, force: bool = False,
                      wait: float = 10.0, margin: int = 0) -> TopicMapping:
        """Move ``lq``'s writes to ``target``; resumable (see the module docstring).
        ``on_step`` hears of each step, done now or found done. ``force``: an old leader
        unreachable for ``wait`` seconds is cut out (the module docstring), ``margin``
        offsets past its known end (reserved for what it acknowledged unseen)."""
        def step(name: str, now: bool, m: TopicMapping) -> None:
            if on_step is not None:
                on_step(name, now, m)

        addrs = await self._brokers()
        if target not in addrs:
            raise TideMQError(f"no broker {target!r} in the cluster (its brokers: "
                              f"{', '.join(sorted(addrs))})")
        mapping = await self.converge(topic, addrs, on_step)
        if lq not in mapping.queues:
            raise TideMQError(f"{topic} has no logical queue {lq}")
        pending = mapping.pending(lq)
        if pending is not None and pending.broker != target:
            raise TideMQError(f"{topic}/{lq} has a migration to {pending.broker} pending: "
                              f"finish it first (migrate to {pending.broker} again)")
        state = migration_state(mapping, lq, target)
        if state is MigrationState.IDLE:
            planned = plan_migration(mapping, lq, target)
            if planned is None:
                raise TideMQError(f"{topic}/{lq} has no open segment to migrate")
            await self._push(planned, addrs)
            mapping = planned
        step("planned", state is MigrationState.IDLE, mapping)
        leader = mapping.leader(lq)
        sealing = migration_state(mapping, lq, target) is MigrationState.PLANNED
        if sealing and leader is not None:
            mapping = await self._seal_or_cut(mapping, lq, leader.broker, addrs, force, wait,
                                              margin)
        step("sealed", sealing, mapping)
        committed = plan_commit(mapping, lq)
        if committed is not mapping:
            # The new leader first: the brokers forwarding the sends held since the seal
            # find it already accepting them.
            await self._push(committed, addrs, first=target)
        elif sealing:  # committed by a broker meanwhile: everyone gets the sealed facts
            await self._push(mapping, addrs, first=target)
        step("committed", committed is not mapping, committed)
        return committed

    async def resize(self, topic: str, total: int) -> TopicMapping:
        """``total`` writable LQs: re-open or add below it, seal (decrease) at or above
        it. A sealed LQ stays readable, and its id is never reused by another queue."""
        addrs = await self._brokers()
        mapping = await self.converge(topic, addrs)
        grown = plan_resize(mapping, total, sorted(addrs))
        if grown is not mapping:
            await self._push(grown, addrs)
            mapping = grown
        for lq in range(total, mapping.total):  # seal the tail: readable, no more writes
            leader = mapping.leader(lq)
            if leader is not None:
                mapping = await self._seal(mapping, lq, leader.broker, addrs)
                await self._push(mapping, addrs)  # the next seal must see this one
        return mapping

    async def delete(self, topic: str) -> None:
        missed: dict[str, str] = {}
        for name, addr in (await self._brokers()).items():
            try:
                await self.admin._broker(addr, RemotingCommand.request(
                    RequestCode.DELETE_LOGICAL_QUEUE_MAPPING, {"topic": topic}))
            except TideMQError as exc:
                missed[name] = str(exc)
        if missed:
            raise TideMQError(f"deleting the mapping of {topic}: brokers {sorted(missed)} "
                              f"were not reached ({'; '.join(missed.values())})")
