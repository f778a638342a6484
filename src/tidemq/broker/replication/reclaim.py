"""A returning master takes back the progress its replicas recorded while it was down
(RocketMQ 5's reverse metadata sync, ``syncMetadataReverse``, with ``slaveActingMaster``).

While a group's master is down, consumers commit their offsets to a replica, and with
``slaveActingMaster`` the replica acting for the master delivers the delayed and timer
messages that fall due (to another group's master). A master that started again from
its own files would answer the older offsets (consumers get messages again) and deliver
those parked messages a second time. So a master with ``slaveActingMaster`` on, at
start, before it registers with the name servers (that is, before consumers are routed
to it) and before its delay service delivers anything:

1. asks the name servers which replicas of its group are listed
   (GET_BROKER_CLUSTER_INFO);
2. reads from each, with RocketMQ's request codes, the consumer offsets
   (GET_ALL_CONSUMER_OFFSET, 43) and the delay-level offsets with the timer checkpoint
   TideMQ adds to that body (GET_ALL_DELAY_OFFSET, 45), and with LMQ on the light message
   queues' consumer offsets (TideMQ's GET_LMQ_METADATA, 20201, page by page);
3. merges them into its own (:mod:`~tidemq.broker.replication.progress_merge`: offsets
   only move forward, the later timer checkpoint wins whole) and writes them to disk;
4. when that raised the transaction checker's progress (group ``CID_RMQ_SYS_TRANS``:
   the replica acting for it handed half messages to another group's master,
   :mod:`~tidemq.broker.transaction_escape`), holds again only the open transactions
   past it (:meth:`~tidemq.broker.half_queue.HalfQueue.rebuild`), so that it neither
   checks nor commits those a second time.

A replica that does not answer within :data:`REQUEST_TIMEOUT` is skipped (logged), and
the whole step is bounded by :data:`RECLAIM_TIMEOUT`: the master then starts with what
it has, and the replica carries the offsets it took at its next metadata copy
(:mod:`~tidemq.broker.replication.carried_offsets`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from tidemq.broker.cluster_info import ask_cluster
from tidemq.broker.context import BrokerContext
from tidemq.broker.half_queue import PROGRESS_GROUP
from tidemq.broker.offset_json import load_offset_json
from tidemq.broker.replication.progress_merge import (
    newer_timer,
    raised_levels,
    raised_offsets,
)
from tidemq.broker.timers import TimerCheckpoint
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, TideMQError
from tidemq.store.lmq_store import LMQ_PREFIX, LmqStore

__all__ = ["RECLAIM_TIMEOUT", "REQUEST_TIMEOUT", "ProgressReclaim", "parse_delay_progress",
           "parse_lmq_offsets", "parse_lmq_tombstones", "parse_offset_table"]

log = logging.getLogger(__name__)

#: Seconds one request to a replica may take.
REQUEST_TIMEOUT = 3.0
#: Seconds the whole step may take before the master starts without the rest.
RECLAIM_TIMEOUT = 10.0


class BadProgress(ValueError):
    """A replica's progress table that is not what its request code answers."""

    def __init__(self, replica: str, what: str) -> None:
        super().__init__(f"{replica}: {what}")
        self.replica = replica
        self.what = what


def _count(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(f"{value!r} is negative")
    return number


def parse_offset_table(raw: Any) -> dict[str, dict[int, int]]:
    """``{"offsetTable": {"topic@group": {"0": 42}}}`` as ``{"topic@group": {0: 42}}``;
    raises ``ValueError`` saying what is wrong."""
    if not isinstance(raw, dict) or not isinstance(raw.get("offsetTable", {}), dict):
        raise ValueError("the body is not {\"offsetTable\": {...}}")
    out: dict[str, dict[int, int]] = {}
    for key, queues in raw.get("offsetTable", {}).items():
        if "@" not in key or not isinstance(queues, dict):
            raise ValueError(f"{key[:64]!r} is not topic@group with a queue table")
        out[key] = {_count(q): _count(o) for q, o in queues.items()}
    return out


def parse_lmq_offsets(raw: Any) -> tuple[list[tuple[str, str, int]], bool]:
    """A GET_LMQ_METADATA page of consumer offsets, ``{"rows": [[lmq, group, offset],
    ...], "more": bool}``: its rows and whether more follow; raises ``ValueError``
    saying what is wrong."""
    try:
        rows = [(str(name), str(group), _count(offset)) for name, group, offset in raw["rows"]]
        return rows, bool(raw["more"])
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"GET_LMQ_METADATA: not a page of offsets ({exc})") from None


def parse_lmq_tombstones(raw: Any) -> tuple[list[tuple[str, int]], bool]:
    """A GET_LMQ_METADATA page of tombstones, ``{"rows": [[lmq, floor], ...], "more":
    bool}``: its rows and whether more follow; raises ``ValueError`` saying what is
    wrong."""
    try:
        rows = [(str(name), _count(floor)) for name, floor in raw["rows"]]
        return rows, bool(raw["more"])
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"GET_LMQ_METADATA: not a page of tombstones ({exc})") from None


def parse_delay_progress(raw: Any) -> tuple[dict[int, int], TimerCheckpoint | None]:
    """GET_ALL_DELAY_OFFSET's body: the level offsets and the timer checkpoint (``None``
    when absent, as from a Java broker)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("offsetTable", {}), dict):
        raise ValueError("the body is not {\"offsetTable\": {...}}")
    levels = {_count(k): _count(v) for k, v in raw.get("offsetTable", {}).items()}
    timer = raw.get("timerCheckpoint")
    if timer is None:
        return levels, None
    checkpoint = TimerCheckpoint.from_json(timer)
    if checkpoint.to_json() != timer:
        raise ValueError(f"timerCheckpoint {str(timer)[:64]} is not a timer checkpoint")
    return levels, checkpoint


def _json(addr: str, code: int, body: bytes,
          loads: Callable[[bytes], Any] = json.loads) -> Any:
    try:
        return loads(body)
    except ValueError as exc:
        raise BadProgress(addr, f"request code {code}: the body is not JSON ({exc})") \
            from None


def _raised_offsets(addr: str, body: bytes, mine: Mapping[str, Mapping[int, int]]
                    ) -> dict[tuple[str, int], int]:
    """The replica's GET_ALL_CONSUMER_OFFSET body, decoded a key at a time, and its
    offsets higher than ``mine`` (on a thread: thousands of groups take a while, and the
    loop serves on meanwhile; ``mine`` is only looked up, a key at a time)."""
    raw = _json(addr, RequestCode.GET_ALL_CONSUMER_OFFSET, body, load_offset_json)
    try:
        table = parse_offset_table(raw)
    except ValueError as exc:
        raise BadProgress(addr, str(exc)) from None
    return raised_offsets(mine, table)


def _raised_lmq_offsets(addr: str, body: bytes, lmq: LmqStore
                        ) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]], bool]:
    """A page of the replica's LMQ consumer offsets (on a thread, a row at a time): its
    rows, those higher than this broker's, and whether more follow."""
    page = _json(addr, RequestCode.GET_LMQ_METADATA, body)
    try:
        rows, more = parse_lmq_offsets(page)
    except ValueError as exc:
        raise BadProgress(addr, str(exc)) from None
    raised = [(name, group, offset) for name, group, offset in rows
              if name.startswith(LMQ_PREFIX) and _higher(lmq, name, group, offset)]
    return rows, raised, more


def _higher(lmq: LmqStore, name: str, group: str, offset: int) -> bool:
    have = lmq.committed_offset(group, name)
    return have is None or offset > have


class ProgressReclaim:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        #: Consumer offsets and delay levels raised, and timer checkpoints taken, so far.
        self.offsets_raised = 0
        self.levels_raised = 0
        self.timers_taken = 0
        self.lmq_offsets_raised = 0
        #: Whether a replica's transaction-check progress was taken.
        self.transactions_taken = False

    async def replicas(self) -> list[str]:
        """The addresses of the replicas of this broker's group the name servers list."""
        info = await ask_cluster(self.ctx, "which replicas hold progress to take back?")
        if info is None:
            log.warning("no name server answered: this master starts without taking back "
                        "its replicas' progress")
            return []
        group = info.broker_addr_table.get(self.ctx.config.broker_name)
        if group is None:
            return []
        return [addr for broker_id, addr in sorted(group.broker_addrs.items())
                if broker_id != 0 and addr and addr != self.ctx.broker_addr]

    async def run(self) -> None:
        """Take back what every listed replica recorded; failures are logged."""
        for addr in await self.replicas():
            try:
                await self.take_from(addr)
            except (TideMQError, ValueError) as exc:
                log.warning("taking back the progress of replica %s failed: %s", addr, exc)
        if self.transactions_taken:
            open_now = self.ctx.transactions.rebuild()
            log.info("took back the transaction checks a replica made: %d transactions "
                     "open here", open_now)

    async def _body(self, addr: str, code: int, ext: dict[str, str] | None = None) -> bytes:
        resp = await self.ctx.client.request(addr, RemotingCommand.request(code, ext),
                                             REQUEST_TIMEOUT)
        if resp.code != ResponseCode.SUCCESS:
            raise TideMQError(f"request code {code}: answer {resp.code} {resp.remark}")
        return resp.full_body()

    async def take_from(self, addr: str) -> None:
        """Read ``addr``'s progress, merge what is further than this broker's, persist.
        The consumer offsets (thousands of groups' worth) are decoded and compared on a
        thread; each one found higher is compared again as it is committed."""
        ctx = self.ctx
        offsets = await asyncio.to_thread(
            _raised_offsets, addr, await self._body(addr, RequestCode.GET_ALL_CONSUMER_OFFSET),
            ctx.offsets.table)
        try:
            levels, timer = parse_delay_progress(_json(addr, RequestCode.GET_ALL_DELAY_OFFSET,
                                                       await self._body(
                                                           addr, RequestCode.GET_ALL_DELAY_OFFSET)))
        except BadProgress:
            raise
        except ValueError as exc:
            raise BadProgress(addr, str(exc)) from None
        schedule = ctx.schedule
        # decide
        offsets = {(key, queue_id): offset for (key, queue_id), offset in offsets.items()
                   if offset > ctx.offsets.table.get(key, {}).get(queue_id, -1)}
        raised = raised_levels(schedule.offsets, levels)
        taken = newer_timer(schedule.timer_progress(), timer) if timer is not None else None
        # then write
        for (key, queue_id), offset in offsets.items():
            topic, _, group = key.partition("@")
            ctx.offsets.commit(group, topic, queue_id, offset)
        await asyncio.to_thread(ctx.offsets.persist)
        if raised:
            schedule.adopt_offsets(raised)
        if taken is not None:
            schedule.adopt_timer(taken)
        self.transactions_taken |= any(key.endswith("@" + PROGRESS_GROUP)
                                       for key, _ in offsets)
        self.offsets_raised += len(offsets)
        self.levels_raised += len(raised)
        self.timers_taken += taken is not None
        log.info("took back from replica %s: %d consumer offsets, %d delay levels%s",
                 addr, len(offsets), len(raised),
                 ", its timer checkpoint" if taken is not None else "")
        if ctx.store.lmq is not None:
            await self._take_lmq_offsets(addr)

    async def _take_lmq_offsets(self, addr: str) -> None:
        """The replica's LMQ consumer offsets, page by page, each higher one committed
        here as it is read (offsets only move forward: a page taken before the step's
        time ran out stays taken)."""
        lmq = self.ctx.store.lmq
        assert lmq is not None
        ext: dict[str, str] = {"kind": "offsets"}
        raised = 0
        while True:
            rows, higher, more = await asyncio.to_thread(
                _raised_lmq_offsets, addr,
                await self._body(addr, RequestCode.GET_LMQ_METADATA, ext), lmq)
            for name, group, offset in higher:
                if _higher(lmq, name, group, offset):  # again: a commit may have come since
                    lmq.commit_offset(group, name, offset)
                    raised += 1
            if not more or not rows:
                break
            ext = {"kind": "offsets", "afterLmq": rows[-1][0], "afterGroup": rows[-1][1]}
        self.lmq_offsets_raised += raised
        log.info("took back from replica %s: %d LMQ consumer offsets", addr, raised)

