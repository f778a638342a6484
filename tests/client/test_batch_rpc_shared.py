"""The client's batch requester: the shared-header pull form once a broker accepts it,
and parents that leave as soon as they are full (pipelining)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.client import Message, MessageQueue
from tidemq.client.batch_rpc import BatchRequester, batch_requester
from tidemq.client.instance import ClientInstance
from tidemq.client.pull import pull_request, read_pull_response
from tidemq.client.subscription import Subscription
from tidemq.codec.batch_protocol import CHILD_FORM_KEY, SHARED_FORM
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import GetMaxOffsetRequestHeader
from tidemq.testing import Cluster
from tidemq.types import PullStatus

from .test_batch_rpc import QUEUES, TOPIC, config, make_cluster, producer, queues


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await make_cluster(tmp_path)
    yield c
    await c.stop()


def spy(rpc: BatchRequester) -> list[RemotingCommand]:
    """The parents ``rpc`` sends, recorded."""
    sent: list[RemotingCommand] = []
    inst = rpc._instance
    real = inst.request

    async def request(address: str, cmd: RemotingCommand, timeout: float
                      ) -> RemotingCommand:
        if cmd.code == RequestCode.BATCH_REQUEST:
            sent.append(cmd)
        return await real(address, cmd, timeout)

    inst.request = request  # type: ignore[method-assign]
    return sent


async def test_pulls_go_in_the_shared_form_once_the_broker_accepts_it(
        cluster: Cluster) -> None:
    p = await producer(cluster)
    try:
        for mq in queues(cluster):
            await p.send_batch([Message(TOPIC, f"{mq.queue_id}:{i}".encode()) for i in range(3)],
                                 queue=mq)
    finally:
        await p.close()
    assert await asyncio.to_thread(cluster.brokers[0].store.wait_dispatched, 10.0)
    inst = ClientInstance(config(cluster))
    try:
        rpc = batch_requester(inst)
        parents = spy(rpc)
        addr = cluster.brokers[0].broker_addr
        sub = Subscription.parse("*")

        async def pull(mq: MessageQueue, offset: int) -> tuple[PullStatus, int, list[bytes]]:
            cmd = pull_request("cg", mq, offset, max_nums=2, subscription=sub)
            result = read_pull_response(await rpc.request(addr, cmd), mq, sub, address=addr,
                                        offset=offset)
            return result.status, result.next_offset, [m.body for m in result.messages]

        first = await asyncio.gather(*(pull(mq, 0) for mq in queues(cluster)))
        assert rpc.support.shares(addr)
        second = await asyncio.gather(*(pull(mq, 2) for mq in queues(cluster)))
        third = await asyncio.gather(*(pull(mq, 3) for mq in queues(cluster)))
        assert [p.ext_fields.get(CHILD_FORM_KEY) for p in parents] == [None, SHARED_FORM,
                                                                       SHARED_FORM]
        for q in range(QUEUES):
            assert first[q] == (PullStatus.FOUND, 2, [f"{q}:0".encode(), f"{q}:1".encode()])
            assert second[q] == (PullStatus.FOUND, 3, [f"{q}:2".encode()])
            assert third[q] == (PullStatus.NO_NEW_MSG, 3, [])
    finally:
        await inst.close()


async def test_pulls_that_differ_in_more_than_position_go_as_standard_children(
        cluster: Cluster) -> None:
    inst = ClientInstance(config(cluster))
    try:
        rpc = batch_requester(inst)
        addr = cluster.brokers[0].broker_addr
        rpc.support.mark(addr, True)
        rpc.support.mark_shared(addr, True)
        parents = spy(rpc)
        mqs = queues(cluster)
        cmds = [pull_request("cg", mqs[0], 0, max_nums=1, subscription=Subscription.parse("*")),
                pull_request("other", mqs[1], 0, max_nums=1,
                             subscription=Subscription.parse("*"))]
        got = await asyncio.gather(*(rpc.request(addr, c) for c in cmds))
        assert [r.code for r in got] == [19, 19]
        assert [p.ext_fields.get(CHILD_FORM_KEY) for p in parents] == [None]
    finally:
        await inst.close()


async def test_a_refused_shared_parent_turns_the_form_off(cluster: Cluster) -> None:
    inst = ClientInstance(config(cluster))
    try:
        rpc = batch_requester(inst)
        addr = cluster.brokers[0].broker_addr
        rpc.support.mark(addr, True)
        rpc.support.mark_shared(addr, True)
        batch = cluster.brokers[0].batch
        assert batch is not None
        batch._max_children = 1  # the shared parent of 2 children is refused with 29
        sub = Subscription.parse("*")
        cmds = [pull_request("cg", mq, 0, max_nums=1, subscription=sub)
                for mq in queues(cluster)[:2]]
        got = await asyncio.gather(*(rpc.request(addr, c) for c in cmds))
        assert [r.code for r in got] == [19, 19]  # each sent alone instead
        assert not rpc.support.shares(addr)
    finally:
        await inst.close()


async def test_a_full_parent_leaves_at_once(cluster: Cluster) -> None:
    inst = ClientInstance(config(cluster))
    try:
        rpc = BatchRequester(inst, flush_at=4)
        parents = spy(rpc)
        addr = cluster.brokers[0].broker_addr

        def ask(q: int) -> RemotingCommand:
            header = GetMaxOffsetRequestHeader(topic=TOPIC, queue_id=q % QUEUES)
            return RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header.to_ext())

        got = await asyncio.gather(*(rpc.request(addr, ask(q)) for q in range(10)))
        assert [r.code for r in got] == [0] * 10
        assert rpc.stats.parents == 3 and rpc.stats.children == 10  # 4 + 4 + 2
        assert len(parents) == 3
    finally:
        await inst.close()


async def test_a_shared_parent_answered_as_standard_turns_the_form_off(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker that took the shared parent for a standard one (it never offered the
    form) answers without ``childForm``: the children are sent again, one by one."""
    inst = ClientInstance(config(cluster))
    try:
        rpc = batch_requester(inst)
        addr = cluster.brokers[0].broker_addr
        rpc.support.mark(addr, True)
        rpc.support.mark_shared(addr, True)
        real = inst.request

        async def forgetful(address: str, cmd: RemotingCommand, timeout: float
                            ) -> RemotingCommand:
            resp = await real(address, cmd, timeout)
            resp.ext_fields.pop(CHILD_FORM_KEY, None)
            return resp

        monkeypatch.setattr(inst, "request", forgetful)
        sub = Subscription.parse("*")
        cmds = [pull_request("cg", mq, 0, max_nums=1, subscription=sub)
                for mq in queues(cluster)[:3]]
        got = await asyncio.gather(*(rpc.request(addr, c) for c in cmds))
        assert [r.code for r in got] == [19, 19, 19]
        assert not rpc.support.shares(addr)
    finally:
        await inst.close()
