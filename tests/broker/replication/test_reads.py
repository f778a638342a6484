"""Reading from a replica: the client pulls from it once the master is gone, and a
master with ``slaveReadEnable`` suggests a replica to a consumer that reads far behind."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from tests.broker.replication.test_group import SMALL, caught_up
from tests.broker.test_lmq import fan_out
from tests.broker.wire import Peer, create_topic, eventually_route, pull, send

from tidemq.broker.app import BrokerApp
from tidemq.broker.replication.role import BrokerRole
from tidemq.client import (
    ClientConfig,
    ConsumeStatus,
    LmqConsumer,
    MessageExt,
    PullConsumer,
    PushConsumer,
)
from tidemq.client.blocking import BlockingPullConsumer
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.codec.command import RemotingCommand
from tidemq.testing import Cluster
from tidemq.types import MessageQueue

TOTAL = 40


async def on_both(master: BrokerApp, replica: BrokerApp, topic: str,
                  requests: Sequence[RemotingCommand]) -> None:
    """Create ``topic`` on ``master``, send it ``requests``, and return once ``replica``
    holds every byte and the topic's config, and the name servers route the topic."""
    async with Peer(master.broker_addr) as peer:
        await peer.ok(create_topic(topic, 1))
        for request in requests:
            await peer.ok(request)
    await caught_up(master, replica)
    while replica.topics.get(topic) is None:
        replica.metadata_sync.synced.clear()
        await asyncio.wait_for(replica.metadata_sync.synced.wait(), 10)
    for namesrv in master.config.namesrv_addrs:  # the master registers the topic shortly
        async with Peer(namesrv) as ns:
            await eventually_route(ns, topic, timeout=30)


async def test_a_consumer_goes_on_reading_from_the_replica_when_the_master_stops(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.ASYNC_MASTER},
                       store=SMALL) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        cfg = ClientConfig(namesrv_addr=(group.namesrv_addr,), long_polling_timeout=1.0,
                           pull_error_backoff=0.1, retry_times_when_send_failed=0)
        await on_both(master, replica, "T", [send("T", b"m%d" % i) for i in range(TOTAL)])
        mq = MessageQueue("T", "broker-a", 0)
        got: list[bytes] = []
        first = PullConsumer("cg", config=cfg)  # reads from the master; its client
        await first.start()                      # instance keeps the master in its routes
        later = PullConsumer("cg2", config=cfg)
        try:
            first.assign([mq])
            first.seek(mq, 0)
            async with asyncio.timeout(20):
                while len(got) < 10:
                    got += [m.body for m in await first.poll(timeout=0.2, max_messages=10)]
            got = got[:10]
            await master.stop()  # unregisters: the name servers list only the replica
            await later.start()
            later.assign([mq])
            later.seek(mq, 10)
            async with asyncio.timeout(30):
                while later.position(mq) != TOTAL:
                    got += [m.body for m in await later.poll(timeout=0.2)]
        finally:
            await later.close(commit=False)
            await first.close(commit=False)
        assert got == [b"m%d" % i for i in range(TOTAL)]


async def test_slave_read_enable_suggests_a_replica_to_a_reader_far_behind(
        tmp_path: Path) -> None:
    async def suggestion(ratio: int, read_enable: bool) -> str:
        root = tmp_path / f"{ratio}-{read_enable}"
        async with Cluster(root, broker={"slave_read_enable": read_enable,
                                         "access_message_in_memory_max_ratio": ratio},
                           store=SMALL) as group, Peer(group.brokers[0].broker_addr) as peer:
            await peer.ok(create_topic("T", 1))
            for i in range(3):
                await peer.ok(send("T", b"m%d" % i))
            while group.brokers[0].store.max_offset("T", 0) < 3:
                await asyncio.to_thread(group.brokers[0].store.wait_dispatched)
            resp = await peer.ok(pull("T", 0, 0))
            return resp.ext_fields["suggestWhichBrokerId"]

    # ratio 0: any record behind the log's end is "not in memory": go to a replica
    assert await suggestion(0, True) == "1"
    assert await suggestion(40, True) == "0"  # three small records are in memory
    assert await suggestion(0, False) == "0"  # without slaveReadEnable: the master


async def test_consumers_follow_the_masters_suggestion_to_read_from_the_replica(
        tmp_path: Path) -> None:
    """With ``slaveReadEnable`` and a ratio of 0 every found pull is sent to replica 1:
    after the first pull (from the master) the pull and push consumers read from the
    replica, and get every message once, in order."""
    async with Cluster(tmp_path, broker={"slave_read_enable": True,
                                         "access_message_in_memory_max_ratio": 0},
                       store=SMALL) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        await on_both(master, replica, "T", [send("T", b"m%d" % i) for i in range(TOTAL)])
        cfg = ClientConfig(namesrv_addr=(group.namesrv_addr,), long_polling_timeout=1.0,
                           pull_batch_size=4)
        mq = MessageQueue("T", "broker-a", 0)
        consumer = PullConsumer("cg", config=cfg)
        await consumer.start()
        got: list[bytes] = []
        try:
            consumer.assign([mq])
            consumer.seek(mq, 0)
            async with asyncio.timeout(30):
                while consumer.position(mq) != TOTAL:
                    got += [m.body for m in await consumer.poll(timeout=0.2)]
            from_master = master.ctx.stats.get_msgs.total
            assert from_master < TOTAL  # the first pulls only
            assert replica.ctx.stats.get_msgs.total == TOTAL - from_master
            assert consumer.instance.suggestions.broker_id(mq) == 1
        finally:
            await consumer.close(commit=False)
        assert got == [b"m%d" % i for i in range(TOTAL)]

        # the push consumer: the same rule
        seen: list[bytes] = []
        done = asyncio.Event()

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            seen.extend(m.body for m in msgs)
            if len(seen) >= TOTAL:
                done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        before = replica.ctx.stats.get_msgs.total
        push = PushConsumer("push-cg", listener=listener, config=cfg,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        push.subscribe("T")
        await push.start()
        try:
            await asyncio.wait_for(done.wait(), 30)
        finally:
            await push.close()
        assert sorted(seen) == sorted(b"m%d" % i for i in range(TOTAL))
        assert replica.ctx.stats.get_msgs.total > before


async def test_an_lmq_consumer_goes_on_on_the_replica_when_the_master_stops(
        tmp_path: Path) -> None:
    """Reading LMQs through the parent topic's route: with the master gone the consumer
    reads and commits on the replica, without a restart; the replica holds the LMQ
    offsets its master had (metadata copy) and the commits it took."""
    store = {**SMALL, "enable_lmq": True, "enable_multi_dispatch": True}
    async with Cluster(tmp_path, store=store) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        await on_both(master, replica, "Parent",
                      [fan_out("%LMQ%inbox", b"m%d" % i) for i in range(TOTAL)])
        cfg = ClientConfig(namesrv_addr=(group.namesrv_addr,), long_polling_timeout=0.5,
                           pull_error_backoff=0.1, pull_batch_size=8)
        consumer = LmqConsumer("lmq-cg", parent_topic="Parent", config=cfg)
        await consumer.start()
        got: list[bytes] = []
        try:
            consumer.subscribe("%LMQ%inbox")
            async with asyncio.timeout(30):
                while len(got) < 10:
                    got += [m.body for m in await consumer.poll(timeout=0.2, max_messages=2)]
            await consumer.commit()
            assert master.store.lmq is not None
            assert master.store.lmq.committed_offset("lmq-cg", "%LMQ%inbox") == len(got)
            while (replica.store.lmq is not None and replica.store.lmq.committed_offset(
                    "lmq-cg", "%LMQ%inbox") != len(got)):  # the replica's copy
                replica.metadata_sync.synced.clear()
                await asyncio.wait_for(replica.metadata_sync.synced.wait(), 10)

            await master.stop()  # unregisters: the name servers list only the replica
            async with asyncio.timeout(30):
                while len(got) < TOTAL:
                    got += [m.body for m in await consumer.poll(timeout=0.2)]
            assert consumer.brokers == {"broker-a": replica.broker_addr}
            await consumer.commit()
            assert replica.store.lmq is not None
            assert replica.store.lmq.committed_offset("lmq-cg", "%LMQ%inbox") == TOTAL
            assert await consumer.committed("%LMQ%inbox") == TOTAL
        finally:
            await consumer.close(commit=False)
        assert got == [b"m%d" % i for i in range(TOTAL)]


async def test_the_blocking_consumer_spark_reads_with_reads_the_replica_too(
        tmp_path: Path) -> None:
    """The blocking consumer (Spark's reads): with ``slaveReadEnable`` and a ratio of 0
    it follows the suggestion to the replica; with the master stopped it reads and asks
    offsets of the replica."""
    async with Cluster(tmp_path, broker={"slave_read_enable": True,
                                         "access_message_in_memory_max_ratio": 0},
                       store=SMALL) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        await on_both(master, replica, "T", [send("T", b"m%d" % i) for i in range(TOTAL)])
        mq = MessageQueue("T", "broker-a", 0)

        def read_all(consumer: BlockingPullConsumer) -> list[bytes]:
            out: list[bytes] = []
            while len(out) < TOTAL:
                result = consumer.pull(mq, len(out), max_nums=8)
                out += [m.body for m in result.messages]
            return out

        with BlockingPullConsumer("cg", group.namesrv_addr) as consumer:
            got = await asyncio.to_thread(read_all, consumer)
            assert got == [b"m%d" % i for i in range(TOTAL)]
            assert consumer.suggestions.broker_id(mq) == 1
            from_master = master.ctx.stats.get_msgs.total
            assert replica.ctx.stats.get_msgs.total == TOTAL - from_master > 0
            await master.stop()
            consumer.suggestions.forget(mq)  # the next pull would go to the master first
            got = await asyncio.to_thread(read_all, consumer)
            assert got == [b"m%d" % i for i in range(TOTAL)]
            assert await asyncio.to_thread(consumer.get_max_offset, mq) == TOTAL
