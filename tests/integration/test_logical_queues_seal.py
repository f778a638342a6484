"""Logical queues (RIP-21): reading across a sealed segment.

* a segment sealed while its broker's dispatcher lags behind the appends: the reader waits
  for the sealed tail to be dispatched instead of jumping to the next segment;
* a pull inside a sealed segment reports the logical queue's ``maxOffset``, not the
  segment's end, so a plain client's lag is right.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from tests.integration import test_logical_queues as base
from tests.integration.test_logical_queues import TOPIC, N, create

from tidemq.broker.app import BrokerApp
from tidemq.client import AdminClient, Producer, PullConsumer
from tidemq.client.logical_admin import LogicalQueueAdmin
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.net import RemotingClient
from tidemq.testing import Cluster
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue

cluster = base.cluster

QUEUES = [MessageQueue(TOPIC, LOGICAL_BROKER, i) for i in range(N)]


def broker(cluster: Cluster, name: str) -> BrokerApp:
    return next(b for b in cluster.brokers if b.config.broker_name == name)


@contextlib.asynccontextmanager
async def dispatch_paused(app: BrokerApp) -> AsyncIterator[None]:
    dispatcher = app.store.dispatcher
    assert dispatcher is not None
    dispatcher.pause()
    try:
        yield
    finally:
        dispatcher.resume()


async def send(cluster: Cluster, lq: int, bodies: list[bytes]) -> list[int]:
    producer = Producer("seal-producer", cluster.namesrv_addr)
    await producer.start()
    try:
        return [(await producer.send(Message(TOPIC, b), queue=QUEUES[lq])).queue_offset
                for b in bodies]
    finally:
        await producer.close()


async def read(consumer: PullConsumer, done: Callable[[list[int]], bool]) -> list[int]:
    got: list[int] = []
    for _ in range(100):
        got += [m.queue_offset for m in await consumer.poll(timeout=0.2)]
        if done(got):
            return got
    raise AssertionError(f"the reader stalled at {got}")


async def test_a_segment_sealed_before_its_tail_is_dispatched_is_read_to_its_end(
        cluster: Cluster, admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])  # LQ 0 on broker-a
    lqa = LogicalQueueAdmin(admin)
    consumer = PullConsumer("seal-reader", cluster.namesrv_addr)
    await consumer.start()
    consumer.assign([QUEUES[0]])
    consumer.seek(QUEUES[0], 0)
    try:
        async with dispatch_paused(broker(cluster, "broker-a")):
            assert await send(cluster, 0, [b"a0", b"a1", b"a2"]) == [0, 1, 2]
            mapping = await lqa.migrate(TOPIC, 0, "broker-c")
            assert mapping.queues[0][0].logical_end == 3
            # The reader reaches the sealed segment while its three messages are still
            # undispatched: it must not move past them.
            assert await consumer.poll(timeout=0.3) == []
        assert await send(cluster, 0, [b"c3"]) == [3]
        got = await read(consumer, lambda got: 3 in got)
    finally:
        await consumer.close(commit=False)
    assert got == [0, 1, 2, 3]


async def test_a_pull_inside_a_sealed_segment_reports_the_queue_max_offset(
        cluster: Cluster, admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    await send(cluster, 0, [b"a0", b"a1"])
    await lqa.migrate(TOPIC, 0, "broker-c")
    await send(cluster, 0, [b"c2", b"c3", b"c4"])
    assert broker(cluster, "broker-c").store.wait_dispatched(10)
    client = RemotingClient()
    try:
        for gateway in (broker(cluster, n).broker_addr for n in ("broker-a", "broker-c")):
            pull = {"consumerGroup": "plain-lag", "topic": TOPIC, "queueId": "0",
                    "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0",
                    "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}
            r = await client.request(gateway, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, pull), 3)
            assert r.code == 0, r.remark
            assert r.ext_fields["nextBeginOffset"] == "2"
            assert r.ext_fields["maxOffset"] == "5", gateway
    finally:
        await client.close()

