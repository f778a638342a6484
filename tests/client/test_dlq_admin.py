"""Dead-letter queues read and resent through :mod:`tidemq.client.dlq_admin`, on two real
brokers: each holds a DLQ queue of the group, and a page of it is the newest messages
over both, by store time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.client import (
    AdminClient,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    dlq_admin,
)
from tidemq.client.retry_sender import RetrySender
from tidemq.testing import Cluster

#: Dead letters made, alternately on the two brokers.
COUNT = 40


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=2) as running:
        yield running


async def _bury(cluster: Cluster, admin: AdminClient) -> None:
    await admin.create_topic("Pay", read_queue_nums=1, write_queue_nums=1)
    for broker in cluster.brokers:
        assert broker.registrar is not None
        await broker.registrar.register_all()
    names = sorted(b.config.broker_name for b in cluster.brokers)
    async with Producer("pay-producers", cluster.namesrv_addr) as producer:
        for i in range(COUNT):
            await producer.send(Message("Pay", f"bill-{i}".encode()),
                                queue=MessageQueue("Pay", names[i % 2], 0))
    for broker in cluster.brokers:
        broker.store.wait_dispatched()
    async with PullConsumer("payers", cluster.namesrv_addr) as consumer:
        consumer.subscribe("Pay")
        await consumer.instance.routes.get("Pay", refresh=True)
        await consumer.commit({MessageQueue("Pay", n, 0): 0 for n in names})
        polled: list[MessageExt] = []
        while len(polled) < COUNT:
            polled.extend(await consumer.poll(timeout=10))
        sender = RetrySender("payers", consumer.instance, max_reconsume_times=16)
        for msg in sorted(polled, key=lambda m: int(m.body.split(b"-")[1])):
            assert await sender.send_back(msg, -1)
    for broker in cluster.brokers:
        broker.store.wait_dispatched()
        assert broker.registrar is not None
        await broker.registrar.register_all()


async def test_pages_are_the_newest_over_every_queue(cluster: Cluster) -> None:
    admin = AdminClient(cluster.namesrv_addr)
    await admin.start()
    try:
        await _bury(cluster, admin)
        assert await dlq_admin.dlq_counts(admin) == {"payers": COUNT}
        every = [d async for d in dlq_admin.every_dead_letter(admin, "payers")]
        assert len(every) == COUNT and {d.broker_name for d in every} == {"broker-a",
                                                                         "broker-b"}
        newest = sorted(every, key=lambda d: -d.store_timestamp)
        for skip, limit in ((0, 20), (20, 20), (7, 5), (35, 20), (COUNT, 3)):
            page = await dlq_admin.dead_letters(admin, "payers", skip=skip, limit=limit)
            assert page.total == COUNT
            assert [d.store_timestamp for d in page.letters] == [
                d.store_timestamp for d in newest[skip:skip + limit]]
        whole = await dlq_admin.dead_letters(admin, "payers", limit=COUNT)
        assert sorted(d.msg_id for d in whole.letters) == sorted(d.msg_id for d in every)
        assert {d.topic for d in whole.letters} == {"Pay"}
    finally:
        await admin.close()
