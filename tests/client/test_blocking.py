"""The blocking facade against scripted fakes (calls run in a worker thread)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.client.batch_checks import assert_batch_is
from tests.client.fakes import FakeBroker, FakeNameServer
from tests.client.rejoin import restart_namesrv, route_both_and_only_b

from tidemq.client import (
    BlockingLmqPullConsumer,
    BlockingProducer,
    BlockingPullConsumer,
    ClientConfig,
    MessageTooBigError,
    NoRouteError,
)
from tidemq.client.blocking import BlockingRouteCache
from tidemq.client.records import decode_messages
from tidemq.codec.bodies import BrokerData
from tidemq.codec.command import RequestCode
from tidemq.errors import BrokerResponseError, ConnectionLost, ResponseCode
from tidemq.net.blocking import BlockingClient
from tidemq.testing import Cluster
from tidemq.types import Message, MessageQueue, PullStatus, SendStatus

QA = MessageQueue("T", "broker-a", 0)


async def test_produce_then_pull_round_trip(namesrv: FakeNameServer, brokers: list[FakeBroker],
                                            config: ClientConfig) -> None:
    namesrv.add_topic("T", brokers)

    def produce() -> list[MessageQueue]:
        with BlockingProducer("pg", config=config) as producer:
            one = producer.send(Message("T", b"m0", {"TAGS": "a"}), queue=QA)
            batch = producer.send_batch([Message("T", b"m1"), Message("T", b"m2", {"TAGS": "a"})],
                                        queue=QA)
            spread = [producer.send(Message("T", b"x")).queue for _ in range(8)]
            assert one.status is SendStatus.SEND_OK and one.queue_offset == 0
            assert batch.queue_offset == 1 and len(batch.msg_id.split(",")) == 2
            with pytest.raises(MessageTooBigError):
                producer.send(Message("T", b"x" * (config.max_message_size + 1)))
            return spread

    spread = await asyncio.to_thread(produce)
    assert {q.broker_name for q in spread} == {"broker-a", "broker-b"}

    def consume() -> None:
        with BlockingPullConsumer("cg", config=config) as consumer:
            assert len(consumer.queues("T")) == 8
            status, next_offset, lo, hi, msgs = consumer.pull(QA, 0, 2)
            assert (status, next_offset, lo) == (PullStatus.FOUND, 2, 0)
            assert [m.body for m in msgs] == [b"m0", b"m1"] and hi >= 3
            tagged = consumer.pull(QA, 0, 32, expression="a")
            assert [m.body for m in tagged.messages] == [b"m0", b"m2"]
            for start, expression in ((0, "*"), (1, "*"), (0, "a")):  # columns: the same
                rows = consumer.pull_batch(QA, start, 32, expression=expression)
                objects = consumer.pull(QA, start, 32, expression=expression)
                assert rows[:4] == objects[:4] and rows.batch is not None
                assert_batch_is(rows.batch, objects.messages)
            end_batch = consumer.pull_batch(QA, consumer.get_max_offset(QA), 32)
            assert end_batch.status is PullStatus.NO_NEW_MSG and end_batch.batch is None
            end = consumer.get_max_offset(QA)
            assert consumer.pull(QA, end, 32).status is PullStatus.NO_NEW_MSG
            assert consumer.pull(QA, end + 5, 32).status is PullStatus.OFFSET_ILLEGAL
            assert consumer.get_min_offset(QA) == 0
            assert consumer.committed(QA) is None
            consumer.commit(QA, 2)
            assert consumer.committed(QA) == 2

    await asyncio.to_thread(consume)
    stamp = brokers[0].stored("T", 0)[1].store_time

    def search() -> int:
        with BlockingPullConsumer("cg", config=config) as consumer:
            return consumer.search_offset(QA, stamp)

    assert await asyncio.to_thread(search) == 1
    # the blocking pull never asks the broker to hold it
    pulls = brokers[0].log.of(RequestCode.PULL_MESSAGE)
    assert all(p.ext_fields["sysFlag"] == "4" for p in pulls)


async def test_blocking_retry_and_auto_create(namesrv: FakeNameServer,
                                              brokers: list[FakeBroker],
                                              config: ClientConfig) -> None:
    namesrv.add_topic("T", brokers)
    namesrv.add_topic("TBW102", brokers[1:], queues=8, perm=7)
    brokers[0].fail_always = ResponseCode.SYSTEM_BUSY

    def produce() -> None:
        with BlockingProducer("pg", config=config) as producer:
            for _ in range(8):
                assert producer.send(Message("T", b"x")).queue.broker_name == "broker-b"
            fresh = producer.send(Message("Fresh", b"y"))
            assert fresh.queue.broker_name == "broker-b" and fresh.queue.queue_id < 4
            with pytest.raises(BrokerResponseError):
                producer.send(Message("T", b"z"), queue=QA)  # fixed queue: no retry

    await asyncio.to_thread(produce)
    assert brokers[0].log.of(RequestCode.SEND_MESSAGE_V2)
    assert "Fresh" in brokers[1].topics


async def test_topic_list_and_undecoded_pulls(namesrv: FakeNameServer,
                                              brokers: list[FakeBroker],
                                              config: ClientConfig) -> None:
    """What readers with their own decoder use (the Spark source): the topic list, and
    pulls whose records come back as the body, decodable by tidemq.client.records."""
    namesrv.add_topic("T", brokers)
    namesrv.add_topic("U", brokers)

    def run() -> None:
        with BlockingProducer("pg", config=config) as producer:
            producer.send_batch([Message("T", b"m0", {"TAGS": "a"}), Message("T", b"m1")],
                                queue=QA)
        with BlockingPullConsumer("cg", config=config) as consumer:
            assert {"T", "U"} <= set(consumer.routes.topic_list())
            raw = consumer.pull_body(QA, 0, 32)
            objects = consumer.pull(QA, 0, 32)
            assert raw[:4] == objects[:4] and raw.status is PullStatus.FOUND
            assert [m.body for m in decode_messages(raw.body)] == [b"m0", b"m1"]
            end = consumer.pull_body(QA, raw.next_offset, 32)
            assert end.status is PullStatus.NO_NEW_MSG and end.body == b""
        unrouted = MessageQueue("T", "in-no-route", 0)  # reached by address alone
        with BlockingLmqPullConsumer("cg", brokers[0].address, config=config) as lmq:
            assert [m.body for m in lmq.pull(unrouted, 0, 32).messages] == [b"m0", b"m1"]
            assert lmq.pull_body(unrouted, 0, 32)[:4] == raw[:4]

    await asyncio.to_thread(run)


@pytest.mark.parametrize("window", [60_000, 0], ids=["rejoining", "settled"])
async def test_blocking_cache_keeps_brokers_a_restarted_name_server_lacks(
        tmp_path: Path, window: int) -> None:
    """As the asyncio cache: while a restarted name server may still be waiting for
    brokers, a route lacking one the cache knew keeps it (and a topic only it has stays);
    after that window a route is taken as it is."""
    async with Cluster(tmp_path, brokers=2, broker={"register_name_server_period": 600_000}
                       ) as cluster:
        b = cluster.brokers[1]
        await route_both_and_only_b(cluster)
        with BlockingClient() as client:
            cache = BlockingRouteCache(client, [cluster.namesrv_addr])
            both = await asyncio.to_thread(cache.get, "Both")
            only_b = await asyncio.to_thread(cache.get, "OnlyB")
            changed: list[str] = []
            cache.add_listener(changed.append)
            assert b.registrar is not None
            await b.registrar.stop()  # broker-b is slow to come back
            await restart_namesrv(cluster, broker_rejoin_window=window)
            async with Peer(cluster.namesrv_addr) as ns:
                await wire.eventually_route(ns, "Both", timeout=30)
            again = await asyncio.to_thread(cache.get, "Both", refresh=True)
            if window:
                assert again.subscribe_queues == both.subscribe_queues
                assert await asyncio.to_thread(cache.get, "OnlyB", refresh=True) == only_b
                assert changed == []
            else:
                assert {q.broker_name for q in again.subscribe_queues} == {"broker-a"}
                with pytest.raises(BrokerResponseError):
                    await asyncio.to_thread(cache.get, "OnlyB", refresh=True)
                assert changed == ["Both"]


async def test_a_blocking_fixed_queue_send_finds_the_new_master(
        namesrv: FakeNameServer, brokers: list[FakeBroker], config: ClientConfig) -> None:
    old, new = brokers
    namesrv.add_topic("Fail", [old])
    queue = MessageQueue("Fail", "broker-a", 0)
    producer = BlockingProducer("pg", config=config)
    try:
        await asyncio.to_thread(producer.send, Message("Fail", b"1"), queue=queue)
        await old.close()
        new.name = "broker-a"
        namesrv.add_broker(new)
        namesrv.add_topic("Fail", [new])
        with pytest.raises(ConnectionLost):
            await asyncio.to_thread(producer.send, Message("Fail", b"2"), queue=queue)
        result = await asyncio.to_thread(producer.send, Message("Fail", b"3"), queue=queue)
    finally:
        await asyncio.to_thread(producer.close)
    assert result.status is SendStatus.SEND_OK and len(new.stored("Fail", 0)) == 1


async def test_a_blocking_send_fetches_a_route_without_a_master_again(
        namesrv: FakeNameServer, brokers: list[FakeBroker], config: ClientConfig) -> None:
    broker = brokers[0]
    namesrv.brokers[broker.name] = BrokerData(cluster=broker.cluster, broker_name=broker.name,
                                              broker_addrs={1: broker.address})
    namesrv.add_topic("Elect", [broker])
    producer = BlockingProducer("pg", config=config)
    try:
        with pytest.raises(NoRouteError):
            await asyncio.to_thread(producer.send, Message("Elect", b"1"))
        namesrv.add_broker(broker)  # the new master is listed, well within the route's ttl
        namesrv.add_topic("Elect", [broker])
        result = await asyncio.to_thread(producer.send, Message("Elect", b"2"))
    finally:
        await asyncio.to_thread(producer.close)
    assert result.status is SendStatus.SEND_OK
    assert sum(len(broker.stored("Elect", q)) for q in range(4)) == 1
