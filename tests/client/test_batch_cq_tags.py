"""Tag subscriptions on BatchCQ topics against a real broker: the broker keeps an inner
batch when any of its messages carries a subscribed tag, and the client keeps exactly
those messages -- the same messages a classic topic gives."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
    PushOptions,
)
from tidemq.errors import TideMQError
from tidemq.testing import Cluster

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
#: A mixed batch, one all "tag0", one all "tag1": 30 messages in three batches.
BATCHES = [[f"tag{i % 2}" for i in range(20)], ["tag0"] * 5, ["tag1"] * 5]
TOTAL = sum(map(len, BATCHES))


def bodies(tag: str | None) -> list[bytes]:
    """What a subscription to ``tag`` (``None``: everything) must get, sorted."""
    out = []
    for b, tags in enumerate(BATCHES):
        out += [f"b{b}m{i}".encode() for i, t in enumerate(tags) if tag in (None, t)]
    return sorted(out)


@pytest.fixture
def cfg(cluster: Cluster) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=1.0,
                        pull_error_backoff=0.05)


@pytest.fixture(params=[False, True], ids=["classic", "batch_cq"])
async def topic(request: pytest.FixtureRequest, cfg: ClientConfig) -> str:
    """A one-queue topic holding :data:`BATCHES`, each sent with ``send_batch``."""
    name = "Tagged"
    async with AdminClient(config=cfg) as admin:
        await admin.create_topic(name, read_queue_nums=1, write_queue_nums=1,
                                 attributes={"queue.type": "BatchCQ"} if request.param else None)
        async with asyncio.timeout(10):
            while True:
                with contextlib.suppress(TideMQError):
                    if (await admin.topic_route(name)).queue_datas:
                        break
                await asyncio.sleep(0.02)
    async with Producer("pg", config=cfg) as producer:
        for b, tags in enumerate(BATCHES):
            await producer.send_batch([Message(name, f"b{b}m{i}".encode(), {"TAGS": t})
                                       for i, t in enumerate(tags)])
    return name


async def _pull(cfg: ClientConfig, topic: str, expression: str, group: str, *,
                columns: bool = False) -> list[tuple[bytes, str | None]]:
    """(body, tag) of everything a new pull consumer group subscribed with
    ``expression`` gets until it has read the whole queue; ``columns``: through
    ``poll_batches``."""
    got: list[tuple[bytes, str | None]] = []
    async with PullConsumer(group, config=cfg, consume_from=FIRST) as consumer:
        consumer.subscribe(topic, expression)
        async with asyncio.timeout(20):
            while True:
                if columns:
                    for batch in await consumer.poll_batches(timeout=0.2):
                        got += [(body, batch.tags(i)) for i, body in enumerate(batch.bodies)]
                else:
                    got += [(m.body, m.tags) for m in await consumer.poll(timeout=0.2)]
                queues = consumer.assignment()
                if queues and consumer.position(queues[0]) == TOTAL:
                    break
    return got


async def test_pull_by_tag_gets_the_matching_messages_of_batches(cfg: ClientConfig,
                                                                  topic: str) -> None:
    assert sorted(b for b, _ in await _pull(cfg, topic, "*", "all")) == bodies(None)
    for columns in (False, True):
        ones = await _pull(cfg, topic, "tag1", f"ones{columns}", columns=columns)
        assert sorted(b for b, _ in ones) == bodies("tag1")
        assert {t for _, t in ones} == {"tag1"}
    either = await _pull(cfg, topic, "tag0 || tag1", "either")
    assert sorted(b for b, _ in either) == bodies(None)
    assert await _pull(cfg, topic, "tag7", "none") == []


async def test_push_by_tag_gets_the_matching_messages_of_batches(cfg: ClientConfig,
                                                                  topic: str) -> None:
    got: list[MessageExt] = []

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    options = PushOptions(rebalance_interval=1.0, persist_consumer_offset_interval=0.2)
    consumer = PushConsumer("push-cg", config=cfg, listener=listener, options=options,
                            consume_from=FIRST)
    consumer.subscribe(topic, "tag0")
    async with AdminClient(config=cfg) as admin:
        await consumer.start()
        try:
            async with asyncio.timeout(20):
                while True:  # every offset consumed and committed: nothing else may come
                    with contextlib.suppress(TideMQError):
                        offsets = await admin.consumer_offsets("push-cg", topic)
                        if [o.consumer_offset for o in offsets] == [TOTAL]:
                            break
                    await asyncio.sleep(0.05)
        finally:
            await consumer.close()
    assert sorted(m.body for m in got) == bodies("tag0")
    assert {m.tags for m in got} == {"tag0"}
