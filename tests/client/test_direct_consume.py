"""CONSUME_MESSAGE_DIRECTLY (309) end to end on a real cluster: an admin has one stored
message consumed by one online push consumer, which answers how its listener took it.

The consumers subscribe to another topic than the message's, so the only way their
listener sees the message is the direct request."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidemq.client import (
    AdminClient,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    ThreadedPushConsumer,
    group_admin,
)
from tidemq.codec.bodies import CMResult
from tidemq.errors import ResponseCode, TideMQError
from tidemq.testing import Cluster

TOPIC, OTHER = "Direct", "DirectOther"


class Listener:
    """Answers ``self.answer`` (or raises it) and records what it was given."""

    def __init__(self) -> None:
        self.answer: Any = ConsumeStatus.CONSUME_SUCCESS
        self.got: list[MessageExt] = []

    async def __call__(self, msgs: list[MessageExt]) -> Any:
        self.got.extend(msgs)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=1) as running:
        async with AdminClient(running.namesrv_addr) as admin:
            for topic in (TOPIC, OTHER):
                await admin.create_topic(topic, cluster="DefaultCluster",
                                         read_queue_nums=1, write_queue_nums=1)
        registrar = running.brokers[0].registrar
        assert registrar is not None
        await registrar.register_all()  # the name server knows the topics from here on
        yield running


async def _send(namesrv: str, body: bytes = b"hello") -> Any:
    async with Producer("direct-producer", namesrv) as producer:
        return await producer.send(Message(TOPIC, body, {"TAGS": "t", "KEYS": "k1"}),
                                   queue=MessageQueue(TOPIC, "broker-a", 0))


async def _online(consumer: PushConsumer | ThreadedPushConsumer | PullConsumer) -> str:
    consumer.subscribe(OTHER)
    await consumer.start()
    assert not await consumer.instance.send_heartbeat()
    return consumer.instance.client_id


async def test_a_push_consumer_consumes_the_message_it_is_given(cluster: Cluster) -> None:
    sent = await _send(cluster.namesrv_addr)
    listener = Listener()
    consumer = PushConsumer("direct-g", cluster.namesrv_addr, listener=listener)
    client_id = await _online(consumer)
    try:
        async with AdminClient(cluster.namesrv_addr) as admin:
            result = await group_admin.consume_message_directly(
                admin, "direct-g", client_id, TOPIC, sent.msg_id)
            assert result.consume_result is CMResult.CR_SUCCESS
            assert (result.order, result.auto_commit, result.remark) == (False, True, None)
            assert result.spent_time_mills >= 0
            [msg] = listener.got
            assert (msg.body, msg.topic, msg.msg_id, msg.keys) == (
                b"hello", TOPIC, sent.msg_id, ["k1"])
            assert msg.broker_name == "broker-a"

            # by its offset id, without the topic, as queryMsgById does it
            again = await group_admin.consume_message_directly(
                admin, "direct-g", client_id, None, sent.offset_msg_id)
            assert again.consume_result is CMResult.CR_SUCCESS
            assert len(listener.got) == 2

            answers: list[tuple[Any, CMResult, str | None]] = [
                (ConsumeStatus.RECONSUME_LATER, CMResult.CR_LATER, None),
                (None, CMResult.CR_RETURN_NULL, None),
                (ValueError("no stock"), CMResult.CR_THROW_EXCEPTION, "ValueError: no stock"),
                ("maybe", CMResult.CR_LATER,
                 "the listener answered 'maybe', not a ConsumeStatus"),
            ]
            for answer, expected, remark in answers:
                listener.answer = answer
                got = await group_admin.consume_message_directly(
                    admin, "direct-g", client_id, TOPIC, sent.msg_id)
                assert (got.consume_result, got.remark) == (expected, remark), answer
            # nothing was committed for the message's topic by any of this
            [offset] = await admin.consumer_offsets("direct-g", TOPIC)
            assert offset.consumer_offset == -1
    finally:
        await consumer.close()


async def test_orderly_and_threaded_consumers_answer_too(cluster: Cluster) -> None:
    sent = await _send(cluster.namesrv_addr)
    seen: list[bytes] = []

    def blocking(msgs: list[MessageExt]) -> ConsumeStatus:
        seen.extend(m.body for m in msgs)
        return ConsumeStatus.RECONSUME_LATER

    orderly = PushConsumer("direct-orderly", cluster.namesrv_addr, listener=Listener(),
                           orderly=True)
    threaded = ThreadedPushConsumer("direct-threaded", cluster.namesrv_addr,
                                    listener=blocking)
    orderly_id = await _online(orderly)
    threaded_id = await _online(threaded)
    try:
        async with AdminClient(cluster.namesrv_addr) as admin:
            got = await group_admin.consume_message_directly(
                admin, "direct-orderly", orderly_id, TOPIC, sent.msg_id)
            assert (got.order, got.consume_result) == (True, CMResult.CR_SUCCESS)
            got = await group_admin.consume_message_directly(
                admin, "direct-threaded", threaded_id, TOPIC, sent.msg_id)
            assert (got.order, got.consume_result) == (False, CMResult.CR_LATER)
            assert seen == [b"hello"]
    finally:
        await orderly.close()
        await threaded.close()


async def test_who_cannot_consume_it_is_told_apart(cluster: Cluster) -> None:
    sent = await _send(cluster.namesrv_addr)
    puller = PullConsumer("direct-pull", cluster.namesrv_addr)
    pull_id = await _online(puller)
    listener = Listener()
    pusher = PushConsumer("direct-push", cluster.namesrv_addr, listener=listener)
    assert await _online(pusher) == pull_id  # one client instance per process
    try:
        async with AdminClient(cluster.namesrv_addr) as admin:
            with pytest.raises(TideMQError) as err:
                await group_admin.consume_message_directly(
                    admin, "direct-pull", pull_id, TOPIC, sent.msg_id)
            assert err.value.code == ResponseCode.SYSTEM_ERROR
            assert "not a push consumer" in str(err.value)

            with pytest.raises(TideMQError) as err:  # a client id not in the group
                await group_admin.consume_message_directly(
                    admin, "direct-push", "10.9.9.9@gone@1", TOPIC, sent.msg_id)
            assert err.value.code == ResponseCode.CONSUMER_NOT_ONLINE
            assert "10.9.9.9@gone@1" in str(err.value)
            assert listener.got == []
    finally:
        await puller.close()
        await pusher.close()


async def test_a_listener_slower_than_the_broker_waits_is_a_timeout(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidemq.broker import consumer_call
    from tidemq.broker.processors import consume_directly

    # The broker's wait, shortened where the processor calls the consumer (the timeout's
    # default is bound when call_consumer is defined: patching CLIENT_TIMEOUT does not
    # reach it).
    monkeypatch.setattr(consume_directly, "call_consumer",
                        functools.partial(consumer_call.call_consumer, timeout=0.3))
    sent = await _send(cluster.namesrv_addr)
    release = asyncio.Event()

    async def stuck(msgs: list[MessageExt]) -> ConsumeStatus:
        await release.wait()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("direct-slow", cluster.namesrv_addr, listener=stuck)
    client_id = await _online(consumer)
    try:
        async with AdminClient(cluster.namesrv_addr) as admin:
            with pytest.raises(TideMQError) as err:
                await group_admin.consume_message_directly(
                    admin, "direct-slow", client_id, TOPIC, sent.msg_id)
            assert err.value.code == ResponseCode.CONSUME_MSG_TIMEOUT
            assert client_id in str(err.value)
    finally:
        release.set()
        await consumer.close()
