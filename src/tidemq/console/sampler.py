"""The console's background sampler: every ``interval`` seconds, each group's lag and
each topic's put and get rates go into the :class:`~tidemq.console.history.History`,
whether or not anyone is looking at a page.

================  =========================================================================
series key        value
================  =========================================================================
``lag:<group>``   messages behind: the sum over its queues of broker offset - committed
``put:<topic>``   messages stored per second: the growth of the sum of its queues' max
                  offsets since the previous round, over the time between the rounds
``get:<topic>``   messages consumed per second: the growth of the sum of every group's
                  committed offsets of the topic, likewise (a reset backwards counts 0)
================  =========================================================================

A round asks every master for its topic configs (21), the groups' configs (201) and
offset tables (43), then each user topic's stats (202) and each user group's consume
stats (208), at most ``FAN_OUT`` at a time; system topics and groups are left out. A
round waits for the brokers one interval (or one request timeout, if longer) at most
(:mod:`tidemq.client.request_deadline`): while a master does not answer, no lag is
recorded (a group's sum would miss its queues there) and the rates of the topics it
holds keep their baseline, while the topics held by the others go on being sampled. A
round that fails is logged and the next one starts on time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable
from typing import TypeVar

from tidemq.client import AdminClient, monitor
from tidemq.client.monitor import ConsumeStats, TopicStats
from tidemq.client.request_deadline import Deadline, request_deadline
from tidemq.console.history import History
from tidemq.console.model import is_system_group, is_system_topic
from tidemq.net.tasks import cancel_and_wait

__all__ = ["Sampler"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Concurrent requests in one round.
FAN_OUT = 8


async def _bounded(calls: Iterable[Awaitable[T]]) -> list[T | BaseException]:
    sem = asyncio.Semaphore(FAN_OUT)

    async def one(call: Awaitable[T]) -> T:
        async with sem:
            return await call

    return await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)


class Sampler:
    def __init__(self, admin: AdminClient, history: History, interval: float) -> None:
        self.admin = admin
        self.history = history
        self.interval = interval
        #: Rounds completed (successfully or not) since start.
        self.rounds = 0
        self._round_done = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._totals: dict[str, tuple[int, int]] = {}  # key -> (epoch ms, running total)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tidemq-console-sampler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def wait_rounds(self, n: int) -> None:
        """Until ``n`` more rounds have completed."""
        target = self.rounds + n
        async with self._round_done:
            await self._round_done.wait_for(lambda: self.rounds >= target)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                await self.sample()
            except Exception as exc:  # the cluster may be away: try again next round
                log.info("console sampling round failed: %s", exc)
            self.rounds += 1
            async with self._round_done:
                self._round_done.notify_all()
            await asyncio.sleep(max(0.0, self.interval - (loop.time() - began)))

    async def sample(self) -> None:
        """One round, under one deadline (the interval, or a request's timeout when
        that is longer): a broker that does not answer costs the round one wait, and the
        figures that do not depend on it are kept."""
        seconds = max(self.interval, self.admin.config.request_timeout)
        with request_deadline(seconds) as scope:
            await self._sample(scope)

    async def _sample(self, scope: Deadline) -> None:
        admin = self.admin
        masters = await admin.masters()
        configs, committed, wrappers = await asyncio.gather(
            monitor.subscription_groups(admin), monitor.committed_groups(admin),
            asyncio.gather(*(monitor.topic_configs(admin, a) for a in masters.values()),
                           return_exceptions=True))
        brokers = set(masters)
        holders: dict[str, list[str]] = {}
        for addr, wrapper in zip(masters.values(), wrappers, strict=True):
            if isinstance(wrapper, BaseException):
                if not scope.excuses(wrapper):
                    raise wrapper
                continue
            for topic in wrapper.topic_config_table:
                if not is_system_topic(topic, (), brokers):
                    holders.setdefault(topic, []).append(addr)
        groups = sorted(g for g in set(configs) | set(committed) if not is_system_group(g))
        topic_stats, group_stats = await asyncio.gather(
            _bounded(monitor.topic_stats(admin, t, addresses=a) for t, a in holders.items()),
            _bounded(monitor.consume_stats(admin, g) for g in groups))
        now = int(time.time() * 1000)
        # With a master unanswered, a group's lag may miss the queues it holds (whose
        # topics a group may have without any other master knowing): no lag this round.
        # A topic held only by masters that answered keeps its rates.
        complete = not scope.unanswered
        consumed: dict[str, int] = {}
        for group, stats in zip(groups, group_stats, strict=True):
            if isinstance(stats, ConsumeStats):
                if complete:
                    self.history.add(f"lag:{group}", now, stats.lag)
                for q in stats.queues:
                    consumed[q.topic] = consumed.get(q.topic, 0) + q.consumer_offset
        seen: set[str] = set()
        for topic, tstats in zip(holders, topic_stats, strict=True):
            if any(a in scope.unanswered for a in holders[topic]):
                seen.update((f"put:{topic}", f"get:{topic}"))  # keep its baseline
                continue
            if isinstance(tstats, TopicStats):
                seen.update((f"put:{topic}", f"get:{topic}"))
                self._rate(f"put:{topic}", now, sum(q.max_offset for q in tstats.queues))
                self._rate(f"get:{topic}", now, consumed.get(topic, 0))
        for gone in set(self._totals) - seen:  # deleted topics: keep the table bounded
            del self._totals[gone]

    def _rate(self, key: str, now: int, total: int) -> None:
        """Record the rate since the previous sample of ``key``. A round that comes within
        the history's ``min_gap_ms`` of that sample (rounds bunch up behind a slow one)
        records nothing and keeps the baseline: the next round's rate then covers both,
        where a sample replacing the last one would drop the messages of its interval."""
        before = self._totals.get(key)
        if before is not None and now - before[0] < max(1, self.history.min_gap_ms):
            return
        self._totals[key] = (now, total)
        if before is None:
            return
        per_second = max(0, total - before[1]) * 1000 / (now - before[0])
        self.history.add(key, now, per_second)
