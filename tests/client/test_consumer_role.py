"""The lifecycle every consumer shares (tidemq.client.consumer_role): checks before I/O,
a failed start gives the instance back, a group change reaches the consumer, and a close
whose commit fails still leaves the group."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tidemq.client import (
    ClientConfig,
    LmqConsumer,
    PullConsumer,
    PushConsumer,
    ThreadedPushConsumer,
)
from tidemq.client.consumer_role import ConsumerRole
from tidemq.client.errors import ClientClosedError
from tidemq.client.instance import ClientInstance
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import BrokerResponseError, ResponseCode
from tidemq.types import MessageQueue

from .fakes import FakeBroker, FakeNameServer


async def _never(msgs: Any) -> Any:
    raise AssertionError("no message is consumed in this test")


def _blocking_never(msgs: Any) -> Any:
    raise AssertionError("no message is consumed in this test")


_MAKERS: dict[str, Callable[..., ConsumerRole]] = {
    "pull": PullConsumer,
    "push": lambda group, **kw: PushConsumer(group, listener=_never, **kw),
    "threaded": lambda group, **kw: ThreadedPushConsumer(group, listener=_blocking_never, **kw),
    "lmq": lambda group, **kw: LmqConsumer(group, broker_addr="127.0.0.1:1", **kw),
}


@pytest.mark.parametrize("kind", sorted(_MAKERS))
def test_every_consumer_checks_group_and_start_point_before_any_io(kind: str) -> None:
    make = _MAKERS[kind]
    config = ClientConfig(namesrv_addr=("127.0.0.1:1",))
    with pytest.raises(ValueError, match="group 'a b'"):
        make("a b", config=config)
    with pytest.raises(ValueError, match="consume_timestamp"):
        make("g", config=config, consume_from=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP)
    consumer = make("g", config=config, consume_from=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
                    consume_timestamp=1)
    assert consumer.group == "g" and consumer.consume_timestamp == 1
    with pytest.raises(ClientClosedError):
        _ = consumer.instance


async def test_a_failed_start_gives_the_instance_back(config: ClientConfig,
                                                      namesrv: FakeNameServer) -> None:
    # The parent topic is unknown: the LMQ consumer's start fails after the instance ran.
    held = ClientInstance.acquire(config)
    consumer = LmqConsumer("lg", namesrv=config.namesrv_addr, parent_topic="Nowhere",
                           config=config)
    with pytest.raises(BrokerResponseError) as info:
        await consumer.start()
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    with pytest.raises(ClientClosedError):
        _ = consumer.instance
    assert not held.closed
    await held.release()  # the last reference: only so if the consumer gave its own back
    assert held.closed


async def test_a_given_instance_outlives_a_failed_start(config: ClientConfig,
                                                        namesrv: FakeNameServer) -> None:
    given = ClientInstance(config)
    consumer = LmqConsumer("lg", parent_topic="Nowhere", instance=given)
    with pytest.raises(BrokerResponseError):
        await consumer.start()
    assert not given.closed
    await given.close()


async def test_a_group_change_makes_the_pull_consumer_look_at_routes_again(
        config: ClientConfig, namesrv: FakeNameServer, brokers: list[FakeBroker]) -> None:
    a, b = brokers
    for broker in brokers:
        namesrv.add_broker(broker)
        # Heartbeats are taken without telling the group: the only change notice is ours.
        broker.on_conn(RequestCode.HEART_BEAT, lambda _conn, cmd: cmd.response())
    namesrv.add_topic("T", [a], queues=1)
    async with PullConsumer("cg", config=config) as consumer:
        consumer.subscribe("T")
        await consumer.poll(timeout=0.01)
        assert consumer.assignment() == [MessageQueue("T", "broker-a", 0)]
        namesrv.add_topic("T", [a, b], queues=1)
        await consumer.poll(timeout=0.01)
        assert consumer.assignment() == [MessageQueue("T", "broker-a", 0)]  # route cached
        consumer.on_consumer_ids_changed()
        await consumer.poll(timeout=0.01)
        assert consumer.assignment() == [MessageQueue("T", "broker-a", 0),
                                         MessageQueue("T", "broker-b", 0)]


async def test_a_close_whose_commit_fails_still_leaves_the_group(
        config: ClientConfig, namesrv: FakeNameServer, brokers: list[FakeBroker]) -> None:
    a = brokers[0]
    namesrv.add_broker(a)
    namesrv.add_topic("T", [a], queues=1)
    a.on(RequestCode.UPDATE_CONSUMER_OFFSET,
         lambda cmd: cmd.response(ResponseCode.SYSTEM_ERROR, "offset store is read-only"))
    consumer = PullConsumer("cg", config=config)
    await consumer.start()
    mq = MessageQueue("T", "broker-a", 0)
    consumer.assign([mq])
    consumer.seek(mq, 5)
    with pytest.raises(BrokerResponseError, match="read-only"):
        await consumer.close()
    with pytest.raises(ClientClosedError):
        _ = consumer.instance
    await a.log.wait_for(RequestCode.UNREGISTER_CLIENT)
    unregister: RemotingCommand = a.log.of(RequestCode.UNREGISTER_CLIENT)[0]
    assert unregister.ext_fields.get("consumerGroup") == "cg"
