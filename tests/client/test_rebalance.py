"""Rebalancing: the queue state table, plan_rebalance, members joining and leaving against
the fakes, and a group of push consumers on a real cluster with members joining, leaving
and being killed."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from tests.client.fakes import FakeBroker, FakeNameServer

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
    PushOptions,
    allocate_averagely,
    allocate_by_circle,
)
from tidemq.client.process_queue import ProcessQueue
from tidemq.client.rebalance import (
    TRANSITIONS,
    QueueEvent,
    QueueState,
    TopicView,
    initial_state,
    next_state,
    plan_rebalance,
)
from tidemq.errors import TideMQError
from tidemq.testing import Cluster

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
OK = ConsumeStatus.CONSUME_SUCCESS


def _q(topic: str, broker: str, qid: int) -> MessageQueue:
    return MessageQueue(topic, broker, qid)


# ---------------------------------------------------------------- the table


def test_every_state_is_reachable_and_released_is_final() -> None:
    for orderly in (False, True):
        seen = {initial_state(orderly)}
        frontier = list(seen)
        while frontier:
            state = frontier.pop()
            for (src, _event), dst in TRANSITIONS.items():
                if src is state and dst not in seen:
                    seen.add(dst)
                    frontier.append(dst)
        expected = set(QueueState) - (set() if orderly else {QueueState.LOCKING})
        assert seen == expected
    assert not [k for k in TRANSITIONS if k[0] is QueueState.RELEASED]
    # every owned state can be revoked; nothing but DRAINED ends a release
    for state in (QueueState.LOCKING, QueueState.STARTING, QueueState.ACTIVE):
        assert next_state(state, QueueEvent.REVOKED) is QueueState.RELEASING
    assert next_state(QueueState.RELEASING, QueueEvent.REVOKED) is None
    assert next_state(QueueState.RELEASING, QueueEvent.LOCKED) is None


def test_process_queue_follows_the_table() -> None:
    pq = ProcessQueue(_q("T", "b", 0), orderly=True)
    assert pq.state is QueueState.LOCKING
    assert not pq.fire(QueueEvent.STARTED)
    assert pq.fire(QueueEvent.LOCKED) and pq.fire(QueueEvent.STARTED) and pq.active
    assert pq.fire(QueueEvent.REVOKED) and pq.revoked.is_set() and pq.wakeup.is_set()
    assert not pq.fire(QueueEvent.REVOKED)
    assert not pq.released.is_set()
    assert pq.fire(QueueEvent.DRAINED) and pq.released.is_set()


# ---------------------------------------------------------------- deciding

QUEUES = [_q("T", b, i) for b in ("a", "b") for i in range(2)]


def test_plan_splits_adds_and_releases() -> None:
    views = {"T": TopicView(list(reversed(QUEUES)), ["c2", "c1", "c1"])}
    plan = plan_rebalance("g", "c1", allocate_averagely, views, owned=[], subscribed={"T"})
    assert plan.add == tuple(QUEUES[:2]) and plan.remove == () and plan.shared == {"T"}
    again = plan_rebalance("g", "c1", allocate_averagely, views, owned=QUEUES[:2],
                           subscribed={"T"})
    assert not again
    alone = plan_rebalance("g", "c1", allocate_averagely, {"T": TopicView(QUEUES, ["c1"])},
                           owned=QUEUES[:2], subscribed={"T"})
    assert alone.add == tuple(QUEUES[2:]) and alone.shared == frozenset()
    other = plan_rebalance("g", "c1", allocate_by_circle, views, owned=QUEUES[:2],
                           subscribed={"T"})
    assert (other.add, other.remove) == ((QUEUES[2],), (QUEUES[1],))


def test_plan_for_unsubscribed_missing_and_unknown() -> None:
    u = _q("U", "a", 0)
    # U unsubscribed: released; T has no view (lookup failed): kept as it is
    plan = plan_rebalance("g", "c1", allocate_averagely, {}, owned=[QUEUES[0], u],
                          subscribed={"T"})
    assert plan.add == () and plan.remove == (u,)
    # not in the broker's id list (not announced yet): takes nothing
    plan = plan_rebalance("g", "c9", allocate_averagely,
                          {"T": TopicView(QUEUES, ["c1"])}, owned=[QUEUES[3]],
                          subscribed={"T"})
    assert plan.remove == (QUEUES[3],) and plan.add == ()


def test_plan_rejects_a_strategy_that_invents_queues() -> None:
    def bad(group: str, cid: str, queues: object, clients: object) -> list[MessageQueue]:
        return [_q("T", "zz", 9)]

    with pytest.raises(ValueError, match="outside the topic"):
        plan_rebalance("g", "c1", bad, {"T": TopicView(QUEUES, ["c1"])}, owned=[],
                       subscribed={"T"})


# ---------------------------------------------------------------- members, on the fakes

FAST = PushOptions(rebalance_interval=5.0, persist_consumer_offset_interval=0.1,
                   handover_delay=0.0, lock_retry_interval=0.05)


@pytest.fixture
def fakes(namesrv: FakeNameServer, brokers: list[FakeBroker]) -> list[FakeBroker]:
    namesrv.add_topic("T", brokers, queues=2)
    namesrv.add_topic("%RETRY%cg", brokers, queues=1)
    return brokers


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition that no event reports (another member's assignment)."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def _ok(msgs: list[MessageExt]) -> ConsumeStatus:
    return OK


def _member(config: ClientConfig, name: str, listener: object = _ok,
            options: PushOptions = FAST, **kw: object) -> PushConsumer:
    cfg = dataclasses.replace(config, instance_name=name)
    consumer = PushConsumer("cg", config=cfg, listener=listener,  # type: ignore[arg-type]
                            options=options, consume_from=FIRST, **kw)  # type: ignore[arg-type]
    consumer.subscribe("T")
    return consumer


def _split_ok(members: list[PushConsumer]) -> bool:
    owned = [q for m in members for q in m.assignment() if q.topic == "T"]
    return sorted(owned) == sorted(QT) and all(
        any(q.topic == "T" for q in m.assignment()) for m in members)


QT = [_q("T", b, i) for b in ("broker-a", "broker-b") for i in range(2)]


async def test_members_split_and_take_over(fakes: list[FakeBroker],
                                           config: ClientConfig) -> None:
    c1 = _member(config, "c1")
    await c1.start()
    await eventually(lambda: _split_ok([c1]))
    changes = c1.rebalance_count
    c2 = _member(config, "c2")
    await c2.start()
    await eventually(lambda: _split_ok([c1, c2]))  # the notification made c1 give up half
    assert c1.rebalance_count > changes and c2.rebalance_count >= 1
    assert not set(c1.assignment()) & set(c2.assignment())
    assert fakes[0].notifications >= 2
    assert not await c1.rebalance()  # settled: asking again changes nothing
    await c2.close()
    await eventually(lambda: _split_ok([c1]))
    assert c1.rebalance_stats.runs >= c1.rebalance_stats.changes >= 3
    await c1.close()


async def test_a_queue_is_released_only_after_its_in_flight_work(
        fakes: list[FakeBroker], config: ClientConfig) -> None:
    b = fakes[1]
    busy = _q("T", "broker-b", 0)
    for i in range(3):
        await b.put("T", 0, f"b0:{i}".encode(), {})
    gate = asyncio.Event()
    started = asyncio.Event()
    got: dict[str, list[tuple[str, int, int]]] = {"c1": [], "c2": []}

    def listener(name: str) -> Callable[[list[MessageExt]], object]:
        async def listen(msgs: list[MessageExt]) -> ConsumeStatus:
            if name == "c1" and msgs[0].queue_offset == 1:
                started.set()
                await gate.wait()
            got[name].extend((m.broker_name, m.queue_id, m.queue_offset) for m in msgs)
            return OK
        return listen

    # no periodic commits: only the release commits; c2 waits 1 s before starting a queue
    options = dataclasses.replace(FAST, persist_consumer_offset_interval=60.0,
                                  handover_delay=1.0)
    c1 = _member(config, "c1", listener("c1"), options)
    await c1.start()
    await started.wait()  # broker-b queue 0: offset 0 done, offset 1 in flight
    c2 = _member(config, "c2", listener("c2"), options)
    await c2.start()
    # averagely over sorted ids: c1 keeps broker-a's queues, c2 takes broker-b's
    await eventually(lambda: busy not in c1.assignment() and busy in c2.assignment())
    [pq] = [p for p in c1._releasing if p.mq == busy]
    assert pq.state is QueueState.RELEASING and not pq.released.is_set()
    assert ("cg", "T", 0) not in b.offsets  # nothing committed while offset 1 is in flight
    gate.set()
    await pq.released.wait()
    assert b.offsets[("cg", "T", 0)] == 3  # 0 and 2 were done, 1 finished: all three
    await eventually(lambda: _split_ok([c1, c2]))
    await b.put("T", 0, b"b0:3", {})
    await eventually(lambda: ("broker-b", 0, 3) in got["c2"])
    await c2.close()
    await c1.close()
    handled = [e for e in got["c1"] + got["c2"] if e[:2] == ("broker-b", 0)]
    assert sorted(handled) == [("broker-b", 0, i) for i in range(4)]  # each exactly once


# ---------------------------------------------------------------- a group on a real cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=2) as running:
        yield running


class Ledger:
    """Who processed which message; a killed member's deliveries are remembered."""

    def __init__(self) -> None:
        self.by_member: dict[str, list[str]] = collections.defaultdict(list)
        self.changed = asyncio.Event()

    def listener(self, name: str, pause: float = 0.0
                 ) -> Callable[[list[MessageExt]], asyncio.Future[ConsumeStatus]]:
        async def listen(msgs: list[MessageExt]) -> ConsumeStatus:
            if pause:
                await asyncio.sleep(pause)  # keeps a batch in flight when a member dies
            self.by_member[name].extend(m.body.decode() for m in msgs)
            self.changed.set()
            return OK

        return listen  # type: ignore[return-value]

    def counts(self) -> collections.Counter[str]:
        return collections.Counter(itertools.chain.from_iterable(self.by_member.values()))

    async def wait_all(self, bodies: set[str], timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            while not bodies <= set(self.counts()):
                self.changed.clear()
                await self.changed.wait()


async def test_group_members_join_leave_and_die(cluster: Cluster) -> None:
    cfg = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=1.0,
                       pull_error_backoff=0.1, pull_batch_size=8)
    options = PushOptions(consume_batch_max_size=4, rebalance_interval=2.0,
                          persist_consumer_offset_interval=0.5, handover_delay=0.5)
    async with AdminClient(config=cfg) as admin:
        await admin.create_topic("Grp", read_queue_nums=4, write_queue_nums=4)
        await eventually_route(admin, "Grp")
    ledger = Ledger()
    members: dict[str, PushConsumer] = {}

    async def join(name: str, pause: float = 0.0) -> PushConsumer:
        consumer = PushConsumer("grp", config=dataclasses.replace(cfg, instance_name=name),
                                listener=ledger.listener(name, pause), options=options,
                                consume_from=FIRST)
        consumer.subscribe("Grp")
        await consumer.start()
        members[name] = consumer
        return consumer

    def settled(names: list[str]) -> Callable[[], bool]:
        def check() -> bool:
            owned = [q for n in names for q in members[n].assignment() if q.topic == "Grp"]
            return len(owned) == 8 and len(set(owned)) == 8 and all(
                any(q.topic == "Grp" for q in members[n].assignment()) for n in names)
        return check

    sent: set[str] = set()
    counter = itertools.count()
    async with Producer("grp-producer", config=cfg) as producer:

        async def send(n: int) -> set[str]:
            bodies = {f"m{next(counter)}" for _ in range(n)}
            for body in sorted(bodies):
                await producer.send(Message("Grp", body.encode()))
            sent.update(bodies)
            return bodies

        await join("c1")
        await join("c2")
        await eventually(settled(["c1", "c2"]), timeout=10)
        await ledger.wait_all(await send(60))

        await join("c3", pause=0.02)  # joins; c3 keeps batches in flight a little while
        await eventually(settled(["c1", "c2", "c3"]), timeout=10)
        await ledger.wait_all(await send(60))

        await members.pop("c2").close()  # leaves gracefully: commits, then unregisters
        await eventually(settled(["c1", "c3"]), timeout=10)
        await ledger.wait_all(await send(60))

        burst = asyncio.ensure_future(send(120))
        await eventually(lambda: len(ledger.by_member["c3"]) > 40)
        killed = members.pop("c3")
        await killed.abort()  # dies mid-batch: no commit, no unregister
        processed_by_killed = list(ledger.by_member["c3"])
        await burst
        await eventually(settled(["c1"]), timeout=10)
        await join("c4")
        await eventually(settled(["c1", "c4"]), timeout=10)
        await ledger.wait_all(await send(60))

    counts = ledger.counts()
    assert set(counts) == sent  # nothing lost
    duplicates = {body: n for body, n in counts.items() if n > 1}
    # at least once: only what the killed member had processed but not committed came
    # twice, and never more than twice
    assert set(duplicates) <= set(processed_by_killed)
    assert all(n == 2 for n in duplicates.values())
    assert len(duplicates) <= len(processed_by_killed)
    assert members["c1"].rebalance_count >= 4
    for consumer in members.values():
        await consumer.close()


async def eventually_route(admin: AdminClient, topic: str) -> None:
    async with asyncio.timeout(5):
        while True:
            try:
                route = await admin.topic_route(topic)
                if len(route.queue_datas) == 2:
                    return
            except TideMQError:  # the topic is not routed yet
                pass
            await asyncio.sleep(0.02)


async def test_a_route_change_triggers_a_rebalance(fakes: list[FakeBroker],
                                                   namesrv: FakeNameServer,
                                                   config: ClientConfig) -> None:
    cfg = dataclasses.replace(config, poll_name_server_interval=0.05)
    options = dataclasses.replace(FAST, rebalance_interval=60.0)  # no periodic help
    c1 = _member(cfg, "c1", options=options)
    await c1.start()
    await eventually(lambda: _split_ok([c1]))
    runs = c1.rebalance_stats.runs
    namesrv.add_topic("T", fakes, queues=3)  # one more queue per broker
    await eventually(lambda: len([q for q in c1.assignment() if q.topic == "T"]) == 6)
    assert c1.rebalance_stats.runs > runs
    await c1.close()


async def test_a_subscribed_topic_that_does_not_exist_is_warned_of_once(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """A push consumer subscribed to a topic nobody created (a typo) consumes nothing:
    it says so at WARNING, once, naming the topic, while it keeps looking for a route
    (the retry topic, routed only after the first heartbeat, is not warned of)."""
    cfg = ClientConfig(namesrv_addr=(cluster.namesrv_addr,))
    consumer = PushConsumer("typo-group", config=cfg, listener=_ok,
                            options=PushOptions(rebalance_interval=0.5))
    consumer.subscribe("Ordres")
    with caplog.at_level(logging.WARNING, logger="tidemq.client.rebalance"):
        await consumer.start()
        try:
            await eventually(lambda: consumer.rebalance_stats.runs >= 12, timeout=20)
        finally:
            await consumer.close()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert "Ordres" in warned[0] and "TOPIC_NOT_EXIST" in warned[0], warned
    assert "nothing of it is consumed" in warned[0], warned
