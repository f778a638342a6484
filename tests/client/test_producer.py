"""Producer against scripted fake name server and brokers."""

from __future__ import annotations

import os

import pytest
from tests.client.fakes import FakeBroker, FakeNameServer

from tidemq.client import ClientConfig, MessageTooBigError, NoRouteError, Producer
from tidemq.codec.bodies import BrokerData
from tidemq.codec.command import RequestCode
from tidemq.codec.frame import FrameTooLargeToSend
from tidemq.codec.headers import SendMessageRequestHeaderV2
from tidemq.codec.message import decode_messages
from tidemq.errors import BrokerResponseError, ConnectionLost, ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.types import Message, MessageQueue, SendStatus


async def test_send_round_trip(namesrv: FakeNameServer, brokers: list[FakeBroker],
                               config: ClientConfig) -> None:
    namesrv.add_topic("Orders", brokers)
    async with Producer("pg", config=config) as producer:
        result = await producer.send(Message("Orders", b"hello", {"TAGS": "t", "KEYS": "k1"}))
    assert result.status is SendStatus.SEND_OK
    broker = next(b for b in brokers if b.name == result.queue.broker_name)
    [stored] = broker.stored("Orders", result.queue.queue_id)
    [msg] = decode_messages(stored.record)
    assert msg.body == b"hello" and msg.tags == "t" and msg.keys == ["k1"]
    assert result.msg_id == msg.properties["UNIQ_KEY"] == msg.msg_id
    assert msg.properties["WAIT"] == "true"
    assert decode_offset_msg_id(result.offset_msg_id)[1] == stored.phys
    assert result.queue_offset == 0
    [request] = broker.log.of(RequestCode.SEND_MESSAGE_V2)
    header = SendMessageRequestHeaderV2.from_ext(request.ext_fields)
    assert header.producer_group == "pg" and header.broker_name == broker.name
    # the group was announced and withdrawn
    assert any(b.log.of(RequestCode.UNREGISTER_CLIENT) for b in brokers)


async def test_sends_spread_over_queues(namesrv: FakeNameServer, brokers: list[FakeBroker],
                                        config: ClientConfig) -> None:
    namesrv.add_topic("Orders", brokers, queues=2)
    async with Producer("pg", config=config) as producer:
        results = [await producer.send(Message("Orders", b"x")) for _ in range(8)]
    assert {r.queue for r in results} == {
        MessageQueue("Orders", b.name, i) for b in brokers for i in range(2)}


async def test_retry_on_another_broker_after_system_busy(
        namesrv: FakeNameServer, brokers: list[FakeBroker], config: ClientConfig) -> None:
    busy, good = brokers
    namesrv.add_topic("Orders", brokers)
    busy.fail_always = ResponseCode.SYSTEM_BUSY
    async with Producer("pg", config=config) as producer:
        results = [await producer.send(Message("Orders", b"x")) for _ in range(10)]
    assert all(r.queue.broker_name == good.name for r in results)
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len(busy.log.of(RequestCode.SEND_MESSAGE_V2)) >= 1
    # each failure was followed by a route refresh
    assert len(namesrv.log.of(RequestCode.GET_ROUTEINFO_BY_TOPIC)) >= 2


async def test_gives_up_after_retries(namesrv: FakeNameServer, brokers: list[FakeBroker],
                                      config: ClientConfig) -> None:
    namesrv.add_topic("Orders", brokers)
    for b in brokers:
        b.fail_always = ResponseCode.SYSTEM_ERROR
    async with Producer("pg", config=config) as producer:
        with pytest.raises(BrokerResponseError) as info:
            await producer.send(Message("Orders", b"x"))
    assert info.value.code == ResponseCode.SYSTEM_ERROR
    sends = sum(len(b.log.of(RequestCode.SEND_MESSAGE_V2)) for b in brokers)
    assert sends == 1 + config.retry_times_when_send_failed


async def test_non_retriable_error_raises_at_once(
        namesrv: FakeNameServer, brokers: list[FakeBroker], config: ClientConfig) -> None:
    namesrv.add_topic("Orders", brokers)
    for b in brokers:
        b.fail(ResponseCode.MESSAGE_ILLEGAL)
    async with Producer("pg", config=config) as producer:
        with pytest.raises(BrokerResponseError) as info:
            await producer.send(Message("Orders", b"x"))
    assert info.value.code == ResponseCode.MESSAGE_ILLEGAL and not info.value.retriable
    assert sum(len(b.log.of(RequestCode.SEND_MESSAGE_V2)) for b in brokers) == 1


async def test_durability_doubt_is_a_status(namesrv: FakeNameServer, brokers: list[FakeBroker],
                                            config: ClientConfig) -> None:
    namesrv.add_topic("Orders", brokers[:1])
    brokers[0].fail(ResponseCode.FLUSH_DISK_TIMEOUT)
    async with Producer("pg", config=config) as producer:
        result = await producer.send(Message("Orders", b"x"))
    assert result.status is SendStatus.FLUSH_DISK_TIMEOUT
    assert len(brokers[0].log.of(RequestCode.SEND_MESSAGE_V2)) == 1


async def test_auto_create_through_tbw102(namesrv: FakeNameServer, brokers: list[FakeBroker],
                                          config: ClientConfig) -> None:
    namesrv.add_topic("TBW102", brokers[:1], queues=8, perm=7)
    async with Producer("pg", config=config) as producer:
        results = [await producer.send(Message("Fresh", b"x")) for _ in range(6)]
    assert {r.queue.queue_id for r in results} == {0, 1, 2, 3}  # clamped to 4 queues
    assert brokers[0].topics["Fresh"] == 4
    header = SendMessageRequestHeaderV2.from_ext(
        brokers[0].log.of(RequestCode.SEND_MESSAGE_V2)[0].ext_fields)
    assert (header.topic, header.default_topic, header.default_topic_queue_nums) == (
        "Fresh", "TBW102", 4)
    asked = [r.ext_fields["topic"] for r in namesrv.log.of(RequestCode.GET_ROUTEINFO_BY_TOPIC)]
    assert asked[:2] == ["Fresh", "TBW102"]


async def test_oversized_message_fails_before_sending(
        namesrv: FakeNameServer, brokers: list[FakeBroker]) -> None:
    namesrv.add_topic("Orders", brokers)
    config = ClientConfig(namesrv_addr=(namesrv.address,), max_message_size=1024)
    async with Producer("pg", config=config) as producer:
        with pytest.raises(MessageTooBigError) as info:
            await producer.send(Message("Orders", b"x" * 1025))
        with pytest.raises(MessageTooBigError):
            await producer.send_batch([Message("Orders", b"x" * 600)] * 2)
    assert info.value.size == 1025 and info.value.limit == 1024
    assert not namesrv.log.of(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    assert not any(b.log.of(RequestCode.SEND_MESSAGE_V2) for b in brokers)


async def test_a_message_over_the_frame_limit_fails_before_sending(
        namesrv: FakeNameServer, brokers: list[FakeBroker]) -> None:
    """Even with a raised max_message_size, no frame over the 16 MiB limit leaves."""
    namesrv.add_topic("Orders", brokers)
    config = ClientConfig(namesrv_addr=(namesrv.address,), max_message_size=32 * 1024 * 1024)
    async with Producer("pg", config=config) as producer:
        with pytest.raises(FrameTooLargeToSend) as info:
            await producer.send(Message("Orders", os.urandom(17 * 1024 * 1024)))  # no squeeze
    assert info.value.limit == 16 * 1024 * 1024 and info.value.size > 17 * 1024 * 1024
    assert info.value.code == RequestCode.SEND_MESSAGE_V2
    assert not any(b.log.of(RequestCode.SEND_MESSAGE_V2) for b in brokers)


async def test_send_batch(namesrv: FakeNameServer, brokers: list[FakeBroker],
                          config: ClientConfig) -> None:
    namesrv.add_topic("Orders", brokers)
    msgs = [Message("Orders", f"m{i}".encode(), {"KEYS": f"k{i}"}) for i in range(3)]
    async with Producer("pg", config=config) as producer:
        result = await producer.send_batch(msgs, queue=MessageQueue("Orders", "broker-b", 2))
    assert result.queue == MessageQueue("Orders", "broker-b", 2)
    stored = brokers[1].stored("Orders", 2)
    decoded = [decode_messages(s.record)[0] for s in stored]
    assert [m.body for m in decoded] == [b"m0", b"m1", b"m2"]
    assert result.msg_id == ",".join(m.properties["UNIQ_KEY"] for m in decoded)
    assert len(result.offset_msg_id.split(",")) == 3 and result.queue_offset == 0
    assert brokers[1].log.of(RequestCode.SEND_BATCH_MESSAGE)


async def test_sharding_key_keeps_one_queue(namesrv: FakeNameServer,
                                            brokers: list[FakeBroker],
                                            config: ClientConfig) -> None:
    namesrv.add_topic("Orders", brokers)
    async with Producer("pg", config=config) as producer:
        queues = {(await producer.send(Message("Orders", b"x"), sharding_key="order-7")).queue
                  for _ in range(5)}
        picked = await producer.send(Message("Orders", b"y"),
                                     selector=lambda qs, _m: qs[-1])
    assert len(queues) == 1
    assert picked.queue == MessageQueue("Orders", "broker-b", 3)


async def test_unknown_topic_without_template(namesrv: FakeNameServer,
                                              config: ClientConfig) -> None:
    async with Producer("pg", config=config) as producer:
        with pytest.raises(BrokerResponseError) as info:
            await producer.send(Message("Nowhere", b"x"))
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST


async def test_no_writable_queue(namesrv: FakeNameServer, brokers: list[FakeBroker],
                                 config: ClientConfig) -> None:
    namesrv.add_topic("ReadOnly", brokers, perm=4)
    async with Producer("pg", config=config) as producer:
        with pytest.raises(NoRouteError):
            await producer.send(Message("ReadOnly", b"x"))


async def test_not_started(config: ClientConfig) -> None:
    producer = Producer("pg", config=config)
    with pytest.raises(Exception, match="not running"):
        await producer.send(Message("T", b"x"))


async def test_name_server_down(config: ClientConfig, namesrv: FakeNameServer) -> None:
    await namesrv.close()
    async with Producer("pg", config=config) as producer:
        with pytest.raises(ConnectionLost):
            await producer.send(Message("T", b"x"))


async def test_a_fixed_queue_send_finds_the_new_master_after_the_old_one_died(
        namesrv: FakeNameServer, brokers: list[FakeBroker], config: ClientConfig) -> None:
    # broker-a's master dies and a new one takes over (controller mode): the failed send
    # to it says the route is out of date, so the next send asks the name server again
    old, new = brokers
    namesrv.add_topic("Fail", [old])
    queue = MessageQueue("Fail", "broker-a", 0)
    async with Producer("pg", config=config) as producer:
        assert (await producer.send(Message("Fail", b"1"), queue=queue)).status is (
            SendStatus.SEND_OK)
        await old.close()
        new.name = "broker-a"
        namesrv.add_broker(new)
        namesrv.add_topic("Fail", [new])
        with pytest.raises(ConnectionLost):
            await producer.send(Message("Fail", b"2"), queue=queue)
        result = await producer.send(Message("Fail", b"3"), queue=queue)
    assert result.status is SendStatus.SEND_OK
    [stored] = new.stored("Fail", 0)
    assert [m.body for m in decode_messages(stored.record)] == [b"3"]


async def test_a_send_fetches_a_route_without_a_master_again(
        namesrv: FakeNameServer, brokers: list[FakeBroker], config: ClientConfig) -> None:
    # the only group's master died and the controllers elected another: a route fetched
    # between the two lists no master, and a send must not keep it until the periodic
    # refresh -- it asks again, as upstream's producer does when its route is not ok
    broker = brokers[0]
    namesrv.brokers[broker.name] = BrokerData(cluster=broker.cluster, broker_name=broker.name,
                                              broker_addrs={1: broker.address})
    namesrv.add_topic("Elect", [broker])
    async with Producer("pg", config=config) as producer:
        with pytest.raises(NoRouteError):
            await producer.send(Message("Elect", b"1"))
        namesrv.add_broker(broker)  # the new master is listed
        namesrv.add_topic("Elect", [broker])
        result = await producer.send(Message("Elect", b"2"))
    assert result.status is SendStatus.SEND_OK
    assert config.poll_name_server_interval >= 30  # no periodic refresh came in between
