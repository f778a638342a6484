"""Logical queues (RIP-21) on a three-broker in-process cluster: the proposal's scenarios
(a)-(f) under continuous produce and consume load, plus stale routes, crashes between
migration steps and plain (logic-unaware) remoting clients.

Every scenario asserts: every acknowledged send is consumed exactly once, in logical
order per queue (offsets 0..n-1 with no gap); the set of queues clients see never
changes (no rebalance); the mapping table reads as the proposal's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidemq.client import AdminClient, Producer, PullConsumer
from tidemq.client.logical_admin import LogicalQueueAdmin, plan_migration
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import TideMQError
from tidemq.formats.logical_mapping import SegmentState, TopicMapping
from tidemq.net import RemotingClient
from tidemq.testing import Cluster
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue

TOPIC = "Orders"
N = 4


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=3) as c:
        yield c


async def logical_route(admin: AdminClient, n: int = N) -> tuple[int, int, str]:
    """Wait for the placeholder route; returns (read queues, write queues, gateway)."""
    for _ in range(200):
        with contextlib.suppress(Exception):
            r = await admin.topic_route(TOPIC)
            qd = r.queue_datas
            if qd and qd[0].broker_name == LOGICAL_BROKER and qd[0].read_queue_nums == n:
                return qd[0].read_queue_nums, qd[0].write_queue_nums, \
                    r.broker_datas[0].broker_addrs[0]
        await asyncio.sleep(0.02)
    raise AssertionError("the logical route never appeared")


@dataclass
class Load:
    """Continuous sends to every logical queue and a consumer reading them all."""

    cluster: Cluster
    acked: dict[int, dict[int, bytes]] = field(default_factory=dict)
    consumed: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    running: bool = True
    sent: int = 0
    #: a failed send is counted, not raised (a broker is down); the check then only asks
    #: that every acknowledged message is consumed exactly once, at its offset
    tolerant: bool = False
    failed: int = 0

    async def produce(self) -> None:
        producer = Producer("lq-producer", self.cluster.namesrv_addr)
        await producer.start()
        try:
            while self.running:
                lq = self.sent % N
                body = f"m{self.sent}".encode()
                self.sent += 1
                try:
                    res = await producer.send(Message(TOPIC, body),
                                              queue=MessageQueue(TOPIC, LOGICAL_BROKER, lq))
                except TideMQError:
                    if not self.tolerant:
                        raise
                    self.failed += 1
                    continue
                self.acked.setdefault(res.queue.queue_id, {})[res.queue_offset] = body
                await asyncio.sleep(0.002)
        finally:
            await producer.close()

    async def consume(self, stop: asyncio.Event) -> None:
        consumer = PullConsumer("lq-consumer", self.cluster.namesrv_addr)
        await consumer.start()
        queues = [MessageQueue(TOPIC, LOGICAL_BROKER, i) for i in range(N)]
        consumer.assign(queues)
        for q in queues:
            consumer.seek(q, 0)
        try:
            while not stop.is_set() or self.behind():
                for m in await consumer.poll(timeout=0.2):
                    self.consumed.setdefault(m.queue_id, []).append((m.queue_offset, m.body))
                if stop.is_set() and not self.behind():
                    break
        finally:
            await consumer.close()

    def behind(self) -> bool:
        if self.tolerant:  # unacknowledged sends may be stored too: wait for the acked
            got = {lq: {o for o, _ in v} for lq, v in self.consumed.items()}
            return any(not set(offs) <= got.get(lq, set())
                       for lq, offs in self.acked.items())
        return sum(len(v) for v in self.acked.values()) > sum(
            len(v) for v in self.consumed.values())

    def check(self) -> None:
        for lq in range(N):
            acked = self.acked.get(lq, {})
            got = self.consumed.get(lq, [])
            offsets = [o for o, _ in got]
            assert offsets == sorted(offsets), f"LQ {lq} out of order"
            assert offsets == list(range(len(offsets))), f"LQ {lq} has a gap or a duplicate"
            if self.tolerant:
                assert acked.items() <= dict(got).items(), f"LQ {lq}: an acked send is lost"
            else:
                assert dict(got) == acked, f"LQ {lq}: consumed != acknowledged"


@contextlib.asynccontextmanager
async def load(cluster: Cluster, *, tolerant: bool = False) -> AsyncIterator[Load]:
    state = Load(cluster, tolerant=tolerant)
    stop = asyncio.Event()
    producer = asyncio.ensure_future(state.produce())
    consumer = asyncio.ensure_future(state.consume(stop))
    try:
        await asyncio.sleep(0.3)
        yield state
        await asyncio.sleep(0.3)
    finally:
        state.running = False
        await producer
        stop.set()
        await asyncio.wait_for(consumer, 12)  # a reader stalled on a sealed segment fails
    state.check()
    assert state.sent > 20


async def create(admin: AdminClient, brokers: list[str] | None = None) -> TopicMapping:
    lqa = LogicalQueueAdmin(admin)
    mapping = await lqa.create(TOPIC, N, brokers)
    await logical_route(admin)
    return mapping


async def test_a_migrate_under_load_keeps_offsets_contiguous(cluster: Cluster,
                                                             admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    route_before = await logical_route(admin)
    lqa = LogicalQueueAdmin(admin)
    async with load(cluster):
        m = await lqa.migrate(TOPIC, 0, "broker-b")
        await asyncio.sleep(0.3)
    segs = m.queues[0]
    assert [s.state for s in segs] == [SegmentState.READONLY, SegmentState.NORMAL]
    assert segs[1].logical_start == segs[0].logical_end  # contiguous: 0..k-1 then k..
    assert segs[1].broker == "broker-b"
    assert await logical_route(admin) == route_before  # zero rebalances: same queue set
    table = m.table()
    assert table[0][0] == "broker-a" and table[0][3] == "READONLY"
    assert table[0][2].startswith("LogicalQueue(0, 0-")


async def test_b_expired_after_retention_then_c_reused(cluster: Cluster,
                                                       admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    m = await lqa.migrate(TOPIC, 0, "broker-b")  # (a) with no data: an empty old segment
    broker_a = next(b for b in cluster.brokers if b.config.broker_name == "broker-a")
    changed = broker_a.logical_processor.expire_segments()  # (b) nothing left to read
    assert changed and changed[0].queues[0][0].state is SegmentState.EXPIRED
    for _ in range(100):
        m = await lqa.query(TOPIC)
        if m.queues[0][0].state is SegmentState.EXPIRED:
            break
        await asyncio.sleep(0.02)
    m = await lqa.migrate(TOPIC, 0, "broker-a")  # (c) back: the expired queue is reused
    segs = m.queues[0]
    assert segs[-1].broker == "broker-a" and segs[-1].queue_id == segs[0].queue_id
    assert segs[-1].state is SegmentState.NORMAL


async def test_d_back_while_readonly_uses_a_new_queue_e_drain_f_add(
        cluster: Cluster, admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    async with load(cluster):
        await lqa.migrate(TOPIC, 0, "broker-b")
        await asyncio.sleep(0.2)
        m = await lqa.migrate(TOPIC, 0, "broker-a")  # (d) old one still readable
        segs = m.queues[0]
        assert len(segs) == 3 and segs[2].queue_id != segs[0].queue_id
        assert [s.state for s in segs[:2]] == [SegmentState.READONLY] * 2
        for lq in range(N):  # (e) drain broker-b: everything moves to broker-c
            leader = m.leader(lq)
            if leader is not None and leader.broker == "broker-b":
                m = await lqa.migrate(TOPIC, lq, "broker-c")
        assert all((m.leader(lq) or segs[0]).broker != "broker-b" for lq in range(N))
        added = await cluster.add_broker()  # (f) a new broker takes over queue 1
        await asyncio.sleep(0.2)
        m = await lqa.migrate(TOPIC, 1, added.config.broker_name)
        await asyncio.sleep(0.2)
    assert await logical_route(admin) is not None


async def test_resumes_after_an_admin_crash_between_steps(cluster: Cluster,
                                                          admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    async with load(cluster):
        planned = plan_migration(await lqa.query(TOPIC), 2, "broker-c")
        assert planned is not None
        await lqa.update(planned)  # the admin "crashed" after the planned step
        await asyncio.sleep(0.2)   # the LQ keeps its open segment meanwhile
        m = await lqa.migrate(TOPIC, 2, "broker-c")  # re-run: seals and commits
    assert m.leader(2) is not None and m.leader(2).broker == "broker-c"  # type: ignore[union-attr]
    assert m.pending(2) is None


async def test_decrease_seals_the_tail_queues(cluster: Cluster, admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    m = await lqa.resize(TOPIC, 2)
    assert m.leader(3) is None and m.leader(0) is not None
    for _ in range(200):
        _r, w, _g = await logical_route(admin)
        if w == 2:
            break
        await asyncio.sleep(0.02)
    assert w == 2  # producers see two writable queues, consumers still read four


async def test_a_plain_client_reads_and_writes_through_the_gateway(
        cluster: Cluster, admin: AdminClient) -> None:
    await create(admin, ["broker-b", "broker-c"])
    _r, _w, gateway = await logical_route(admin)
    lqa = LogicalQueueAdmin(admin)
    client = RemotingClient()
    try:
        ext = {"producerGroup": "plain", "topic": TOPIC, "defaultTopic": "TBW102",
               "defaultTopicQueueNums": "4", "queueId": "3", "sysFlag": "0",
               "bornTimestamp": "0", "flag": "0"}
        for i in range(5):
            r = await client.request(gateway, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, ext, f"p{i}".encode()), 3)
            assert r.code == 0 and r.ext_fields["queueOffset"] == str(i)
        await lqa.migrate(TOPIC, 3, "broker-a")
        r = await client.request(gateway, RemotingCommand.request(
            RequestCode.SEND_MESSAGE, ext, b"p5"), 3)
        assert r.code == 0 and r.ext_fields["queueOffset"] == "5"
        await asyncio.sleep(0.2)
        pull = {"consumerGroup": "plain-c", "topic": TOPIC, "queueId": "3",
                "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subVersion": "0"}
        bodies: list[bytes] = []
        offset = 0
        for _ in range(5):
            pull["queueOffset"] = str(offset)
            r = await client.request(gateway, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, pull), 3)
            if r.code == 0:
                msgs = decode_messages(r.body)
                assert [m.queue_id for m in msgs] == [3] * len(msgs)
                assert [m.queue_offset for m in msgs] == list(range(offset,
                                                                    offset + len(msgs)))
                bodies += [m.body for m in msgs]
            offset = int(r.ext_fields["nextBeginOffset"])
            if offset >= 6:
                break
        assert bodies == [f"p{i}".encode() for i in range(6)]
    finally:
        await client.close()
