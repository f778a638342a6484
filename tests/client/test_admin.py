"""AdminClient against scripted fake name server and brokers."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
from tests.client.fakes import FakeBroker, FakeNameServer

from tidemq.client import (
    AdminClient,
    ClientConfig,
    MessageNotFoundError,
    Producer,
    UnknownClusterError,
)
from tidemq.client.admin import BrokerInfo
from tidemq.codec.command import RequestCode
from tidemq.codec.headers import CreateTopicRequestHeader, parse_attributes
from tidemq.errors import BrokerResponseError, ConnectionLost
from tidemq.types import Message, MessageQueue


@pytest.fixture
async def other_cluster() -> AsyncIterator[FakeBroker]:
    broker = FakeBroker("broker-x", cluster="Other")
    await broker.start()
    yield broker
    await broker.close()


async def test_create_topic_fans_out_to_every_master(
        namesrv: FakeNameServer, brokers: list[FakeBroker], other_cluster: FakeBroker,
        config: ClientConfig) -> None:
    namesrv.add_broker(brokers[0], slaves=["127.0.0.1:1"])  # a slave is never written to
    namesrv.add_broker(brokers[1])
    namesrv.add_broker(other_cluster)
    async with AdminClient(config=config) as admin:
        updated = await admin.create_topic("Orders", cluster="DefaultCluster",
                                           read_queue_nums=3, write_queue_nums=3,
                                           attributes={"message.type": "NORMAL"})
        assert updated == sorted(b.address for b in brokers)
        for broker in brokers:
            [request] = broker.log.of(RequestCode.UPDATE_AND_CREATE_TOPIC)
            header = CreateTopicRequestHeader.from_ext(request.ext_fields)
            assert (header.topic, header.read_queue_nums, header.perm) == ("Orders", 3, 6)
            assert parse_attributes(header.attributes) == {"message.type": "NORMAL"}
            assert broker.topics["Orders"] == 3
        assert not other_cluster.log.of(RequestCode.UPDATE_AND_CREATE_TOPIC)
        assert namesrv.log.of(RequestCode.GET_BROKER_CLUSTER_INFO)
        # every cluster when none is named; one broker when asked
        assert len(await admin.create_topic("All")) == 3
        assert await admin.create_topic("One", broker_addr=brokers[1].address) == [
            brokers[1].address]
        with pytest.raises(UnknownClusterError) as unknown:
            await admin.create_topic("X", cluster="Nope")
        # the clusters as an operator writes them, not a Python list
        assert str(unknown.value).endswith("the name servers know DefaultCluster, Other")


async def test_create_topic_reports_a_broker_failure(namesrv: FakeNameServer,
                                                     brokers: list[FakeBroker],
                                                     config: ClientConfig) -> None:
    namesrv.add_broker(brokers[0])
    namesrv.add_broker(brokers[1])
    await brokers[1].close()
    async with AdminClient(config=config) as admin:
        with pytest.raises(ConnectionLost):
            await admin.create_topic("Orders")
    assert brokers[0].topics.get("Orders") == 8  # the live one was still updated


async def test_cluster_topics_and_delete(namesrv: FakeNameServer, brokers: list[FakeBroker],
                                         config: ClientConfig) -> None:
    namesrv.add_broker(brokers[0], slaves=["127.0.0.1:1"])
    namesrv.add_topic("Orders", brokers)
    async with AdminClient(config=config) as admin:
        rows = await admin.cluster_list()
        assert rows[:2] == [
            BrokerInfo("DefaultCluster", "broker-a", 0, brokers[0].address),
            BrokerInfo("DefaultCluster", "broker-a", 1, "127.0.0.1:1"),
        ]
        assert dataclasses.asdict(rows[0])["broker_name"] == "broker-a"
        assert await admin.topic_list() == ["Orders"]
        route = await admin.topic_route("Orders")
        assert {q.broker_name for q in route.queue_datas} == {"broker-a", "broker-b"}
        status = await admin.broker_status(brokers[0].address)
        assert status["brokerVersion"] == "479"
        assert await admin.delete_topic("Orders") == sorted(b.address for b in brokers)
        assert all("Orders" not in b.topics for b in brokers)
        assert await admin.topic_list() == []
        with pytest.raises(BrokerResponseError):
            await admin.topic_route("Orders")


async def test_topic_status_and_consumer_offsets(namesrv: FakeNameServer,
                                                 brokers: list[FakeBroker],
                                                 config: ClientConfig) -> None:
    namesrv.add_topic("T", brokers[:1], queues=2)
    for i in range(3):
        await brokers[0].put("T", 0, f"m{i}".encode(), {})
    brokers[0].offsets[("cg", "T", 0)] = 1
    async with AdminClient(config=config) as admin:
        status = await admin.topic_status("T")
        q0, q1 = status
        stored = brokers[0].stored("T", 0)
        assert (q0.queue, q0.min_offset, q0.max_offset) == (MessageQueue("T", "broker-a", 0),
                                                              0, 3)
        assert (q0.earliest_store_time, q0.last_update_time) == (stored[0].store_time,
                                                                  stored[-1].store_time)
        assert (q1.max_offset, q1.last_update_time) == (0, 0)
        offsets = await admin.consumer_offsets("cg", "T")
        assert [(o.broker_offset, o.consumer_offset, o.lag) for o in offsets] == [
            (3, 1, 2), (0, -1, 0)]


async def test_message_lookups(namesrv: FakeNameServer, brokers: list[FakeBroker],
                               config: ClientConfig) -> None:
    namesrv.add_topic("T", brokers)
    async with Producer("pg", config=config) as producer:
        sent = [await producer.send(Message("T", f"m{i}".encode(), {"KEYS": f"order-{i} all"}))
                for i in range(4)]
    async with AdminClient(config=config) as admin:
        by_offset_id = await admin.view_message(sent[0].offset_msg_id)
        assert by_offset_id.body == b"m0"
        by_uniq = await admin.view_message(sent[1].msg_id, topic="T")
        assert by_uniq.body == b"m1"
        with pytest.raises(MessageNotFoundError):
            await admin.view_message("not-an-id")
        assert [m.body for m in await admin.query_messages_by_key("T", "order-2")] == [b"m2"]
        everything = await admin.query_messages_by_key("T", "all")
        assert sorted(m.body for m in everything) == [b"m0", b"m1", b"m2", b"m3"]
        assert await admin.query_messages_by_key("T", "order") == []
        at = await admin.message_at(sent[3].queue, sent[3].queue_offset)
        assert at.body == b"m3"
        with pytest.raises(MessageNotFoundError) as beyond:
            await admin.message_at(sent[3].queue, sent[3].queue_offset + 1)
        # the error says which offsets the queue does hold
        assert beyond.value.reason == (
            f"NO_NEW_MSG: the queue holds offsets 0 to {sent[3].queue_offset}")
        queue = sent[3].queue  # named as an operator writes it, not as a Python repr
        assert beyond.value.key == (f"T {queue.broker_name}:{queue.queue_id} @ "
                                    f"{sent[3].queue_offset + 1}")
    assert brokers[0].log.of(RequestCode.VIEW_MESSAGE_BY_ID) or brokers[1].log.of(
        RequestCode.VIEW_MESSAGE_BY_ID)
