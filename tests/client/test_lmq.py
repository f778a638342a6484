"""Light message queues from the client: fan-out sends, LmqConsumer, offsets, deletion."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.client import (
    AdminClient,
    AutoBatchProducer,
    ClientConfig,
    LmqConsumer,
    LmqMessage,
    Message,
    Producer,
    lmq_message,
    lmq_offsets,
    send_to_lmqs,
)
from tidemq.client.errors import InvalidMessageError
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.errors import BrokerResponseError, ResponseCode
from tidemq.testing import Cluster
from tidemq.types import MessageQueue, PullStatus

LMQ_STORE = {"enable_lmq": True, "enable_multi_dispatch": True}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Two LMQ brokers; parent topic ``Devices`` with two queues on each, in the route."""
    async with Cluster(tmp_path, brokers=2, store=LMQ_STORE) as running:
        async with AdminClient(running.namesrv_addr) as admin:
            await admin.create_topic("Devices", read_queue_nums=2, write_queue_nums=2)
            async with asyncio.timeout(10):  # brokers re-register a moment later
                while len(await route_queues(admin)) < 2:
                    await asyncio.sleep(0.02)
        yield running


async def route_queues(admin: AdminClient) -> list[object]:
    try:
        return list((await admin.topic_route("Devices")).queue_datas)
    except BrokerResponseError:
        return []


async def dispatched(cluster: Cluster) -> None:
    """Everything the brokers stored is visible (the store's own event)."""
    for broker in cluster.brokers:
        assert await asyncio.to_thread(broker.store.wait_dispatched, 10.0)


@pytest.fixture
def cfg(cluster: Cluster) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), request_timeout=3.0,
                        long_polling_timeout=2.0, pull_error_backoff=0.05)


@pytest.fixture
async def producer(cfg: ClientConfig) -> AsyncIterator[Producer]:
    async with Producer("lmq-producers", config=cfg) as p:
        yield p


def addr_of(cluster: Cluster, index: int = 0) -> str:
    return cluster.brokers[index].broker_addr


async def poll_all(consumer: LmqConsumer, count: int, timeout: float = 10.0
                   ) -> list[LmqMessage]:
    out: list[LmqMessage] = []
    async with asyncio.timeout(timeout):
        while len(out) < count:
            out += await consumer.poll(timeout=1.0)
    return out


# ---------------------------------------------------------------------- producer side


def test_lmq_message_checks_names_before_sending() -> None:
    msg = Message("Devices", b"x", {"TAGS": "t", "INNER_MULTI_QUEUE_OFFSET": "9"})
    fanned = lmq_message(msg, ["%LMQ%a", "%LMQ%b"])
    assert fanned.properties == {"TAGS": "t", "INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b"}
    assert msg.properties["INNER_MULTI_QUEUE_OFFSET"] == "9"  # the original is untouched
    assert lmq_message(msg, ["%LMQ%a"], parent_topic="Other").topic == "Other"
    for bad in ([], [""], ["plain"], ["%LMQ%"], ["%LMQ%a/b"], ["%LMQ%" + "x" * 251],
                ["%LMQ%a", "%LMQ%a"]):
        with pytest.raises(InvalidMessageError):
            lmq_message(msg, bad)
    with pytest.raises(InvalidMessageError, match="parent topic"):
        lmq_message(msg, ["%LMQ%a"], parent_topic="%LMQ%b")


def test_lmq_offsets_pairs_names_with_offsets() -> None:
    props = {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b", "INNER_MULTI_QUEUE_OFFSET": "4,0"}
    assert lmq_offsets(Message("T", b"", props)) == {"%LMQ%a": 4, "%LMQ%b": 0}
    assert lmq_offsets(Message("T", b"", {"INNER_MULTI_DISPATCH": "%LMQ%a"})) == {}
    bad = {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b", "INNER_MULTI_QUEUE_OFFSET": "4"}
    assert lmq_offsets(Message("T", b"", bad)) == {}


# ---------------------------------------------------------------------- reading


async def test_fan_out_and_read_each_lmq(cluster: Cluster, producer: Producer,
                                        cfg: ClientConfig) -> None:
    mq = MessageQueue("Devices", "broker-a", 1)
    results = [await send_to_lmqs(producer, Message("Devices", b"m%d" % i, {"TAGS": "cmd"}),
                                  ["%LMQ%d1", "%LMQ%d2"] if i % 2 else ["%LMQ%d1"], queue=mq)
               for i in range(4)]
    assert [r.queue_offset for r in results] == [0, 1, 2, 3]  # offsets in the parent queue
    async with LmqConsumer("readers", broker_addr=addr_of(cluster), config=cfg) as consumer:
        consumer.subscribe("%LMQ%d1", "%LMQ%d2")
        got = await poll_all(consumer, 6)
        by_lmq: dict[str, list[LmqMessage]] = defaultdict(list)
        for m in got:
            by_lmq[m.lmq].append(m)
        assert [(m.offset, m.body) for m in by_lmq["%LMQ%d1"]] == [
            (0, b"m0"), (1, b"m1"), (2, b"m2"), (3, b"m3")]
        assert [(m.offset, m.body) for m in by_lmq["%LMQ%d2"]] == [(0, b"m1"), (1, b"m3")]
        second = by_lmq["%LMQ%d2"][1]
        assert (second.parent_topic, second.message.queue_id) == ("Devices", 1)
        assert second.message.queue_offset == 3  # the record's offset in its parent queue
        assert second.tags == "cmd" and second.broker_name == addr_of(cluster)
        assert consumer.position("%LMQ%d1") == 4 and consumer.position("%LMQ%d2") == 2
        assert await consumer.max_offset("%LMQ%d1") == 4


async def test_concurrent_sends_give_dense_offsets(cluster: Cluster, producer: Producer,
                                                   cfg: ClientConfig) -> None:
    """150 sends in flight at once over four parent queues on two brokers: on each
    broker every LMQ is dense from 0 and holds each message that named it once."""
    pool = [f"%LMQ%c{i}" for i in range(8)]
    rng = random.Random(3)
    plan = [(b"c%d" % i, rng.sample(pool, rng.randint(1, 4))) for i in range(150)]
    results = await asyncio.gather(*(send_to_lmqs(producer, Message("Devices", body), names)
                                     for body, names in plan))
    where = {body: r.queue.broker_name for (body, _), r in zip(plan, results, strict=True)}
    assert set(where.values()) == {"broker-a", "broker-b"}
    want: dict[tuple[str, str], set[bytes]] = defaultdict(set)
    for body, names in plan:
        for name in names:
            want[(name, where[body])].add(body)
    async with LmqConsumer("dense", namesrv=cluster.namesrv_addr, parent_topic="Devices",
                           config=cfg) as consumer:
        assert sorted(consumer.brokers) == ["broker-a", "broker-b"]
        consumer.subscribe(*pool)
        got = await poll_all(consumer, sum(len(v) for v in want.values()))
    seen: dict[tuple[str, str], list[LmqMessage]] = defaultdict(list)
    for m in got:
        seen[(m.lmq, m.broker_name)].append(m)
    assert set(seen) == set(want)
    for key, msgs in seen.items():
        assert [m.offset for m in msgs] == list(range(len(msgs))), key
        assert {m.body for m in msgs} == want[key] and len(msgs) == len(want[key])


async def test_auto_batched_fan_out(cluster: Cluster, producer: Producer,
                                   cfg: ClientConfig) -> None:
    """Fan-out messages through an AutoBatchProducer go as batches, each message to its
    own LMQs (mixed with plain messages): every LMQ is dense from 0 and holds each
    message that named it once, in the order it was sent."""
    pool = [f"%LMQ%ab{i}" for i in range(6)]
    rng = random.Random(5)
    plan = [(b"a%d" % i, rng.sample(pool, rng.randint(0, 3))) for i in range(120)]
    mq = MessageQueue("Devices", "broker-a", 0)
    batcher = AutoBatchProducer(producer, linger_ms=20)
    futures = [await batcher.send(lmq_message(Message("Devices", body), names) if names
                                  else Message("Devices", body), queue=mq)
               for body, names in plan]
    results = await asyncio.gather(*futures)
    await batcher.close()
    assert [r.queue_offset for r in results] == list(range(120))
    want: dict[str, list[bytes]] = defaultdict(list)
    for body, names in plan:
        for name in names:
            want[name].append(body)
    async with LmqConsumer("batched", broker_addr=addr_of(cluster), config=cfg) as consumer:
        consumer.subscribe(*pool)
        got = await poll_all(consumer, sum(map(len, want.values())))
    seen: dict[str, list[LmqMessage]] = defaultdict(list)
    for m in got:
        seen[m.lmq].append(m)
    for name in pool:
        assert [m.offset for m in seen[name]] == list(range(len(want[name]))), name
        assert [m.body for m in seen[name]] == want[name], name


async def test_long_poll_delivers_as_soon_as_a_message_fans_out(
        cluster: Cluster, producer: Producer, cfg: ClientConfig) -> None:
    slow = ClientConfig(namesrv_addr=cfg.namesrv_addr, long_polling_timeout=20.0)
    async with LmqConsumer("waiters", broker_addr=addr_of(cluster), config=slow) as consumer:
        consumer.subscribe("%LMQ%wait")
        assert await consumer.poll(timeout=0.3) == []  # the pull is now held
        assert cluster.brokers[0].pull_holds.held_count == 1
        start = time.monotonic()
        poll = asyncio.ensure_future(consumer.poll(timeout=15))
        await send_to_lmqs(producer, Message("Devices", b"wake"), ["%LMQ%wait"],
                           queue=MessageQueue("Devices", "broker-a", 0))
        [msg] = await poll
        assert msg.body == b"wake" and time.monotonic() - start < 10


async def test_offsets_are_committed_and_resumed(cluster: Cluster, producer: Producer,
                                                 cfg: ClientConfig) -> None:
    mq = MessageQueue("Devices", "broker-a", 0)
    for i in range(5):
        await send_to_lmqs(producer, Message("Devices", b"o%d" % i), ["%LMQ%o"], queue=mq)
    addr = addr_of(cluster)
    async with LmqConsumer("resume", broker_addr=addr, config=cfg) as first:
        first.subscribe("%LMQ%o")
        got = await poll_all(first, 5)
        assert [m.offset for m in got] == [0, 1, 2, 3, 4]
        await first.commit({first.queue("%LMQ%o"): 3})
        assert await first.committed("%LMQ%o") == 3
    # close() committed nothing new: the position (5) is stored only if it changed
    async with LmqConsumer("resume", broker_addr=addr, config=cfg) as second:
        second.subscribe("%LMQ%o")
        assert await second.committed("%LMQ%o") == 5
        second.seek("%LMQ%o", 3)
        assert [m.body for m in await poll_all(second, 2)] == [b"o3", b"o4"]
    async with LmqConsumer("latecomer", broker_addr=addr, config=cfg,
                           consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET) as third:
        third.subscribe("%LMQ%o")
        assert await third.poll(timeout=0.3) == []
        assert third.position("%LMQ%o") == 5


async def test_one_shot_pull_and_tag_filter(cluster: Cluster, producer: Producer,
                                            cfg: ClientConfig) -> None:
    mq = MessageQueue("Devices", "broker-a", 0)
    for i, tag in enumerate(["a", "b", "a"]):
        await send_to_lmqs(producer, Message("Devices", b"t%d" % i, {"TAGS": tag}),
                           ["%LMQ%tags"], queue=mq)
    await dispatched(cluster)
    async with LmqConsumer("tagged", broker_addr=addr_of(cluster), config=cfg) as consumer:
        result = await consumer.pull("%LMQ%tags", 0, 10, expression="a")
        assert result.status is PullStatus.FOUND
        assert [(m.offset, m.body) for m in result.messages] == [(0, b"t0"), (2, b"t2")]
        empty = await consumer.pull("%LMQ%tags", 3, 10)
        assert empty.status is PullStatus.NO_NEW_MSG and empty.max_offset == 3


async def test_delete_lmq_through_the_admin_client(cluster: Cluster, producer: Producer,
                                                   cfg: ClientConfig) -> None:
    mq = MessageQueue("Devices", "broker-b", 0)
    for i in range(3):
        await send_to_lmqs(producer, Message("Devices", b"x%d" % i), ["%LMQ%bye"], queue=mq)
    addr = addr_of(cluster, 1)
    async with LmqConsumer("bye", broker_addr=addr, config=cfg) as consumer:
        consumer.subscribe("%LMQ%bye")
        await poll_all(consumer, 3)
        await consumer.commit()
    async with AdminClient(config=cfg) as admin:
        await admin.delete_lmq(addr, "%LMQ%bye")
        with pytest.raises(BrokerResponseError) as err:
            await admin.delete_lmq(addr, "%LMQ%bye")
        assert err.value.code == ResponseCode.QUERY_NOT_FOUND
        status = await admin.broker_status(addr)
        assert status["lmqEnabled"] == "true" and status["lmqCount"] == "0"
    async with LmqConsumer("bye", broker_addr=addr, config=cfg) as consumer:
        consumer.subscribe("%LMQ%bye")
        assert await consumer.committed("%LMQ%bye") is None
        assert await consumer.max_offset("%LMQ%bye") == 0


async def test_fan_out_to_a_broker_without_lmq_is_refused(tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=1) as plain:
        cfg = ClientConfig(namesrv_addr=(plain.namesrv_addr,), request_timeout=3.0)
        async with Producer("p", config=cfg) as producer:
            with pytest.raises(BrokerResponseError) as err:
                await send_to_lmqs(producer, Message("Devices", b"x"), ["%LMQ%a"])
            assert err.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert "enableLmq" in str(err.value)


def test_consumer_needs_exactly_one_way_to_find_brokers() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        LmqConsumer("g")
    with pytest.raises(ValueError, match="exactly one"):
        LmqConsumer("g", broker_addr="127.0.0.1:1", parent_topic="T")
    consumer = LmqConsumer("g", broker_addr="127.0.0.1:1")
    with pytest.raises(InvalidMessageError):
        consumer.subscribe("not-an-lmq")


async def test_tag_subscription_of_lmqs_fed_from_a_batch_cq_parent(
        cluster: Cluster, producer: Producer, cfg: ClientConfig) -> None:
    """An LMQ holds one entry per message even when its parent topic is BatchCQ (an inner
    batch cannot fan out), so a tag subscription gets exactly the tagged messages."""
    async with AdminClient(config=cfg) as admin:
        await admin.create_topic("BcqDevices", read_queue_nums=1, write_queue_nums=1,
                                 broker_addr=addr_of(cluster),
                                 attributes={"queue.type": "BatchCQ"})
    mq = MessageQueue("BcqDevices", "broker-a", 0)
    for i in range(12):
        await send_to_lmqs(producer, Message("BcqDevices", b"t%d" % i, {"TAGS": f"tag{i % 3}"}),
                           ["%LMQ%bcq"], queue=mq)
    batch = [lmq_message(Message("BcqDevices", b"x", {"TAGS": "tag1"}), ["%LMQ%bcq"])] * 2
    with pytest.raises(BrokerResponseError, match="not supported in inner batches") as info:
        await producer.send_batch(batch, queue=mq)  # refused by the broker, nothing stored
    assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
    await dispatched(cluster)
    async with LmqConsumer("bcq-tagged", broker_addr=addr_of(cluster), config=cfg,
                           consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
                           ) as consumer:
        consumer.subscribe("%LMQ%bcq", expression="tag1")
        got = await poll_all(consumer, 4)
        assert [(m.offset, m.body, m.tags) for m in got] == [
            (i, b"t%d" % i, "tag1") for i in range(1, 12, 3)]
        assert await consumer.poll(timeout=0.3) == []
        assert consumer.position("%LMQ%bcq") == 12
