"""Producer.send_multi in shared-header send parents (tidemq.client.shared_send):
negotiated by a standard parent, the results of sends to fixed queues, errors in place,
and fall-back against brokers without the form or the feature."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.client import Message, MessageQueue
from tidemq.client.batch_rpc import BatchRequester, Support, batch_requester
from tidemq.client.errors import MessageTooBigError
from tidemq.client.pull import pull_request
from tidemq.client.subscription import Subscription
from tidemq.codec.batch_protocol import CHILD_FORM_KEY, SEND_SHARED_FORM
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import BrokerResponseError, ResponseCode, error_for_code
from tidemq.net import Connection
from tidemq.testing import Cluster
from tidemq.types import SendStatus

from .test_batch_rpc import QUEUES, TOPIC, make_cluster, producer, queues
from .test_batch_rpc_shared import spy


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await make_cluster(tmp_path)
    yield c
    await c.stop()


@pytest.fixture
async def legacy(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await make_cluster(tmp_path, batch_protocol_enable=False)
    yield c
    await c.stop()


def items(cluster: Cluster, tag: str) -> list[tuple[Message, MessageQueue]]:
    return [(Message(TOPIC, f"{tag}{mq.queue_id}".encode(), {"TAGS": tag}), mq)
            for mq in queues(cluster)]


def shared_parents(sent: list[RemotingCommand]) -> list[RemotingCommand]:
    return [c for c in sent if c.ext_fields.get(CHILD_FORM_KEY) == SEND_SHARED_FORM]


async def test_send_multi_uses_the_form_once_the_broker_accepts_it(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        rpc = batch_requester(p.instance)
        sent = spy(rpc)
        first = await p.send_multi(items(cluster, "a"))  # a standard parent offers the form
        assert shared_parents(sent) == [] and len(sent) == 1
        assert rpc.support.shares_send(cluster.brokers[0].broker_addr)
        second = await p.send_multi(items(cluster, "b"))
        assert len(shared_parents(sent)) == 1 and len(sent) == 2
        assert rpc.stats.parents == 2 and rpc.stats.children == 2 * QUEUES
        for a, b in zip(first, second, strict=True):
            assert (b.status, b.queue, b.queue_offset) == (SendStatus.SEND_OK, a.queue, 1)
            assert b.msg_id and b.msg_id != a.msg_id and b.offset_msg_id != a.offset_msg_id
        assert await asyncio.to_thread(cluster.brokers[0].store.wait_dispatched, 10.0)
        resp = await p.instance.request(cluster.brokers[0].broker_addr, RemotingCommand.request(
            RequestCode.PULL_MESSAGE, {"consumerGroup": "cg", "topic": TOPIC, "queueId": "3",
                                       "queueOffset": "1", "maxMsgNums": "1", "sysFlag": "0",
                                       "commitOffset": "0", "suspendTimeoutMillis": "0",
                                       "subVersion": "0"}), 5.0)
        [stored] = decode_messages(resp.full_body())
        assert (stored.body, stored.tags, stored.msg_id) == (b"b3", "b", second[3].msg_id)
    finally:
        await p.close()


async def test_each_failure_stays_in_place(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        await p.send_multi(items(cluster, "warm"))
        good = queues(cluster)[:2]
        todo = [(Message(TOPIC, b"a"), good[0]),
                (Message(TOPIC, b"b"), MessageQueue(TOPIC, "broker-a", 500)),
                (Message(TOPIC, b"x" * (p.config.max_message_size + 1)), good[1]),
                (Message(TOPIC, b"c"), good[1])]
        sent = spy(batch_requester(p.instance))
        results = await p.send_multi(todo, return_exceptions=True)
        assert len(shared_parents(sent)) == 1
        assert isinstance(results[1], BrokerResponseError)
        assert results[1].code == ResponseCode.INVALID_PARAMETER
        assert isinstance(results[2], MessageTooBigError)
        assert [getattr(r, "queue_offset", None) for r in results] == [1, None, None, 1]
    finally:
        await p.close()


async def test_a_broker_that_cannot_read_the_form_gets_plain_children(
        cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        await p.send_multi(items(cluster, "warm"))
        broker = cluster.brokers[0]
        assert broker.batch is not None

        def refuse(_conn: Connection, _cmd: RemotingCommand) -> None:  # an older TideMQ
            raise error_for_code(ResponseCode.INVALID_PARAMETER, "childForm not supported")

        broker.batch._shared_send = refuse  # type: ignore[method-assign]
        rpc = batch_requester(p.instance)
        results = await p.send_multi(items(cluster, "b"))
        assert [r.queue_offset for r in results] == [1] * QUEUES
        assert not rpc.support.shares_send(broker.broker_addr)
        assert rpc.support.state(broker.broker_addr) is Support.PRESENT
    finally:
        await p.close()


async def test_without_the_feature_every_send_goes_alone(legacy: Cluster) -> None:
    p = await producer(legacy)
    try:
        rpc = batch_requester(p.instance)
        for tag in "ab":
            results = await p.send_multi(items(legacy, tag))
            assert [r.queue.queue_id for r in results] == list(range(QUEUES))
        assert rpc.stats.parents == 1 and rpc.stats.rpcs == 1 + 2 * QUEUES
        assert not rpc.support.shares_send(legacy.brokers[0].broker_addr)
    finally:
        await p.close()


async def test_coalesced_sends_go_in_the_form_too(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        await p.send_multi(items(cluster, "warm"))
        rpc = batch_requester(p.instance)
        sent = spy(rpc)
        mq = queues(cluster)[2]
        results = await asyncio.gather(*(p.send(Message(TOPIC, str(i).encode()), queue=mq)
                                         for i in range(20)))
        assert [r.queue_offset for r in results] == list(range(1, 21))
        assert len({r.offset_msg_id for r in results}) == 20
        assert shared_parents(sent) == sent and len(sent) >= 1
    finally:
        await p.close()


async def test_pulls_leave_in_parents_of_pull_flush_at(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        rpc = BatchRequester(p.instance, flush_at=2, pull_flush_at=3)
        sent = spy(rpc)
        addr = cluster.brokers[0].broker_addr
        pulls = [pull_request("cg", mq, 0, max_nums=1, subscription=Subscription.parse(TOPIC))
                 for mq in queues(cluster)[:7]]
        got = await asyncio.gather(*(rpc.request(addr, cmd) for cmd in pulls))
        assert len(got) == 7 and len(sent) == 2  # 3 + 3 + 1: the last one goes alone
        assert (rpc.stats.children, rpc.stats.rpcs) == (6, 3)
    finally:
        await p.close()


async def test_big_bodies_are_compressed_as_alone(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        await p.send_multi(items(cluster, "warm"))
        big = bytes(range(256)) * 40  # above compress_msg_body_over_howmuch
        mqs = queues(cluster)[:2]
        sent = spy(batch_requester(p.instance))
        results = await p.send_multi([(Message(TOPIC, big), mqs[0]),
                                      (Message(TOPIC, b"small"), mqs[1])])
        assert len(shared_parents(sent)) == 1
        alone = await p.send(Message(TOPIC, big), queue=mqs[0])
        assert await asyncio.to_thread(cluster.brokers[0].store.wait_dispatched, 10.0)
        resp = await p.instance.request(cluster.brokers[0].broker_addr, RemotingCommand.request(
            RequestCode.PULL_MESSAGE, {"consumerGroup": "cg", "topic": TOPIC, "queueId": "0",
                                       "queueOffset": "1", "maxMsgNums": "2", "sysFlag": "0",
                                       "commitOffset": "0", "suspendTimeoutMillis": "0",
                                       "subVersion": "0"}), 5.0)
        shared, single = decode_messages(resp.full_body())
        assert shared.body == single.body == big
        assert shared.sys_flag == single.sys_flag and shared.sys_flag & 0x300  # zlib
        assert (shared.msg_id, single.msg_id) == (results[0].msg_id, alone.msg_id)
        assert shared.store_size == single.store_size
    finally:
        await p.close()


async def test_a_refused_coalesced_parent_sends_its_children_alone(cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        await p.send_multi(items(cluster, "warm"))
        broker = cluster.brokers[0]
        assert broker.batch is not None

        def refuse(_conn: Connection, _cmd: RemotingCommand) -> None:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, "childForm not supported")

        broker.batch._shared_send = refuse  # type: ignore[method-assign]
        rpc = batch_requester(p.instance)
        mq = queues(cluster)[5]
        results = await asyncio.gather(*(p.send(Message(TOPIC, str(i).encode()), queue=mq)
                                         for i in range(5)))
        assert sorted(r.queue_offset for r in results) == list(range(1, 6))
        assert not rpc.support.shares_send(broker.broker_addr)
        assert not rpc.support.offers_send(broker.broker_addr)
    finally:
        await p.close()
