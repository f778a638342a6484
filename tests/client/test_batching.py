"""Batches from the client side against a real cluster: inner batches to BatchCQ topics
(compressed end to end), outer batches elsewhere, pulls from inside a batch, and the
auto-batching producer."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.client import (
    AdminClient,
    BlockingProducer,
    BlockingPullConsumer,
    ClientConfig,
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    SendStatus,
)
from tidemq.client.batching import AutoBatchProducer
from tidemq.client.errors import (
    ClientClosedError,
    InvalidMessageError,
    InvalidPropertyError,
    InvalidTopicError,
    MessageTooBigError,
)
from tidemq.client.instance import ClientInstance
from tidemq.client.pull import pull_request, read_pull_response
from tidemq.client.queue_types import QueueType
from tidemq.client.sending import BatchCompression, prepare_send_batch
from tidemq.client.subscription import Subscription
from tidemq.codec.compression import COMPRESSION_MASK, CompressionType
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import BrokerResponseError, LocalProtocolError, ResponseCode
from tidemq.formats.record import Record, decode_record
from tidemq.testing import Cluster
from tidemq.types import PullStatus

BATCH_CQ = {"queue.type": "BatchCQ"}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=2) as running:
        yield running


@pytest.fixture
def cfg(cluster: Cluster) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=2.0,
                        pull_error_backoff=0.1)


@pytest.fixture
async def admin(cfg: ClientConfig) -> AsyncIterator[AdminClient]:
    async with AdminClient(config=cfg) as client:
        yield client


@pytest.fixture
async def producer(cfg: ClientConfig) -> AsyncIterator[Producer]:
    async with Producer("pg", config=cfg) as p:
        yield p


async def create(admin: AdminClient, topic: str, queues: int = 2, *,
                 attributes: dict[str, str | None] | None = None,
                 broker_addr: str | None = None, brokers: int = 2) -> None:
    await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues,
                             attributes=attributes, broker_addr=broker_addr)
    async with asyncio.timeout(5):
        while True:
            try:
                if len((await admin.topic_route(topic)).queue_datas) == brokers:
                    return
            except BrokerResponseError:
                pass
            await asyncio.sleep(0.02)


async def dispatched(cluster: Cluster) -> None:
    for broker in cluster.brokers:
        assert await asyncio.to_thread(broker.store.wait_dispatched, 10.0)


async def read_queue(inst: ClientInstance, mq: MessageQueue, start: int = 0
                     ) -> list[MessageExt]:
    """Every message of ``mq`` from ``start`` (pulls of 64)."""
    addr = await inst.master_address(mq)
    sub = Subscription.parse(mq.topic)
    out: list[MessageExt] = []
    offset = start
    while True:
        resp = await inst.request(addr, pull_request("reader", mq, offset, max_nums=64,
                                                     subscription=sub))
        result = read_pull_response(resp, mq, sub, address=addr, offset=offset)
        if result.status is not PullStatus.FOUND:
            return out
        out += result.messages
        offset = result.next_offset


def stored_records(cluster: Cluster, mq: MessageQueue) -> list[Record]:
    broker = next(b for b in cluster.brokers if b.config.broker_name == mq.broker_name)
    store = broker.store
    out: list[Record] = []
    offset = 0
    while True:
        got = store.get(mq.topic, mq.queue_id, offset, max_count=1000)
        if not got.found:
            return out
        for buf in got.buffers:
            pos = 0
            while pos < len(buf):
                rec = decode_record(buf, pos)
                assert isinstance(rec, Record)
                out.append(rec)
                pos += rec.total_size
        offset = got.next_begin_offset


def text_messages(topic: str, n: int, size: int = 128, start: int = 0) -> list[Message]:
    """Compressible bodies (the same few words over and over)."""
    return [Message(topic, (f"msg {start + i:06d} " * 20).encode()[:size],
                    {"TAGS": "a" if i % 2 else "b"}) for i in range(n)]


# ---------------------------------------------------------------------- send_batch


async def test_batch_to_batch_cq_is_one_zstd_record(cluster: Cluster, admin: AdminClient,
                                                    producer: Producer) -> None:
    await create(admin, "Bcq", attributes=BATCH_CQ)
    msgs = text_messages("Bcq", 100)
    first = await producer.send_batch(msgs)
    second = await producer.send_batch(text_messages("Bcq", 50, start=100), queue=first.queue)
    assert first.status is SendStatus.SEND_OK and first.message_count == 100
    assert first.queue_offsets == range(0, 100)
    assert second.queue_offsets == range(100, 150)
    assert "," not in first.msg_id and "," not in first.offset_msg_id
    await dispatched(cluster)
    records = stored_records(cluster, first.queue)
    assert len(records) == 2
    assert all(r.sys_flag & 0xC1 == 0xC1 for r in records)  # inner batch, compressed
    assert {r.sys_flag & COMPRESSION_MASK for r in records} == {int(CompressionType.ZSTD) << 8}
    assert len(records[0].body) < 100 * 128 // 4  # compressed end to end
    got = await read_queue(producer.instance, first.queue)
    assert [m.queue_offset for m in got] == list(range(150))
    assert [m.body for m in got[:100]] == [m.body for m in msgs]
    assert [m.tags for m in got[:4]] == ["b", "a", "b", "a"]
    assert len({m.msg_id for m in got}) == 150 and first.msg_id not in {m.msg_id for m in got}


@pytest.mark.parametrize("codec", [None, *CompressionType])
async def test_every_codec_round_trips_end_to_end(cluster: Cluster, admin: AdminClient,
                                                  cfg: ClientConfig,
                                                  codec: CompressionType | None) -> None:
    await create(admin, "Codec", attributes=BATCH_CQ)
    async with Producer("pg-codec", config=cfg,
                        batch_compression=BatchCompression(codec)) as producer:
        msgs = text_messages("Codec", 64, size=300)
        result = await producer.send_batch(msgs)
        await dispatched(cluster)
        (record,) = stored_records(cluster, result.queue)
        want = 0 if codec is None else (int(codec) << 8) | 1
        assert record.sys_flag & (COMPRESSION_MASK | 1) == want
        got = await read_queue(producer.instance, result.queue)
    assert [m.body for m in got] == [m.body for m in msgs]


async def test_incompressible_batches_are_sent_as_they_are(cluster: Cluster,
                                                           admin: AdminClient,
                                                           producer: Producer) -> None:
    await create(admin, "Noise", attributes=BATCH_CQ)
    msgs = [Message("Noise", os.urandom(2000)) for _ in range(20)]
    result = await producer.send_batch(msgs)
    await dispatched(cluster)
    (record,) = stored_records(cluster, result.queue)
    assert record.sys_flag & 1 == 0  # zstd would not have saved 5 %
    assert [m.body for m in await read_queue(producer.instance, result.queue)] == [
        m.body for m in msgs]


async def test_plain_topics_get_outer_batches(cluster: Cluster, admin: AdminClient,
                                              producer: Producer) -> None:
    await create(admin, "Plain")
    msgs = text_messages("Plain", 20)
    result = await producer.send_batch(msgs)
    assert result.message_count == 20 and result.queue_offsets == range(20)
    assert result.msg_id.count(",") == 19 and result.offset_msg_id.count(",") == 19
    await dispatched(cluster)
    records = stored_records(cluster, result.queue)
    assert len(records) == 20 and all(r.sys_flag & 0xC1 == 0 for r in records)
    got = await read_queue(producer.instance, result.queue)
    assert [m.msg_id for m in got] == result.msg_id.split(",")


async def test_queue_type_is_asked_per_broker(cluster: Cluster, admin: AdminClient,
                                              producer: Producer) -> None:
    a, b = (broker.broker_addr for broker in cluster.brokers)
    await create(admin, "Mixed", attributes=BATCH_CQ, broker_addr=a, brokers=1)
    await create(admin, "Mixed", broker_addr=b)
    results = [await producer.send_batch(text_messages("Mixed", 10)) for _ in range(4)]
    await dispatched(cluster)
    by_broker = {r.queue.broker_name: r for r in results}
    assert sorted(by_broker) == ["broker-a", "broker-b"]
    inner = stored_records(cluster, by_broker["broker-a"].queue)
    outer = stored_records(cluster, by_broker["broker-b"].queue)
    assert len(inner) * 10 == len(outer)
    route = await producer.instance.routes.get("Mixed")
    assert producer.queue_types.cached("Mixed", "broker-a", route) is QueueType.BATCH
    assert producer.queue_types.cached("Mixed", "broker-b", route) is QueueType.SIMPLE


async def test_a_stale_queue_type_falls_back_to_an_outer_batch(cluster: Cluster,
                                                               admin: AdminClient,
                                                               producer: Producer) -> None:
    await create(admin, "Flip", attributes=BATCH_CQ)
    before = await producer.send_batch(text_messages("Flip", 5))
    assert "," not in before.msg_id
    await admin.delete_topic("Flip")
    await create(admin, "Flip")  # the same name, SimpleCQ now
    after = await producer.send_batch(text_messages("Flip", 5), queue=before.queue)
    assert after.status is SendStatus.SEND_OK and after.msg_id.count(",") == 4


async def test_hints_and_explicit_types_are_trusted(cluster: Cluster, admin: AdminClient,
                                                    cfg: ClientConfig) -> None:
    await create(admin, "Hinted")
    async with Producer("pg-hint", config=cfg, queue_types={"Hinted": "BatchCQ"}) as wrong:
        with pytest.raises(BrokerResponseError) as info:
            await wrong.send_batch(text_messages("Hinted", 3))
        assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
        ok = await wrong.send_batch(text_messages("Hinted", 3), queue_type="SimpleCQ")
        assert ok.msg_id.count(",") == 2


async def test_pull_consumer_starts_inside_a_batch(cluster: Cluster, admin: AdminClient,
                                                   cfg: ClientConfig,
                                                   producer: Producer) -> None:
    await create(admin, "Mid", queues=1, attributes=BATCH_CQ)
    first = await producer.send_batch(text_messages("Mid", 10))
    await producer.send_batch(text_messages("Mid", 10, start=10), queue=first.queue)
    await dispatched(cluster)
    async with PullConsumer("cg", config=cfg,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as consumer:
        consumer.assign([first.queue])
        consumer.seek(first.queue, 7)
        got: list[MessageExt] = []
        async with asyncio.timeout(10):
            while len(got) < 13:
                got += await consumer.poll(timeout=1)
        assert [m.queue_offset for m in got] == list(range(7, 20))
        assert consumer.position(first.queue) == 20
        assert len({m.msg_id for m in got}) == 13

    def blocking() -> None:
        with BlockingPullConsumer("cg2", config=cfg) as pull:
            status, nxt, _lo, hi, msgs = pull.pull(first.queue, 13, max_nums=4)
            assert status is PullStatus.FOUND and (nxt, hi) == (20, 20)
            assert [m.queue_offset for m in msgs] == list(range(13, 20))

    await asyncio.to_thread(blocking)


async def test_blocking_producer_sends_inner_batches(cluster: Cluster, admin: AdminClient,
                                                     cfg: ClientConfig) -> None:
    await create(admin, "SyncBcq", attributes=BATCH_CQ)
    await create(admin, "SyncPlain")

    def work() -> tuple[object, ...]:
        with BlockingProducer("pg-sync", config=cfg) as producer:
            inner = producer.send_batch(text_messages("SyncBcq", 30))
            outer = producer.send_batch(text_messages("SyncPlain", 30))
        return inner, outer

    inner, outer = await asyncio.to_thread(work)
    await dispatched(cluster)
    assert len(stored_records(cluster, inner.queue)) == 1  # type: ignore[attr-defined]
    assert len(stored_records(cluster, outer.queue)) == 30  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- auto-batching


async def test_auto_batch_gives_each_message_its_own_result(cluster: Cluster,
                                                            admin: AdminClient,
                                                            producer: Producer) -> None:
    await create(admin, "Auto", attributes=BATCH_CQ)
    await create(admin, "AutoPlain")
    async with AutoBatchProducer(producer, linger_ms=20, max_batch_messages=50) as batcher:
        futures = [await batcher.send(m) for m in text_messages("Auto", 230)]
        futures += [await batcher.send(m) for m in text_messages("AutoPlain", 40)]
    assert all(f.done() for f in futures)  # close flushed everything
    results = [f.result() for f in futures]
    await dispatched(cluster)
    for topic in ("Auto", "AutoPlain"):
        mine = [r for r in results if r.queue.topic == topic]
        for mq in {r.queue for r in mine}:
            got = {m.queue_offset: m for m in await read_queue(producer.instance, mq)}
            for r in (r for r in mine if r.queue == mq):
                assert got[r.queue_offset].msg_id == r.msg_id
                assert r.message_count == 1
    per_queue = {}
    for r in results:
        per_queue.setdefault(r.queue, []).append(r.queue_offset)
    assert all(offs == list(range(len(offs))) for offs in per_queue.values()), [
        (q, offs[:3], offs[48:53]) for q, offs in per_queue.items()]
    auto_records = sum(len(stored_records(cluster, mq)) for mq in per_queue
                       if mq.topic == "Auto")
    assert auto_records < 230 // 10  # batched: a handful of records, not one per message


async def test_sharding_key_keeps_order_on_one_queue(cluster: Cluster, admin: AdminClient,
                                                     producer: Producer) -> None:
    await create(admin, "Keyed", queues=4, attributes=BATCH_CQ)
    async with AutoBatchProducer(producer, linger_ms=1, max_batch_messages=7) as batcher:
        futures = [await batcher.send(m, sharding_key="order-42")
                   for m in text_messages("Keyed", 60)]
        results = await asyncio.gather(*futures)
    assert len({r.queue for r in results}) == 1
    assert [r.queue_offset for r in results] == list(range(60))


async def test_back_pressure_bounds_the_buffer(cluster: Cluster, admin: AdminClient,
                                               producer: Producer) -> None:
    await create(admin, "Pressure", attributes=BATCH_CQ)
    msgs = text_messages("Pressure", 400, size=1000)
    batcher = AutoBatchProducer(producer, linger_ms=50, max_batch_bytes=8 * 1024,
                                total_buffer_bytes=24 * 1024)
    peak = 0
    futures = []
    for m in msgs:
        futures.append(await batcher.send(m))
        peak = max(peak, batcher.buffered_bytes)
    await batcher.close()
    assert peak <= 24 * 1024
    results = [f.result() for f in futures]
    assert sum(r.status is SendStatus.SEND_OK for r in results) == 400


async def test_a_failed_batch_fails_each_message(cluster: Cluster, admin: AdminClient,
                                                 producer: Producer) -> None:
    await create(admin, "ReadOnly")
    await admin.create_topic("ReadOnly", read_queue_nums=2, write_queue_nums=2, perm=4)
    async with asyncio.timeout(5):
        while (await producer.instance.routes.get("ReadOnly", refresh=True)).publish_queues:
            await asyncio.sleep(0.05)
    mq = MessageQueue("ReadOnly", "broker-a", 0)
    batcher = AutoBatchProducer(producer, linger_ms=5)
    futures = [await batcher.send(m, queue=mq) for m in text_messages("ReadOnly", 5)]
    await batcher.flush()
    errors = [f.exception() for f in futures]
    assert all(isinstance(e, BrokerResponseError) and e.code == ResponseCode.NO_PERMISSION
               for e in errors)
    assert len({id(e) for e in errors}) == 1
    await batcher.close()
    with pytest.raises(ClientClosedError):
        await batcher.send(Message("ReadOnly", b"late"))
    fresh = AutoBatchProducer(producer)
    with pytest.raises(InvalidMessageError):
        await fresh.send(Message("ReadOnly", b"x", {"DELAY": "3"}))
    # The topic was checked and remembered by now: the properties are still checked.
    with pytest.raises(InvalidPropertyError) as info:
        await fresh.send(Message("ReadOnly", b"x", {"KEYS": "a\x02b"}))
    assert info.value.name == "KEYS"
    with pytest.raises(InvalidMessageError):
        await fresh.send(Message("ReadOnly", b""))
    await fresh.close()


# ---------------------------------------------------------------------- checks before I/O


@pytest.mark.parametrize(("msgs", "error"), [
    ([], InvalidMessageError),
    ([Message("A", b"x"), Message("B", b"x")], InvalidMessageError),
    ([Message("A", b"x"), Message("A", b"")], InvalidMessageError),
    ([Message("A", b"x" * 2000)], MessageTooBigError),
    ([Message("A", b"x" * 600)] * 2, MessageTooBigError),
    ([Message("A", b"x"), Message("A", b"x", {"KEYS": "a\x01b"})], InvalidPropertyError),
    ([Message("%RETRY%g", b"x")], InvalidTopicError),
    ([Message("TBW102", b"x")], InvalidTopicError),
    ([Message("A", b"x", {"WAIT": "false"}), Message("A", b"x")], LocalProtocolError),
])
def test_prepare_send_batch_refuses_before_any_io(msgs: list[Message],
                                                  error: type[Exception]) -> None:
    with pytest.raises(error):
        prepare_send_batch(msgs, max_size=1000, keys=UniqKeyGenerator("127.0.0.1", 1),
                           now_ms=0, compression=BatchCompression())
