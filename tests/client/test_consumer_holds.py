"""Pull and push consumers long polling a real broker: a caught-up queue's pull goes alone,
so news on one queue answers that queue's pull only and the others stay held; pulls
applied in the order they finished, a pull started ahead after the one it follows."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)
from tidemq.client.batch_rpc import batch_requester
from tidemq.client.pull import PullResult
from tidemq.client.queue_state import Fetched
from tidemq.codec.batch_protocol import DISPATCH_CODE_KEY
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import TideMQError
from tidemq.testing import Cluster
from tidemq.types import MessageExt, MessageQueue, PullStatus

TOPIC = "Holds"
QUEUES = 4


def config(cluster: Cluster) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), request_timeout=5.0,
                        long_polling_timeout=15.0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await Cluster(tmp_path).start()
    try:
        async with AdminClient(config=config(c)) as admin:
            await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            async with asyncio.timeout(10):  # the broker registers the new topic soon after
                while True:
                    with contextlib.suppress(TideMQError):
                        route = await admin.instance.routes.get(TOPIC, refresh=True)
                        if len(route.subscribe_queues) == QUEUES:
                            break
                    await asyncio.sleep(0.05)
        yield c
    finally:
        await c.stop()


async def _held(cluster: Cluster, count: int) -> None:
    holds = cluster.brokers[0].pull_holds
    async with asyncio.timeout(5):
        while holds.held_count != count:  # parked when the pull arrives
            await asyncio.sleep(0.01)


async def test_news_on_one_queue_leaves_the_other_caught_up_pulls_held(
        cluster: Cluster) -> None:
    mqs = [MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)]
    consumer = PullConsumer("cg", config=config(cluster))
    consumer.assign(mqs)
    await consumer.start()
    producer = Producer("pg", config=config(cluster))
    await producer.start()
    try:
        assert await consumer.poll(timeout=0.3) == []  # positions found, one parent held
        await producer.send(Message(TOPIC, b"one"), queue=mqs[1])
        assert [m.body for m in await consumer.poll(timeout=10)] == [b"one"]
        # Every queue is caught up now: each pull goes alone and is held on its own.
        rpc = batch_requester(consumer.instance)
        parents = rpc.stats.parents
        assert await consumer.poll(timeout=0.3) == []
        await _held(cluster, QUEUES)
        await producer.send(Message(TOPIC, b"two"), queue=mqs[2])
        got = await consumer.poll(timeout=10)
        assert [(m.body, m.queue_id, m.queue_offset) for m in got] == [(b"two", 2, 0)]
        assert cluster.brokers[0].pull_holds.held_count == QUEUES - 1  # still waiting
        assert rpc.stats.parents == parents
        await producer.send(Message(TOPIC, b"three"), queue=mqs[3])
        assert [m.body for m in await consumer.poll(timeout=10)] == [b"three"]
        assert consumer.position(mqs[1]) == 1 and consumer.position(mqs[3]) == 1
    finally:
        await producer.close()
        await consumer.close(commit=False)


def _msg(mq: MessageQueue, offset: int) -> MessageExt:
    return MessageExt(mq.topic, str(offset).encode(), {}, mq.queue_id, offset, 0, 0, 0, 0,
                      "", 0, "", 0, broker_name=mq.broker_name)


async def _fetched(mq: MessageQueue, start: int, end: int) -> Fetched:
    return Fetched(start, False, PullResult(PullStatus.FOUND, end, 0, end,
                                             [_msg(mq, o) for o in range(start, end)]))


async def test_a_pull_ahead_that_finished_first_is_applied_after_the_one_it_follows(
        ) -> None:
    mq = MessageQueue(TOPIC, "broker-a", 0)
    consumer = PullConsumer("cg", "127.0.0.1:9876")
    consumer.assign([mq])
    state = consumer._states[mq]
    state.fetch_offset = 0
    first = asyncio.ensure_future(_fetched(mq, 0, 2))
    ahead = asyncio.ensure_future(_fetched(mq, 2, 4))
    await asyncio.gather(first, ahead)
    state.task, state.next, state.next_offset = first, ahead, 2
    consumer._finished = [(mq, ahead)]  # the earlier pull has not been reported yet
    consumer._apply_finished()
    assert state.buffered == 0 and consumer._finished == [(mq, ahead)]
    consumer._finished.append((mq, first))
    consumer._apply_finished()
    assert consumer._finished == []
    assert [m.queue_offset for m in state.take(10)] == [0, 1, 2, 3]
    assert state.task is None and state.next is None and state.fetch_offset == 4


async def test_a_push_consumers_caught_up_pulls_go_alone(cluster: Cluster) -> None:
    """The push consumer too: once its queues are caught up, news on one queue answers
    that queue's pull only; no pull parent is sent again (it would be answered whole by
    the first queue with news, and every other queue pulled again)."""
    got: list[bytes] = []
    wanted = QUEUES
    arrived = asyncio.Event()

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body for m in msgs)
        if len(got) >= wanted:
            arrived.set()
        return ConsumeStatus.CONSUME_SUCCESS

    mqs = [MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)]
    producer = Producer("pg", config=config(cluster))
    await producer.start()
    # A message on every queue first: each queue's first pull is answered at once, so
    # every queue is caught up after it, whichever queues the consumer's first parents
    # grouped (a queue whose start was found later is pulled in a parent of its own).
    for mq in mqs:
        await producer.send(Message(TOPIC, f"one-{mq.queue_id}".encode()), queue=mq)
    consumer = PushConsumer("push-holds", config=config(cluster), listener=listener,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC)
    await consumer.start()
    inst = consumer.instance
    pull_parents: list[RemotingCommand] = []
    sent = inst.request

    async def spy(addr: str, cmd: RemotingCommand, timeout: float | None = None
                  ) -> RemotingCommand:
        if (cmd.code == RequestCode.BATCH_REQUEST
                and cmd.ext_fields.get(DISPATCH_CODE_KEY) == str(int(RequestCode.PULL_MESSAGE))):
            pull_parents.append(cmd)
        return await sent(addr, cmd, timeout)

    inst.request = spy  # type: ignore[method-assign]
    try:
        await asyncio.wait_for(arrived.wait(), 10)
        # each caught-up queue's pull, alone, and the retry queue's (the group's first
        # heartbeat answers once its retry topic is routed, so the consumer reads it at once)
        await _held(cluster, QUEUES + 1)
        before = len(pull_parents)
        wanted += 1
        arrived.clear()
        await producer.send(Message(TOPIC, b"two"), queue=mqs[2])
        await asyncio.wait_for(arrived.wait(), 10)
        await _held(cluster, QUEUES + 1)
        assert sorted(got) == sorted([f"one-{q}".encode() for q in range(QUEUES)] + [b"two"])
        assert len(pull_parents) == before  # every pull since went alone
    finally:
        await producer.close()
        await consumer.close()
