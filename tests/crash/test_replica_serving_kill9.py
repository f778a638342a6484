"""A master and its replica as separate processes; the master is killed with SIGKILL
while a consumer reads. The consumer goes on reading from the replica without a
restart, its offset commits are taken by the replica, a new consumer of the group starts
from them, and once the master is back the commits reach it: sent again by the consumer,
and carried by the replica for a consumer that is gone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.client import AdminClient, ClientConfig, Message, Producer, PullConsumer
from tidemq.codec.bodies import TopicRouteData
from tidemq.codec.command import RequestCode
from tidemq.namesrv import NameServerApp
from tidemq.types import MessageQueue

from .broker_process import BrokerProcess
from .test_replication_kill9 import WarmBroker, master_and_replica, topic_on

TOPIC = "ReplicaServes"
QUEUES = 2
PER_QUEUE = 20


@pytest.fixture
def group(tmp_path: Path, namesrv: NameServerApp) -> Iterator[tuple[WarmBroker,
                                                                      BrokerProcess]]:
    yield from master_and_replica(tmp_path, namesrv.address, "ASYNC_MASTER", {
        "slaveMetadataSyncInterval": "300", "haSendHeartbeatInterval": "1000",
        "flushConsumerOffsetInterval": "200"})


def has_master(route: TopicRouteData) -> bool:
    return any(0 in bd.broker_addrs for bd in route.broker_datas)


async def stored_offsets(addr: str, group: str) -> list[int | None]:
    """QUERY_CONSUMER_OFFSET of every queue of TOPIC at ``addr``."""
    out: list[int | None] = []
    async with Peer(addr) as peer:
        for qid in range(QUEUES):
            resp = await peer(wire.request(RequestCode.QUERY_CONSUMER_OFFSET, topic=TOPIC,
                                           queueId=qid, consumerGroup=group,
                                           setZeroIfNotFound="false"))
            out.append(int(resp.ext_fields["offset"]) if resp.code == 0 else None)
    return out


async def consumer_halfway(master: BrokerProcess, replica: BrokerProcess, namesrv: str,
                           prefix: str) -> tuple[PullConsumer, list[bytes], list[MessageQueue]]:
    """Start the master and its replica, send ``PER_QUEUE`` messages to each queue of
    TOPIC until the replica holds them all, and read each queue half way with a started
    PullConsumer of group ``<prefix>-cg`` (closed here only if this fails); with the
    bodies read and TOPIC's queues."""
    await asyncio.gather(asyncio.to_thread(master.start), asyncio.to_thread(replica.start))
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
    await topic_on(replica.addr, TOPIC)
    cfg = ClientConfig(namesrv_addr=(namesrv,), long_polling_timeout=0.5,
                       pull_error_backoff=0.1, retry_times_when_send_failed=0)
    queues = [MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)]
    async with Producer(f"{prefix}-producer", config=cfg) as producer:
        for i in range(PER_QUEUE * QUEUES):
            await producer.send(Message(TOPIC, b"m%d" % i), queue=queues[i % QUEUES])
    async with Peer(replica.addr) as peer:  # the replica holds every message
        for qid in range(QUEUES):
            while await peer.max_offset(TOPIC, qid) < PER_QUEUE:
                await asyncio.sleep(0.05)
    consumer = PullConsumer(f"{prefix}-cg", config=cfg)
    await consumer.start()
    got: list[bytes] = []
    try:
        consumer.assign(queues)
        for mq in queues:
            consumer.seek(mq, 0)
        async with asyncio.timeout(30):
            while any(consumer.position(mq) < PER_QUEUE // 2 for mq in queues):
                got += [m.body for m in await consumer.poll(timeout=0.2, max_messages=1)]
    except BaseException:
        await consumer.close(commit=False)
        raise
    return consumer, got, queues


@pytest.mark.timeout(180)
async def test_kill9_of_the_master_a_consumer_reads_and_commits_on_the_replica(
        group: tuple[WarmBroker, BrokerProcess], namesrv: NameServerApp) -> None:
    master, replica = group
    consumer, got, queues = await consumer_halfway(master, replica, namesrv.address, "rs")
    try:
        reached = [consumer.position(mq) for mq in queues]
        await consumer.commit()
        assert await stored_offsets(master.addr, "rs-cg") == reached

        master.prepare()  # the restart's interpreter imports while the replica serves
        master.kill9()
        async with asyncio.timeout(60):  # the same consumer, now served by the replica
            while any(consumer.position(mq) < PER_QUEUE for mq in queues):
                got += [m.body for m in await consumer.poll(timeout=0.2)]
        assert sorted(got) == sorted(b"m%d" % i for i in range(PER_QUEUE * QUEUES))
        async with Peer(namesrv.address) as ns:
            await wire.eventually_route(ns, TOPIC, lambda r: not has_master(r), timeout=30)
        await consumer.commit()  # the replica takes it
        assert await stored_offsets(replica.addr, "rs-cg") == [PER_QUEUE] * QUEUES

        # a new member of the group starts where the group is, asking the replica
        later = PullConsumer("rs-cg", config=ClientConfig(
            namesrv_addr=(namesrv.address,), instance_name="later"))
        await later.start()
        try:
            assert [await later.committed(mq) for mq in queues] == [PER_QUEUE] * QUEUES
        finally:
            await later.close(commit=False)

        # a consumer of another group commits to the replica and is gone before the
        # master is back
        async with Peer(replica.addr) as peer:
            for qid in range(QUEUES):
                await peer.ok(wire.request(
                    RequestCode.UPDATE_CONSUMER_OFFSET, topic=TOPIC, queueId=qid,
                    consumerGroup="gone-cg", commitOffset=PER_QUEUE - qid))

        # the master comes back: the replica carries what it took, and the consumer's
        # next commit reaches the master too
        await asyncio.to_thread(master.start)
        async with asyncio.timeout(30):
            while await stored_offsets(master.addr, "gone-cg") != [PER_QUEUE, PER_QUEUE - 1]:
                await asyncio.sleep(0.05)
        async with Peer(namesrv.address) as ns:
            await wire.eventually_route(ns, TOPIC, has_master, timeout=30)
        await consumer.instance.routes.get(TOPIC, refresh=True)
        await consumer.commit()
        assert await stored_offsets(master.addr, "rs-cg") == [PER_QUEUE] * QUEUES
        # and the replica's copies of the master's table keep them
        async with asyncio.timeout(30):
            while await stored_offsets(replica.addr, "gone-cg") != [PER_QUEUE, PER_QUEUE - 1]:
                await asyncio.sleep(0.05)
    finally:
        await consumer.close(commit=False)
