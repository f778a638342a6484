"""PullConsumer.poll_batches against poll on a real cluster: the same messages, positions
and commits -- plain topics, BatchCQ inner batches (plain and zstd), starts inside a
batch, tag filters, seeks, and the two mixed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.client.test_batching import BATCH_CQ, create, dispatched, text_messages

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    Message,
    MessageBatch,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    message_batch,
)
from tidemq.client.sending import BatchCompression
from tidemq.codec.compression import CompressionType
from tidemq.testing import Cluster

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
_END = 40  # what _fill writes


@pytest.fixture(autouse=True)
def _columns_for_small_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """These bodies are small: read them as columns all the same (see SMALL_BODY)."""
    monkeypatch.setattr(message_batch, "SMALL_BODY", 0)


@pytest.fixture
def cfg(cluster: Cluster) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=0.5,
                        pull_error_backoff=0.1, pull_batch_size=16)


@pytest.fixture
async def admin(cfg: ClientConfig) -> AsyncIterator[AdminClient]:
    async with AdminClient(config=cfg) as client:
        yield client


async def _fill(cluster: Cluster, admin: AdminClient, cfg: ClientConfig, topic: str, *,
                batch_cq: bool = False, codec: CompressionType | None = None,
                batches: int = 4, size: int = 10) -> MessageQueue:
    await create(admin, topic, queues=1, attributes=BATCH_CQ if batch_cq else None,
                 brokers=1)
    async with Producer("pg", config=cfg,
                        batch_compression=BatchCompression(codec, min_saving=0.0)) as producer:
        queue = None
        for b in range(batches):
            msgs = text_messages(topic, size, size=60 + b, start=b * size)
            if b == 1:  # keys, ids and a message without a tag
                msgs[0] = Message(topic, b"no tag", {"KEYS": "k1 k2"})
            result = await producer.send_batch(msgs, queue=queue)
            queue = result.queue
    await dispatched(cluster)
    assert queue is not None
    return queue


async def _read(cfg: ClientConfig, mq: MessageQueue, *, columns: bool, start: int = 0,
                expression: str = "*", max_messages: int = 7, group: str = "cg",
                stop: int = _END) -> tuple[list[MessageExt], list[MessageBatch], int | None]:
    """Everything from ``start``: the messages, the batches (columns), the end position."""
    msgs: list[MessageExt] = []
    batches: list[MessageBatch] = []
    async with PullConsumer(group, config=cfg, consume_from=FIRST) as consumer:
        consumer.assign([mq], expression)
        consumer.seek(mq, start)
        for _ in range(60):
            if columns:
                got = await consumer.poll_batches(timeout=0.3, max_messages=max_messages)
                assert all(len(b) for b in got)
                assert sum(len(b) for b in got) <= max_messages
                batches += got
                got_msgs = [m for b in got for m in b.messages()]
            else:
                got_msgs = await consumer.poll(timeout=0.3, max_messages=max_messages)
            if consumer.position(mq) == stop and not got_msgs:
                break
            msgs += got_msgs
            if expression == "*" and got_msgs:
                assert consumer.position(mq) == got_msgs[-1].queue_offset + 1
        return msgs, batches, consumer.position(mq)


def _columns_agree(batches: list[MessageBatch], msgs: list[MessageExt]) -> None:
    rows = [(b, i) for b in batches for i in range(len(b))]
    assert len(rows) == len(msgs)
    for (batch, i), m in zip(rows, msgs, strict=True):
        assert batch.bodies[i] == m.body
        assert int(batch.queue_offsets[i]) == m.queue_offset
        assert int(batch.store_timestamps[i]) == m.store_timestamp
        assert batch.properties(i) == m.properties
        assert (batch.tags(i), batch.keys(i), batch.msg_id(i)) == (m.tags, m.keys, m.msg_id)


@pytest.mark.parametrize("kind", ["plain", "batchcq", "batchcq-zstd"])
async def test_poll_batches_returns_what_poll_returns(cluster: Cluster, admin: AdminClient,
                                                      cfg: ClientConfig, kind: str) -> None:
    codec = CompressionType.ZSTD if kind == "batchcq-zstd" else None
    mq = await _fill(cluster, admin, cfg, f"T_{kind.replace('-', '_')}",
                     batch_cq=kind != "plain", codec=codec)
    want, _, end = await _read(cfg, mq, columns=False)
    assert [m.queue_offset for m in want] == list(range(40)) and end == 40
    for start in (0, 3, 15):  # 3 and 15 fall inside an inner batch of a BatchCQ topic
        got, batches, got_end = await _read(cfg, mq, columns=True, start=start)
        assert got == want[start:] and got_end == end
        _columns_agree(batches, got)
        assert all(b.columnar for b in batches)
        assert all(b.queue == mq for b in batches)


@pytest.mark.parametrize("batch_cq", [False, True])
async def test_tag_filter(cluster: Cluster, admin: AdminClient, cfg: ClientConfig,
                          batch_cq: bool) -> None:
    mq = await _fill(cluster, admin, cfg, f"Tags{int(batch_cq)}", batch_cq=batch_cq)
    want, _, end = await _read(cfg, mq, columns=False, expression="a", start=5)
    got, batches, got_end = await _read(cfg, mq, columns=True, expression="a", start=5)
    assert all(m.tags == "a" for m in want)
    assert len(want) == 18  # odd positions of each batch of 10 are "a": 3 + 3 * 5 from 5
    assert got == want and got_end == end
    _columns_agree(batches, got)


async def test_positions_commit_seek_and_mixing(cluster: Cluster, admin: AdminClient,
                                                cfg: ClientConfig) -> None:
    mq = await _fill(cluster, admin, cfg, "Mix", batch_cq=True)
    want, _, _ = await _read(cfg, mq, columns=False, group="ref")
    got: list[MessageExt] = []
    async with PullConsumer("cg-mix", config=cfg, consume_from=FIRST) as consumer:
        consumer.assign([mq])
        first = await consumer.poll_batches(timeout=2, max_messages=4)
        assert sum(len(b) for b in first) == 4
        got += [m for b in first for m in b]
        assert consumer.position(mq) == 4
        await consumer.commit()
        assert await consumer.committed(mq) == 4
        got += await consumer.poll(timeout=2, max_messages=5)  # the rest of that pull
        assert consumer.position(mq) == 9
        more = await consumer.poll_batches(timeout=2, max_messages=3)
        got += [m for b in more for m in b]
        assert got == want[:len(got)] and consumer.position(mq) == len(got) > 9
        consumer.seek(mq, 30)
        after = await consumer.poll_batches(timeout=2, max_messages=4)
        assert after[0].queue_offsets[0] == 30
        assert [m for b in after for m in b] == want[30:30 + sum(len(b) for b in after)]
    # close committed the position reached
    async with PullConsumer("cg-mix", config=cfg, consume_from=FIRST) as again:
        again.assign([mq])
        resumed = await again.poll_batches(timeout=2, max_messages=1)
        assert resumed[0].queue_offsets[0] == 30 + sum(len(b) for b in after)


async def test_compressed_single_messages_are_backed_by_objects(
        cluster: Cluster, admin: AdminClient, cfg: ClientConfig) -> None:
    await create(admin, "Big", queues=1, brokers=1)
    async with Producer("pg", config=cfg) as producer:
        result = await producer.send(Message("Big", b"compress me " * 1000, {"TAGS": "a"}))
        await producer.send(Message("Big", b"small"), queue=result.queue)
    await dispatched(cluster)
    want, _, _ = await _read(cfg, result.queue, columns=False, stop=2)
    got, batches, _ = await _read(cfg, result.queue, columns=True, stop=2)
    assert len(want) == 2 and got == want
    assert not batches[0].columnar
    _columns_agree(batches, got)
