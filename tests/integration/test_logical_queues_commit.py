"""Logical queues (RIP-21): UPDATE_CONSUMER_OFFSET on a logical queue is refused past the
queue's logical max offset -- whether the last segment is on the broker receiving the
commit, on another broker (asked), or sealed -- and, with the last segment's broker down,
taken only up to what is provably below the max."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.integration import test_logical_queues as base
from tests.integration.test_logical_queues import TOPIC, create

from tidemq.broker.app import BrokerApp
from tidemq.client import AdminClient, Producer
from tidemq.client.logical_admin import LogicalQueueAdmin
from tidemq.codec.batch_protocol import MERGED_REMARK, decode_batch_response, encode_batch_request
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.net import RemotingClient
from tidemq.testing import Cluster
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue

GROUP = "lq-commit"


cluster = base.cluster  # three brokers


@pytest.fixture
async def plain() -> AsyncIterator[RemotingClient]:
    client = RemotingClient()
    yield client
    await client.close()


def broker(cluster: Cluster, name: str) -> BrokerApp:
    return next(b for b in cluster.brokers if b.config.broker_name == name)


async def send(cluster: Cluster, lq: int, count: int) -> None:
    async with Producer("lq-commit-producer", cluster.namesrv_addr) as producer:
        for i in range(count):
            await producer.send(Message(TOPIC, f"m{i}".encode()),
                                queue=MessageQueue(TOPIC, LOGICAL_BROKER, lq))
    for b in cluster.brokers:
        b.store.wait_dispatched()


async def commit(plain: RemotingClient, via: BrokerApp, lq: int,
                 offset: int) -> RemotingCommand:
    return await plain.request(via.broker_addr, RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC,
                                             "queueId": str(lq),
                                             "commitOffset": str(offset)}), 5)


async def test_a_commit_past_the_logical_max_is_refused_wherever_the_max_lives(
        cluster: Cluster, admin: AdminClient, plain: RemotingClient) -> None:
    await create(admin, ["broker-a", "broker-b"])  # LQ 0 on broker-a, LQ 1 on broker-b
    await send(cluster, 0, 3)
    a, b, c = (broker(cluster, n) for n in ("broker-a", "broker-b", "broker-c"))
    for via in (a, b, c):  # a: the leader itself; b, c: asked over the network
        refused = await commit(plain, via, 0, 1 << 62)
        assert refused.code == ResponseCode.INVALID_PARAMETER, via.config.broker_name
        assert refused.remark == (f"commitOffset {1 << 62} is beyond the max offset 3 of "
                                  f"logical queue {TOPIC}/0")
        assert (await commit(plain, via, 0, 4)).code == ResponseCode.INVALID_PARAMETER
        negative = await commit(plain, via, 0, -5)
        assert negative.code == ResponseCode.INVALID_PARAMETER
        assert via.offsets.query(GROUP, TOPIC, 0) is None  # nothing stored
    assert (await commit(plain, b, 0, 3)).code == ResponseCode.SUCCESS  # "consumed all"
    assert b.offsets.query(GROUP, TOPIC, 0) == 3
    assert (await commit(plain, a, 1, 1)).code == ResponseCode.INVALID_PARAMETER  # empty LQ

    # Migrated: the old segment sealed at 3 on broker-a, the leader on broker-b from 3.
    await LogicalQueueAdmin(admin).migrate(TOPIC, 0, "broker-b")
    await send(cluster, 0, 2)
    for via in (a, b, c):
        refused = await commit(plain, via, 0, 6)
        assert refused.code == ResponseCode.INVALID_PARAMETER, via.config.broker_name
        assert "beyond the max offset 5 of" in (refused.remark or "")
        assert (await commit(plain, via, 0, 5)).code == ResponseCode.SUCCESS


async def test_with_the_leader_down_only_provable_offsets_are_taken(
        cluster: Cluster, admin: AdminClient, plain: RemotingClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    await send(cluster, 0, 3)
    await LogicalQueueAdmin(admin).migrate(TOPIC, 0, "broker-b")  # leader from 3 on b
    await send(cluster, 0, 2)
    a, b = broker(cluster, "broker-a"), broker(cluster, "broker-b")
    await b.stop()
    assert (await commit(plain, a, 0, 2)).code == ResponseCode.SUCCESS  # in the sealed one
    assert (await commit(plain, a, 0, 3)).code == ResponseCode.SUCCESS  # the leader's start
    unsure = await commit(plain, a, 0, 4)  # may well exist: the leader cannot say
    assert unsure.code == ResponseCode.SYSTEM_BUSY
    assert "cannot be checked against the max offset" in (unsure.remark or "")
    assert "broker-b" in (unsure.remark or "")
    assert a.offsets.query(GROUP, TOPIC, 0) == 3


async def pull_committing(plain: RemotingClient, via: BrokerApp, lq: int, offset: int,
                          commit_offset: int, group: str = GROUP) -> RemotingCommand:
    """A pull carrying a commit (sysFlag bit 0), as RocketMQ push consumers send."""
    return await plain.request(via.broker_addr, RemotingCommand.request(
        RequestCode.PULL_MESSAGE, {
            "consumerGroup": group, "topic": TOPIC, "queueId": str(lq),
            "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "1",
            "commitOffset": str(commit_offset), "suspendTimeoutMillis": "0",
            "subVersion": "0", "bname": LOGICAL_BROKER}), 5)


async def test_a_commit_piggy_backed_past_the_max_is_dropped_and_the_pull_served(
        cluster: Cluster, admin: AdminClient, plain: RemotingClient) -> None:
    await create(admin, ["broker-a", "broker-b"])  # LQ 0 on broker-a
    await send(cluster, 0, 3)
    a, b = broker(cluster, "broker-a"), broker(cluster, "broker-b")
    for via, good in ((a, 2), (b, 3)):  # the leader itself; the leader's broker asked
        group = f"{GROUP}-{via.config.broker_name}"
        pulled = await pull_committing(plain, via, 0, 0, 1 << 62, group)
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
        assert via.offsets.query(group, TOPIC, 0) is None, via.config.broker_name
        again = await pull_committing(plain, via, 0, 0, good, group)
        assert again.code == ResponseCode.SUCCESS
        assert via.offsets.query(group, TOPIC, 0) == good, via.config.broker_name

    # Reading the sealed segment on broker-a while the leader (from 3) is on broker-b.
    await LogicalQueueAdmin(admin).migrate(TOPIC, 0, "broker-b")
    await send(cluster, 0, 2)
    pulled = await pull_committing(plain, a, 0, 0, 6, GROUP)
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    assert pulled.ext_fields["maxOffset"] == "5"
    assert a.offsets.query(GROUP, TOPIC, 0) is None  # 6 dropped
    assert (await pull_committing(plain, a, 0, 0, 5, GROUP)).code == ResponseCode.SUCCESS
    assert a.offsets.query(GROUP, TOPIC, 0) == 5


async def test_batched_commits_are_checked_each(
        cluster: Cluster, admin: AdminClient, plain: RemotingClient) -> None:
    """The client batches its commits (BATCH_REQUEST); a child asked of another broker
    is answered when that broker replies, each with its own verdict."""
    await create(admin, ["broker-a", "broker-b"])  # LQ 0 on broker-a, LQ 1 on broker-b
    await send(cluster, 0, 3)
    b = broker(cluster, "broker-b")
    children = [RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(lq),
        "commitOffset": str(offset)}) for lq, offset in ((0, 3), (0, 1 << 62), (1, 0))]
    for opaque, child in enumerate(children, 1):
        child.opaque = opaque
    parent = encode_batch_request(RequestCode.UPDATE_CONSUMER_OFFSET, children)
    resp = await plain.request(b.broker_addr, parent, 5)
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, MERGED_REMARK)
    got = decode_batch_response(resp, [c.opaque for c in children])
    assert [r.code for r in got] == [ResponseCode.SUCCESS, ResponseCode.INVALID_PARAMETER,
                                     ResponseCode.SUCCESS]
    assert b.offsets.query(GROUP, TOPIC, 0) == 3 and b.offsets.query(GROUP, TOPIC, 1) == 0
