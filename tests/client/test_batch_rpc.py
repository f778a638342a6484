"""The client side of the batch protocol against real in-process brokers: coalesced
sends, pulls and commits, negotiation, and fall-back to one RPC per request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from tidemq.client.batch_rpc import BatchSupport, Support, batch_requester
from tidemq.client.instance import ClientInstance
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import GetMaxOffsetRequestHeader
from tidemq.errors import BrokerResponseError, ResponseCode, TideMQError
from tidemq.testing import Cluster

TOPIC = "Multi"
QUEUES = 8
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def config(cluster: Cluster, **kw: Any) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), request_timeout=5.0,
                        long_polling_timeout=kw.pop("long_polling_timeout", 1.0),
                        pull_error_backoff=0.05, **kw)


async def make_cluster(tmp_path: Path, **broker: Any) -> Cluster:
    cluster = await Cluster(tmp_path, broker=broker).start()
    async with AdminClient(config=config(cluster)) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        async with asyncio.timeout(10):  # the broker registers the new topic soon after
            while True:
                try:
                    route = await admin.instance.routes.get(TOPIC, refresh=True)
                    if len(route.subscribe_queues) == QUEUES:
                        break
                except TideMQError:
                    pass
                await asyncio.sleep(0.02)
    return cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await make_cluster(tmp_path)
    yield c
    await c.stop()


@pytest.fixture
async def legacy(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A broker without the feature, as a RocketMQ broker is."""
    c = await make_cluster(tmp_path, batch_protocol_enable=False)
    yield c
    await c.stop()


def queues(cluster: Cluster) -> list[MessageQueue]:
    return [MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)]


async def producer(cluster: Cluster, **kw: Any) -> Producer:
    p = Producer("pg", config=config(cluster, **kw))
    await p.start()
    return p


# ---------------------------------------------------------------- sends


async def test_send_multi_is_one_rpc_per_broker(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        rpc = batch_requester(p.instance)
        before = rpc.stats.rpcs
        items = [(Message(TOPIC, f"m{q}".encode()), mq) for q, mq in enumerate(queues(cluster))]
        results = await p.send_multi(items)
        assert [r.queue.queue_id for r in results] == list(range(QUEUES))
        assert all(r.queue_offset == 0 and r.msg_id for r in results)
        assert rpc.stats.rpcs - before == 1 and rpc.stats.parents == 1
        assert rpc.stats.children == QUEUES
        assert rpc.support.state(cluster.brokers[0].broker_addr) is Support.PRESENT
    finally:
        await p.close()


async def test_send_multi_reports_each_failure_in_place(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        good = queues(cluster)[:2]
        bad = MessageQueue(TOPIC, "broker-a", 500)  # beyond the topic's queues
        items = [(Message(TOPIC, b"a"), good[0]), (Message(TOPIC, b"b"), bad),
                 (Message(TOPIC, b"c"), good[1])]
        results = await p.send_multi(items, return_exceptions=True)
        assert isinstance(results[1], BrokerResponseError)
        assert results[1].code == ResponseCode.INVALID_PARAMETER
        assert [getattr(r, "queue_offset", None) for r in results] == [0, None, 0]
        with pytest.raises(BrokerResponseError):
            await p.send_multi(items)
    finally:
        await p.close()


async def test_concurrent_sends_are_coalesced_and_stay_in_order(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        mq = queues(cluster)[3]
        rpc = batch_requester(p.instance)
        results = await asyncio.gather(*(p.send(Message(TOPIC, str(i).encode()), queue=mq)
                                         for i in range(20)))
        assert [r.queue_offset for r in results] == list(range(20))
        assert rpc.stats.parents >= 1 and rpc.stats.children == 20
    finally:
        await p.close()


async def test_concurrent_batches_go_as_requests_of_their_own(cluster: Cluster) -> None:
    """Batches are not coalesced: in a parent each would wait for every other."""
    p = await producer(cluster)
    try:
        rpc = batch_requester(p.instance)
        results = await asyncio.gather(*(
            p.send_batch([Message(TOPIC, f"{mq.queue_id}:{i}".encode()) for i in range(3)],
                         queue=mq) for mq in queues(cluster)))
        assert [(r.queue.queue_id, r.queue_offset) for r in results] == [
            (q, 0) for q in range(QUEUES)]
        assert rpc.stats.parents == 0
    finally:
        await p.close()


async def test_a_lone_send_goes_without_a_parent(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        rpc = batch_requester(p.instance)
        await p.send(Message(TOPIC, b"alone"), queue=queues(cluster)[0])
        assert rpc.stats.parents == 0 and rpc.stats.rpcs == 1
    finally:
        await p.close()


async def _iterations(request: Any) -> int:
    """Event-loop iterations from making ``request`` (a coroutine) to its answer."""
    task = asyncio.ensure_future(request)
    count = 0
    while not task.done():
        count += 1
        await asyncio.sleep(0)
    task.result()
    return count


async def test_a_lone_send_takes_no_more_loop_iterations_than_a_plain_request(
        cluster: Cluster) -> None:
    """The requester's coalescing step sends a lone request itself: waiting for the end
    of the iteration costs it nothing beyond what the connection's own write costs."""
    p = await producer(cluster)
    try:
        rpc = batch_requester(p.instance)
        addr = cluster.brokers[0].broker_addr
        await p.send(Message(TOPIC, b"warm"), queue=queues(cluster)[0])  # connected

        def cmd() -> RemotingCommand:
            ext = GetMaxOffsetRequestHeader(topic=TOPIC, queue_id=0).to_ext()
            return RemotingCommand.request(RequestCode.GET_MAX_OFFSET, ext)

        plain = min([await _iterations(p.instance.request(addr, cmd())) for _ in range(5)])
        lone = min([await _iterations(rpc.request(addr, cmd())) for _ in range(5)])
        assert lone <= plain
        assert rpc.stats.parents == 0
    finally:
        await p.close()


async def test_sends_fall_back_to_one_rpc_each_without_the_feature(legacy: Cluster) -> None:
    p = await producer(legacy)
    try:
        rpc = batch_requester(p.instance)
        items = [(Message(TOPIC, b"x"), mq) for mq in queues(legacy)]
        results = await p.send_multi(items)
        assert [r.queue.queue_id for r in results] == list(range(QUEUES))
        addr = legacy.brokers[0].broker_addr
        assert rpc.support.state(addr) is Support.ABSENT
        assert rpc.stats.rpcs == 1 + QUEUES  # the refused parent, then one each
        await p.send_multi(items)
        assert rpc.stats.rpcs == 1 + 2 * QUEUES and rpc.stats.parents == 1  # not asked again
    finally:
        await p.close()


async def test_the_client_switch_turns_the_feature_off(cluster: Cluster) -> None:
    p = await producer(cluster, batch_protocol_enable=False)
    try:
        rpc = batch_requester(p.instance)
        await p.send_multi([(Message(TOPIC, b"x"), mq) for mq in queues(cluster)])
        assert rpc.stats.parents == 0 and rpc.stats.rpcs == QUEUES
    finally:
        await p.close()


# ---------------------------------------------------------------- pulls and commits


async def fill(cluster: Cluster, per_queue: int) -> None:
    p = await producer(cluster)
    try:
        for mq in queues(cluster):
            await p.send_batch([Message(TOPIC, f"{mq.queue_id}:{i}".encode())
                                for i in range(per_queue)], queue=mq)
    finally:
        await p.close()
    for broker in cluster.brokers:
        assert await asyncio.to_thread(broker.store.wait_dispatched, 10.0)


async def consume_all(consumer: PullConsumer, expected: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < expected:
        assert time.monotonic() < deadline, f"only {len(got)} of {expected}"
        got.extend(m.body for m in await consumer.poll(timeout=1.0, max_messages=1000))
    return got


async def test_a_pull_consumer_reads_its_queues_with_one_rpc_per_round(
        cluster: Cluster) -> None:
    await fill(cluster, 5)
    consumer = PullConsumer("cg", config=config(cluster), consume_from=FIRST)
    consumer.assign(queues(cluster))
    await consumer.start()
    try:
        got = await consume_all(consumer, 5 * QUEUES)
        assert sorted(got) == sorted(f"{q}:{i}".encode() for q in range(QUEUES)
                                     for i in range(5))
        rpc = batch_requester(consumer.instance)
        # committed offsets: one parent, each queue answered 0 (its message 0 is in
        # memory), so no GET_MIN_OFFSET follows; pulls: one parent per round
        assert rpc.stats.parents >= 2 and rpc.stats.children >= 2 * QUEUES
        assert rpc.stats.rpcs == rpc.stats.parents
        before = rpc.stats.parents
        await consumer.commit()
        assert rpc.stats.parents == before + 1
        assert cluster.brokers[0].committed_offset("cg", TOPIC, 3) == 5
    finally:
        await consumer.close()


async def test_a_held_merged_pull_is_woken_by_a_send_to_any_queue(cluster: Cluster) -> None:
    consumer = PullConsumer("cg", config=config(cluster, long_polling_timeout=15.0))
    consumer.assign(queues(cluster))
    await consumer.start()
    p = await producer(cluster)
    try:
        assert await consumer.poll(timeout=0.3) == []  # positions found, pulls parked
        batch = cluster.brokers[0].batch
        assert batch is not None
        async with asyncio.timeout(5):
            while batch.holds.held_count == 0:  # parked when the parent arrives
                await asyncio.sleep(0.01)
        t0 = time.monotonic()
        await p.send(Message(TOPIC, b"wake up"), queue=queues(cluster)[6])
        got = await consumer.poll(timeout=10)
        assert [m.body for m in got] == [b"wake up"]
        assert time.monotonic() - t0 < 5
        assert batch.holds.held_count <= 1  # the others went out again, parked once more
    finally:
        await p.close()
        await consumer.close()


async def test_a_pull_consumer_falls_back_without_the_feature(legacy: Cluster) -> None:
    await fill(legacy, 3)
    consumer = PullConsumer("cg", config=config(legacy), consume_from=FIRST)
    consumer.assign(queues(legacy))
    await consumer.start()
    try:
        got = await consume_all(consumer, 3 * QUEUES)
        assert len(got) == 3 * QUEUES
        rpc = batch_requester(consumer.instance)
        assert rpc.support.state(legacy.brokers[0].broker_addr) is Support.ABSENT
        assert rpc.stats.parents == 1  # learnt once
        await consumer.commit()
        assert legacy.brokers[0].committed_offset("cg", TOPIC, 0) == 3
    finally:
        await consumer.close()


async def test_a_push_consumer_pulls_its_queues_in_merged_rpcs(cluster: Cluster) -> None:
    await fill(cluster, 4)
    got: list[bytes] = []
    done = asyncio.Event()

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body for m in msgs)
        if len(got) >= 4 * QUEUES:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("push-cg", config=config(cluster), listener=listener,
                            consume_from=FIRST)
    consumer.subscribe(TOPIC)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 20)
        rpc = batch_requester(consumer.instance)
        assert rpc.stats.parents >= 1
        assert rpc.stats.children / rpc.stats.parents > 2  # the queues' pulls shared RPCs
    finally:
        await consumer.close()
    assert sorted(got) == sorted(f"{q}:{i}".encode() for q in range(QUEUES) for i in range(4))


# ---------------------------------------------------------------- negotiation


async def test_probe_says_whether_a_broker_speaks_it(cluster: Cluster, tmp_path: Path) -> None:
    inst = ClientInstance(config(cluster))
    try:
        rpc = batch_requester(inst)
        assert await rpc.probe(cluster.brokers[0].broker_addr)
        legacy = await cluster.add_broker(5, batch_protocol_enable=False)
        assert not await rpc.probe(legacy.broker_addr)
        assert rpc.support.state(legacy.broker_addr) is Support.ABSENT
    finally:
        await inst.close()


def test_absent_brokers_are_asked_again_after_recheck() -> None:
    now = [100.0]
    support = BatchSupport(recheck=60.0, clock=lambda: now[0])
    assert support.state("b:1") is Support.UNKNOWN
    support.mark("b:1", False)
    assert support.state("b:1") is Support.ABSENT
    now[0] += 59
    assert support.state("b:1") is Support.ABSENT
    now[0] += 1
    assert support.state("b:1") is Support.UNKNOWN
    support.mark("b:1", True)
    assert support.state("b:1") is Support.PRESENT
    assert BatchSupport(enabled=False).state("b:1") is Support.ABSENT


async def test_a_refused_parent_fails_each_child_with_its_error(tmp_path: Path) -> None:
    c = await make_cluster(tmp_path, batch_max_children=2)
    inst = ClientInstance(config(c))
    try:
        rpc = batch_requester(inst)
        addr = c.brokers[0].broker_addr

        def ask(q: int) -> RemotingCommand:
            header = GetMaxOffsetRequestHeader(topic=TOPIC, queue_id=q)
            return RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header.to_ext())

        results = await asyncio.gather(*(rpc.request(addr, ask(q)) for q in range(3)),
                                       return_exceptions=True)
        assert all(isinstance(r, BrokerResponseError) and r.code == 29 for r in results)
        assert len({id(r) for r in results}) == 3  # one error object per child
        assert rpc.stats.parents == 1
    finally:
        await inst.close()
        await c.stop()
