"""BlockingPullConsumer.commit_all against a real cluster: every queue's offset is stored,
in one request a broker where the broker speaks the batch protocol and a request a queue
where it does not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.client import AdminClient, BlockingPullConsumer, Message, Producer
from tidemq.inprocess import Cluster
from tidemq.types import MessageQueue


@pytest.fixture(params=[True, False], ids=["batch", "no-batch"])
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=2,
                       broker={"batch_protocol_enable": request.param}) as running:
        yield running


async def test_commit_all_stores_every_queue_of_every_broker(cluster: Cluster) -> None:
    async with AdminClient(cluster.namesrv_addr) as admin:
        for broker in cluster.brokers:
            await admin.create_topic("Committed", read_queue_nums=3, write_queue_nums=3,
                                     broker_addr=broker.broker_addr)
    queues = [MessageQueue("Committed", f"broker-{b}", q) for b in "ab" for q in range(3)]
    async with Producer("committed-producer", cluster.namesrv_addr) as producer:
        for i, mq in enumerate(queues):
            for _ in range(i + 1):
                await producer.send(Message("Committed", b"x"), queue=mq)
    wanted = {mq: i + 1 for i, mq in enumerate(queues)}

    def commit_and_read() -> dict[MessageQueue, int | None]:
        with BlockingPullConsumer("committed-group", cluster.namesrv_addr) as consumer:
            consumer.commit_all(wanted)
            return {mq: consumer.committed(mq) for mq in queues}

    assert await asyncio.to_thread(commit_and_read) == wanted
