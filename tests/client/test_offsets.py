"""Where a new consumer group starts a queue, against a real broker: like RocketMQ's
consumers, TideMQ's ask the broker without ``setZeroIfNotFound``, so a young queue (its
message 0 still held) is read from message 0 whatever the ``ConsumeFromWhere``; only
when the broker has no answer does the ``ConsumeFromWhere`` choose."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.client.received import Received

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    PushOptions,
)
from tidemq.client.maintenance_admin import delete_expired_commit_log
from tidemq.client.offsets import (
    min_offset_request,
    query_offset_request,
    read_committed,
    read_offset,
    start_query_request,
)
from tidemq.errors import TideMQError
from tidemq.testing import Cluster

LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
DEPRECATED = [ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET, ConsumeFromWhere.CONSUME_FROM_MAX_OFFSET,
              ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST]
STAMP = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
OPTIONS = PushOptions(rebalance_interval=1.0, persist_consumer_offset_interval=0.2,
                      handover_delay=0.0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path) as running:
        yield running


def _config(cluster: Cluster, name: str) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), instance_name=name,
                        long_polling_timeout=1.0, pull_error_backoff=0.1)


async def _topic_with(cluster: Cluster, topic: str, bodies: list[str]) -> None:
    """``topic`` with one queue holding ``bodies``, routed by the name server."""
    async with AdminClient(config=_config(cluster, "admin")) as admin:
        await admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        async with asyncio.timeout(10):
            while True:
                with contextlib.suppress(TideMQError):
                    if (await admin.topic_route(topic)).queue_datas:
                        break
                await asyncio.sleep(0.02)
    async with Producer("start-producer", config=_config(cluster, "p")) as producer:
        for body in bodies:
            await producer.send(Message(topic, body.encode()))


async def _started_at(consumer: PushConsumer, topic: str, offset: int) -> None:
    """Wait until ``consumer`` found its one queue of ``topic`` to start at ``offset``."""
    async with asyncio.timeout(20):  # no event says a queue's start was found
        while [q["nextPullOffset"] for q in consumer.running_queues()
               if q["topic"] == topic] != [offset]:
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("consume_from", [LAST, STAMP])
async def test_a_new_push_group_reads_a_young_queue_from_its_first_message(
        cluster: Cluster, consume_from: ConsumeFromWhere) -> None:
    bodies = [f"m{i}" for i in range(5)]
    await _topic_with(cluster, "Young", bodies)
    received = Received(len(bodies))

    stamp = int(time.time() * 1000) + 60_000 if consume_from is STAMP else None
    consumer = PushConsumer("young-push", config=_config(cluster, "c"),
                            listener=received.listener,
                            options=OPTIONS, consume_from=consume_from,
                            consume_timestamp=stamp)
    consumer.subscribe("Young")
    async with consumer:
        async with asyncio.timeout(20):
            await received.all_in.wait()
    assert [b.decode() for b in received.bodies] == bodies


async def test_a_new_pull_group_reads_a_young_queue_from_its_first_message(
        cluster: Cluster) -> None:
    bodies = [f"p{i}" for i in range(4)]
    await _topic_with(cluster, "YoungPull", bodies)
    got: list[str] = []
    async with PullConsumer("young-pull", config=_config(cluster, "c"),
                            consume_from=LAST) as consumer:
        consumer.subscribe("YoungPull")
        async with asyncio.timeout(20):
            while len(got) < len(bodies):
                got += [m.body.decode() for m in await consumer.poll(timeout=0.5)]
        queue = MessageQueue("YoungPull", "broker-a", 0)
        assert await consumer.committed(queue) is None  # no offset is made up for it
    assert got == bodies


async def test_the_two_queries_differ_only_for_a_group_without_an_offset(
        cluster: Cluster) -> None:
    await _topic_with(cluster, "Ask", ["a0"])
    queue = MessageQueue("Ask", "broker-a", 0)
    async with AdminClient(config=_config(cluster, "asker")) as admin:
        addr = await admin.instance.master_address(queue)

        async def ask(build: object) -> int | None:
            cmd = build("new-group", queue)  # type: ignore[operator]
            return read_committed(await admin.instance.request(addr, cmd), address=addr)

        assert await ask(query_offset_request) is None
        assert await ask(start_query_request) == 0



@pytest.fixture
async def no_memory(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A broker that counts no message as in memory: every queue is old."""
    async with Cluster(tmp_path, broker={"access_message_in_memory_max_ratio": 0}) as running:
        yield running


async def test_a_new_last_offset_group_skips_an_old_queue(no_memory: Cluster) -> None:
    await _topic_with(no_memory, "Old", ["before0", "before1"])
    queue = MessageQueue("Old", "broker-a", 0)
    async with AdminClient(config=_config(no_memory, "asker")) as admin:
        addr = await admin.instance.master_address(queue)
        answer = await admin.instance.request(addr, start_query_request("old-push", queue))
        assert read_committed(answer, address=addr) is None  # 22: message 0 is not young
    got: list[str] = []
    arrived = asyncio.Event()

    async def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body.decode() for m in msgs)
        arrived.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("old-push", config=_config(no_memory, "c"), listener=listen,
                            options=OPTIONS, consume_from=LAST)
    consumer.subscribe("Old")
    async with consumer:
        await _started_at(consumer, "Old", 2)
        async with Producer("after-producer", config=_config(no_memory, "p2")) as producer:
            await producer.send(Message("Old", b"after"))
        async with asyncio.timeout(20):
            await arrived.wait()
    assert got == ["after"]


@pytest.fixture
async def small_segments(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Commit-log segments of 4 KiB, any of them deletable at once."""
    async with Cluster(tmp_path, store={"mapped_file_size_commit_log": 4096,
                                        "file_reserved_time": 0}) as running:
        yield running


@pytest.mark.parametrize("consume_from", [LAST, FIRST, *DEPRECATED])
async def test_a_new_group_on_a_queue_whose_first_messages_were_deleted(
        small_segments: Cluster, consume_from: ConsumeFromWhere) -> None:
    """No 0 from the broker: FIRST starts at the min offset; LAST, and the deprecated
    values as RocketMQ's consumers read them, at the max offset."""
    cluster = small_segments
    await _topic_with(cluster, "Trimmed", ["x" * 1000] * 12)
    queue = MessageQueue("Trimmed", "broker-a", 0)
    async with AdminClient(config=_config(cluster, "asker")) as admin:
        addr = await admin.instance.master_address(queue)
        deleted = await delete_expired_commit_log(admin, [addr])
        assert deleted[addr] > 0
        low = read_offset(await admin.instance.request(addr, min_offset_request(queue)),
                          address=addr)
        assert 0 < low < 12
        answer = await admin.instance.request(addr, start_query_request("trim", queue))
        assert read_committed(answer, address=addr) is None
    got: list[int] = []
    arrived = asyncio.Event()

    async def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.queue_offset for m in msgs)
        if 12 in got:
            arrived.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("trim", config=_config(cluster, "c"), listener=listen,
                            options=OPTIONS, consume_from=consume_from)
    consumer.subscribe("Trimmed")
    async with consumer:
        if consume_from is not FIRST:
            await _started_at(consumer, "Trimmed", 12)
        async with Producer("after-producer", config=_config(cluster, "p2")) as producer:
            await producer.send(Message("Trimmed", b"after"))
        async with asyncio.timeout(20):
            await arrived.wait()
    assert got == ([12] if consume_from is not FIRST else list(range(low, 13)))
