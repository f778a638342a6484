"""A topic and a subscription group created just before the master is killed are on the
new master: a controller-mode SYNC_MASTER answers a change only once its in-sync
replicas copied it (NOTIFY_METADATA_CHANGED), not at their next periodic copy, which
here is far away (slaveMetadataSyncInterval 10 minutes). Real processes on loopback:
three name servers with the controller embedded, broker-a as three brokers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.crash.broker_process import BrokerProcess
from tests.integration.failover_group import (
    GROUP,
    broker_group,
    eventually,
    namesrvs,
    read_queue,
    start_first_master,
)
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.client.group_admin import group_configs, update_group
from tidemq.codec.bodies import TopicRouteData
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import GetTopicConfigRequestHeader
from tidemq.errors import ResponseCode, TopicNotExistError
from tidemq.types import MessageQueue, SendStatus

__all__ = ["namesrvs"]  # fixture

TOPIC = "MadeJustBefore"
CONSUMER_GROUP = "made-just-before"


@pytest.fixture
def brokers(namesrvs: list[ControllerProcess], tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with broker_group(namesrvs, tmp_path, slaveMetadataSyncInterval="600000") as group:
        yield group


async def has_topic(admin: AdminClient, address: str) -> bool:
    header = GetTopicConfigRequestHeader(topic=TOPIC)
    response = await admin.instance.request(address, RemotingCommand.request(
        RequestCode.GET_TOPIC_CONFIG, header.to_ext()))
    return response.code == ResponseCode.SUCCESS


async def test_a_topic_and_group_created_just_before_the_kill_are_on_the_new_master(
        namesrvs: list[ControllerProcess], brokers: list[BrokerProcess]) -> None:
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=tuple(addrs), request_timeout=3.0)
    brokers[0].start()
    async with AdminClient(config=config) as admin:
        controllers = ControllerAdmin(admin.instance.request, addrs)

        async def group() -> object:
            return (await controllers.sync_state_set([GROUP])).replicas_info_table.get(GROUP)

        await eventually(group, lambda g: g is not None
                         and g.master_broker_id == 1)  # type: ignore[attr-defined]
        for b in brokers[1:]:
            b.start()
        await eventually(group, lambda g: len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]
        # (the controllers' in-sync set is what the master reported: it notifies those)
        old = brokers[0]
        await admin.create_topic(TOPIC, broker_addr=old.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await update_group(admin, {"groupName": CONSUMER_GROUP, "retryMaxTimes": 7},
                           [old.addr])
        old.kill9()  # at once

        g = await eventually(group, lambda g: g.master_broker_id in (2, 3))  # type: ignore[attr-defined]
        new = brokers[g.master_broker_id - 1]  # type: ignore[attr-defined]
        assert await has_topic(admin, new.addr)
        configs = await group_configs(admin, new.addr)
        assert configs[CONSUMER_GROUP]["retryMaxTimes"] == 7


async def test_a_topic_a_send_created_just_before_the_kill_is_served_by_the_new_master(
        namesrvs: list[ControllerProcess], brokers: list[BrokerProcess]) -> None:
    """A send that creates its topic (autoCreateTopicEnable) is acknowledged once the
    in-sync replicas hold its message; the topic's config reaches them only at their next
    copy, far away here. The new master still knows the topic, serves its messages to a
    consumer, and lists it in its route."""
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=tuple(addrs), request_timeout=3.0)
    topic = "SentJustBefore"
    async with AdminClient(config=config) as admin, \
            Producer("sent-just-before", config=config) as producer:
        controllers = ControllerAdmin(admin.instance.request, addrs)
        await start_first_master(controllers, brokers)

        async def group() -> object:
            return (await controllers.sync_state_set([GROUP])).replicas_info_table.get(GROUP)

        await eventually(group, lambda g: g is not None and g.master_broker_id == 1  # type: ignore[attr-defined]
                         and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]
        sent = []
        for i in range(6):
            result = await producer.send(Message(topic, f"s{i}".encode()))
            assert result.status is SendStatus.SEND_OK
            sent.append((result.queue.queue_id, f"s{i}".encode()))
        brokers[0].kill9()

        g = await eventually(group, lambda g: g.master_broker_id in (2, 3))  # type: ignore[attr-defined]
        new = brokers[g.master_broker_id - 1]  # type: ignore[attr-defined]
        header = GetTopicConfigRequestHeader(topic=topic)

        async def config_there() -> RemotingCommand:
            return await admin.instance.request(new.addr, RemotingCommand.request(
                RequestCode.GET_TOPIC_CONFIG, header.to_ext()))

        # (the new master adopts the topic once it has dispatched the log it copied)
        await eventually(config_there, lambda answer: answer.code == ResponseCode.SUCCESS)

        async def route_there() -> TopicRouteData | None:
            try:
                return await admin.topic_route(topic)
            except TopicNotExistError:  # the name servers dropped the dead master's routes
                return None

        route = await eventually(route_there, lambda r: r is not None and any(
            d.broker_addrs.get(0) == new.addr for d in r.broker_datas))
        assert route is not None
        assert route.queue_datas[0].read_queue_nums >= 1 + max(q for q, _ in sent)
        for queue_id in {q for q, _ in sent}:
            got = await read_queue(admin, new.addr, MessageQueue(topic, GROUP, queue_id))
            assert got == [body for q, body in sent if q == queue_id]
