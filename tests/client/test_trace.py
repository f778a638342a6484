"""Message trace against a real cluster: a producer and consumers with trace on write
Pub, SubBefore and SubAfter records to the trace topic, found by the message's id; with
trace off nothing is written; a full trace queue drops and counts."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.client import (
    AdminClient,
    AutoBatchProducer,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    LmqConsumer,
    LmqMessage,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
    PushOptions,
    send_to_lmqs,
)
from tidemq.client.trace_view import MessageTrace, query_trace
from tidemq.client.tracer import YIELD_EVERY, Tracer
from tidemq.codec.compression import COMPRESSED, COMPRESSION_MASK, CompressionType, sys_flag_for
from tidemq.codec.message import decode_messages
from tidemq.codec.trace import MessageType, PubRecord, decode_trace_data
from tidemq.errors import ConfigError
from tidemq.formats.record.decode import Record, decode_record
from tidemq.testing import Cluster
from tidemq.types import SendResult

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
FAST = PushOptions(rebalance_interval=1.0, persist_consumer_offset_interval=0.1,
                   handover_delay=0.0, consume_retry_delay=0.05)
TRACE = "RMQ_SYS_TRACE_TOPIC"
#: A retried message comes back after 100 ms, not after the default ladder's 10 s.
LEVELS = " ".join(["100ms"] * 18)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, broker={"trace_topic_enable": True,
                                         "message_delay_level": LEVELS}) as running:
        yield running


def _config(cluster: Cluster, **kw: object) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), **kw)  # type: ignore[arg-type]


async def _trace_of(cluster: Cluster, admin: AdminClient, msg_id: str,
                    done: int) -> MessageTrace:
    """The trace of ``msg_id`` once ``done`` deliveries have their outcome; the records
    are sent (the tracers were flushed) and dispatched, but the key index is written a
    moment after dispatch, so it is asked again until they show (bounded)."""
    await wire.dispatched(cluster.brokers[0])
    async with asyncio.timeout(10):
        while True:
            trace = await query_trace(admin, msg_id)
            if trace.sends and sum(c.success is not None for c in trace.consumes) >= done:
                return trace
            await asyncio.sleep(0.05)


async def test_send_and_consumes_are_traced(cluster: Cluster) -> None:
    config = _config(cluster, enable_msg_trace=True)
    failed_once: set[str] = set()

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            if m.msg_id not in failed_once:
                failed_once.add(m.msg_id)
                return ConsumeStatus.RECONSUME_LATER
        done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    done = asyncio.Event()
    async with AdminClient(config=config) as admin:
        async with Producer("pg", config=config) as producer:
            sent = await producer.send(Message("Orders", b"order-1",
                                               {"TAGS": "new", "KEYS": "k1"}))
            assert producer.tracer is not None
            await producer.tracer.flush()
        push = PushConsumer("push-cg", config=config, consume_from=FIRST, options=FAST,
                            listener=listener)
        push.subscribe("Orders")
        async with push:
            await asyncio.wait_for(done.wait(), 30)
            assert push.tracer is not None
            await push.tracer.flush()
        async with PullConsumer("pull-cg", config=config, consume_from=FIRST) as pull:
            pull.subscribe("Orders")
            got: list[MessageExt] = []
            async with asyncio.timeout(20):
                while not got:
                    got = await pull.poll(timeout=1)
            await pull.commit()
            assert pull.tracer is not None
            await pull.tracer.flush()
        trace = await _trace_of(cluster, admin, sent.msg_id, done=3)

    [send] = trace.sends
    assert (send.group, send.topic, send.tags, send.keys, send.success) == (
        "pg", "Orders", "new", "k1", True)
    assert send.offset_msg_id == sent.offset_msg_id
    assert send.store_host == cluster.brokers[0].broker_addr
    assert send.store_ms >= send.send_ms > 0
    by_group = {(c.group, c.retry_times, c.success) for c in trace.consumes}
    # push-cg failed once, then got it back through its retry topic (1 retry)
    assert by_group == {("push-cg", 0, False), ("push-cg", 1, True), ("pull-cg", 0, True)}
    assert all(c.cost_ms is not None and c.cost_ms >= 0 for c in trace.consumes)
    assert trace.refused == []


async def test_a_delivery_a_close_cancels_is_traced_as_failed(cluster: Cluster) -> None:
    """A listener call that a bounded close cancels gets its SubAfter (failed): the
    message will be delivered again."""
    config = _config(cluster, enable_msg_trace=True)
    in_flight = asyncio.Event()

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        in_flight.set()
        await asyncio.Event().wait()  # until cancelled
        return ConsumeStatus.CONSUME_SUCCESS

    async with AdminClient(config=config) as admin:
        async with Producer("cut-pg", config=config) as producer:
            sent = await producer.send(Message("Cut", b"slow"))
        bounded = dataclasses.replace(FAST, await_termination_when_shutdown=0.1)
        push = PushConsumer("cut-cg", config=config, consume_from=FIRST, options=bounded,
                            listener=listener)
        push.subscribe("Cut")
        async with push:
            await asyncio.wait_for(in_flight.wait(), 30)
        trace = await _trace_of(cluster, admin, sent.msg_id, done=1)
    [consume] = trace.consumes
    assert (consume.group, consume.success) == ("cut-cg", False)


async def test_messages_polled_as_columns_are_traced(cluster: Cluster) -> None:
    config = _config(cluster, enable_msg_trace=True)
    async with AdminClient(config=config) as admin:
        async with Producer("cpg", config=config) as producer:
            sent = [await producer.send(Message("Columns", f"c{i}".encode(),
                                                {"KEYS": f"ck{i}"})) for i in range(3)]
        async with PullConsumer("columns-cg", config=config, consume_from=FIRST) as pull:
            pull.subscribe("Columns")
            got = 0
            async with asyncio.timeout(20):
                while got < 3:
                    got += sum(len(b) for b in await pull.poll_batches(timeout=1))
            await pull.commit()
            assert pull.tracer is not None
            await pull.tracer.flush()
        for result in sent:
            trace = await _trace_of(cluster, admin, result.msg_id, done=1)
            [consume] = trace.consumes
            assert (consume.group, consume.retry_times, consume.success) == (
                "columns-cg", 0, True)
            assert consume.cost_ms is not None and consume.cost_ms >= 0


async def test_messages_polled_from_lmqs_are_traced(tmp_path: Path) -> None:
    """An LMQ consumer records SubBefore when ``poll`` hands a message out and SubAfter
    when a commit of its LMQ moves past it, under the stored message's id."""
    store = {"enable_lmq": True, "enable_multi_dispatch": True}
    async with Cluster(tmp_path, broker={"trace_topic_enable": True}, store=store) as lmqs:
        config = _config(lmqs, enable_msg_trace=True)
        async with AdminClient(config=config) as admin:
            async with Producer("lpg", config=config) as producer:
                sent = [await send_to_lmqs(producer, Message("Devices", b"d%d" % i,
                                                             {"KEYS": f"lk{i}"}),
                                           ["%LMQ%one", "%LMQ%two"]) for i in range(2)]
            async with LmqConsumer("lmq-cg", broker_addr=lmqs.brokers[0].broker_addr,
                                   config=config) as consumer:
                consumer.subscribe("%LMQ%one")
                got: list[LmqMessage] = []
                async with asyncio.timeout(20):
                    while len(got) < 2:
                        got += await consumer.poll(timeout=1)
                await consumer.commit()
                assert consumer.tracer is not None
                await consumer.tracer.flush()
            for result in sent:
                trace = await _trace_of(lmqs, admin, result.msg_id, done=1)
                [consume] = trace.consumes
                assert (consume.group, consume.retry_times, consume.success) == (
                    "lmq-cg", 0, True)
                assert consume.cost_ms is not None and consume.cost_ms >= 0


async def test_batches_through_the_auto_batching_producer_are_traced(cluster: Cluster
                                                                      ) -> None:
    config = _config(cluster, enable_msg_trace=True)
    async with AdminClient(config=config) as admin:
        async with Producer("bpg", config=config) as producer:
            auto = AutoBatchProducer(producer, linger_ms=50)
            futures = [await auto.send(Message("Batched", f"m{i}".encode(),
                                               {"KEYS": f"key{i}"}), queue=None)
                       for i in range(5)]
            results = await asyncio.gather(*futures)
            await auto.close()
            assert producer.tracer is not None
            await producer.tracer.flush()
            assert producer.tracer.sent_records == 5
        await wire.dispatched(cluster.brokers[0])
        async with asyncio.timeout(10):
            while not (trace := await query_trace(admin, results[3].msg_id)).sends:
                await asyncio.sleep(0.05)
    [send] = trace.sends
    assert (send.keys, send.group, send.success) == ("key3", "bpg", True)
    assert send.offset_msg_id == results[3].offset_msg_id


async def test_bodies_produced_without_properties_are_traced(cluster: Cluster) -> None:
    """produce() keeps such messages as bodies only; their batch is traced all the same."""
    config = _config(cluster, enable_msg_trace=True)
    results: list[SendResult] = []

    def delivered(error: BaseException | None, result: SendResult | None) -> None:
        assert error is None and result is not None
        results.append(result)

    async with AdminClient(config=config) as admin:
        async with Producer("ppg", config=config) as producer:
            auto = AutoBatchProducer(producer, linger_ms=50)
            for i in range(5):
                auto.produce("Produced", f"m{i}".encode(), on_delivery=delivered)
            await auto.close()
            assert producer.tracer is not None
            await producer.tracer.flush()
            assert producer.tracer.sent_records == 5
        await wire.dispatched(cluster.brokers[0])
        async with asyncio.timeout(10):
            while not (trace := await query_trace(admin, results[3].msg_id)).sends:
                await asyncio.sleep(0.05)
    [send] = trace.sends
    assert (send.group, send.success) == ("ppg", True)
    assert send.offset_msg_id == results[3].offset_msg_id


async def test_trace_off_writes_nothing(cluster: Cluster) -> None:
    config = _config(cluster)
    assert config.enable_msg_trace is False
    async with AdminClient(config=config) as admin:
        async with Producer("pg", config=config) as producer:
            await producer.send(Message("Quiet", b"x"))
            assert producer.tracer is None
        async with PullConsumer("cg", config=config, consume_from=FIRST) as pull:
            pull.subscribe("Quiet")
            async with asyncio.timeout(20):
                while not await pull.poll(timeout=1):
                    pass
            await pull.commit()
            assert pull.tracer is None
        await wire.dispatched(cluster.brokers[0])
        [status] = await admin.topic_status(TRACE)
        assert status.max_offset == 0


@pytest.mark.parametrize(("compression", "bits"), [
    ("zstd", sys_flag_for(CompressionType.ZSTD)), ("zlib", sys_flag_for(CompressionType.ZLIB)),
    ("lz4", sys_flag_for(CompressionType.LZ4)), ("none", 0)])
async def test_trace_messages_are_stored_compressed_as_configured(
        cluster: Cluster, compression: str, bits: int) -> None:
    """A trace message goes alone, so a body over ``compress_msg_body_over_howmuch`` is
    compressed (``trace_compression``); it is stored so, and the trace is read back."""
    config = _config(cluster, enable_msg_trace=True, trace_compression=compression)
    async with AdminClient(config=config) as admin:
        async with Producer("zpg", config=config) as producer:
            result = await producer.send_batch(
                [Message("Packed", b"x", {"KEYS": f"key{i}"}) for i in range(200)])
            assert producer.tracer is not None
            await producer.tracer.flush()
            assert producer.tracer.sent_records == 200
        await wire.dispatched(cluster.brokers[0])
        async with Peer(cluster.brokers[0].broker_addr) as peer:
            answer = await peer.ok(wire.pull(TRACE))
        [stored] = decode_messages(answer.full_body())
        assert len(stored.body) > config.compress_msg_body_over_howmuch  # inflated
        raw = answer.full_body()
        sys_flag = int.from_bytes(raw[36:40], "big")  # the stored record's sysflag
        assert sys_flag & (COMPRESSION_MASK | COMPRESSED) == bits
        if bits:
            assert len(raw) < len(stored.body)
        msg_id = result.msg_id.split(",")[7]
        async with asyncio.timeout(10):
            while not (trace := await query_trace(admin, msg_id)).sends:
                await asyncio.sleep(0.05)
    [send] = trace.sends
    assert (send.keys, send.group, send.success) == ("key7", "zpg", True)


async def test_trace_messages_are_compressed_for_rocketmq_4_readers_by_default(
        cluster: Cluster) -> None:
    """A RocketMQ 4 reader inflates any COMPRESSED body with ``java.util.zip.Inflater``,
    whatever bits 8-10 say: by default a trace body is a zlib stream, marked ZLIB as
    Java's trace producer marks it."""
    config = _config(cluster, enable_msg_trace=True)
    async with Producer("zdefault", config=config) as producer:
        await producer.send_batch(
            [Message("Packed", b"x", {"KEYS": f"key{i}"}) for i in range(200)])
        assert producer.tracer is not None
        await producer.tracer.flush()
    await wire.dispatched(cluster.brokers[0])
    async with Peer(cluster.brokers[0].broker_addr) as peer:
        answer = await peer.ok(wire.pull(TRACE))
    raw = decode_record(answer.full_body())
    assert isinstance(raw, Record)
    assert raw.sys_flag & (COMPRESSION_MASK | COMPRESSED) == sys_flag_for(CompressionType.ZLIB)
    [stored] = decode_messages(answer.full_body())
    assert zlib.decompress(raw.body) == stored.body
    assert len(decode_trace_data(stored.body).records) == 200


def test_an_unknown_trace_compression_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        ClientConfig(trace_compression="brotli")
    assert raised.value.key == "trace_compression"


def test_the_environment_turns_trace_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMQ_MSG_TRACE", "true")
    assert ClientConfig().enable_msg_trace is True
    assert ClientConfig(enable_msg_trace=False).enable_msg_trace is False
    monkeypatch.setenv("TIDEMQ_MSG_TRACE", "maybe")
    with pytest.raises(ConfigError, match="TIDEMQ_MSG_TRACE"):
        ClientConfig()


async def test_a_full_queue_drops_and_counts_and_never_blocks(cluster: Cluster) -> None:
    sent: list[Message] = []
    release = asyncio.Event()

    async def slow_send(msgs: list[Message]) -> object:
        sent.extend(msgs)
        await release.wait()  # the trace topic's broker does not answer
        return None

    tracer = Tracer(slow_send, topic=TRACE, capacity=3)  # type: ignore[arg-type]
    tracer.start()
    record = PubRecord(1, "R", "pg", "T", "ID", "", "", "h:1", 1, 1, 0, "", True)  # type: ignore[arg-type]
    tracer.record(record)
    async with asyncio.timeout(5):
        while not sent:  # the task took the first record and is stuck sending it
            await asyncio.sleep(0.01)
    for _ in range(10):
        tracer.record(dataclasses.replace(record, msg_id="later"))
    assert (tracer.queued, tracer.dropped) == (3, 7)
    release.set()
    await tracer.close()
    assert tracer.sent_records == 4 and len(sent) == 2
    assert [r.msg_id for r in decode_trace_data(sent[1].body).records] == ["later"] * 3
    assert sent[1].properties["KEYS"] == "later"
    tracer.record(record)  # after close: dropped, not queued
    assert tracer.dropped == 8


async def test_a_failing_trace_send_is_counted_not_raised(cluster: Cluster) -> None:
    async def refuse(msgs: list[Message]) -> object:
        raise ConnectionError("trace broker away")

    tracer = Tracer(refuse, topic=TRACE)  # type: ignore[arg-type]
    tracer.record(PubRecord(1, "R", "pg", "T", "ID", "", "", "h:1", 1, 1, 0, "", True))  # type: ignore[arg-type]
    await tracer.flush()
    assert (tracer.failed_records, tracer.sent_records) == (1, 0)


async def test_many_records_are_split_into_bounded_messages_sent_one_a_request() -> None:
    """One trace message a request: a single send's body is compressed, a batch's not."""
    requests: list[list[Message]] = []

    async def send(msgs: list[Message]) -> object:
        requests.append(list(msgs))
        return None

    tracer = Tracer(send, topic=TRACE)  # type: ignore[arg-type]
    base = PubRecord(1, "R", "pg", "T", "", "", "k", "h:1", 1, 1, 0, "", True)  # type: ignore[arg-type]
    for i in range(20_000):
        tracer.record(dataclasses.replace(base, msg_id=f"{i:032X}"))
    await tracer.flush()
    msgs = [m for r in requests for m in r]
    assert tracer.sent_records == 20_000 and tracer.dropped == 0
    assert all(len(r) == 1 for r in requests) and len(requests) > 1
    assert all(len(m.body) <= 128_000 and len(m.properties["KEYS"]) <= 24_000 for m in msgs)
    ids = [rec.msg_id for m in msgs for rec in decode_trace_data(m.body).records]
    assert ids == [f"{i:032X}" for i in range(20_000)]
    assert all(set(m.properties["KEYS"].split(" ")) == {
        "k", *(r.msg_id for r in decode_trace_data(m.body).records)} for m in msgs)


async def test_events_holding_too_many_message_bytes_are_dropped() -> None:
    """An event that makes its records later keeps the messages it describes: the bytes
    held are bounded as well as the events."""
    requests: list[list[Message]] = []

    async def send(msgs: list[Message]) -> object:
        requests.append(list(msgs))
        return None

    tracer = Tracer(send, topic=TRACE, max_bytes=100)  # type: ignore[arg-type]
    record = PubRecord(1, "R", "pg", "T", "ID", "", "", "h:1", 1, 1, 0, "", True)  # type: ignore[arg-type]
    tracer.record(lambda: [record], 60)
    tracer.record(lambda: [record], 60)  # 120 bytes held: over the bound
    assert (tracer.queued, tracer.held_bytes, tracer.dropped) == (1, 60, 1)
    await tracer.flush()
    assert (tracer.held_bytes, tracer.sent_records) == (0, 1)
    tracer.record(lambda: [record], 60)  # room again
    assert tracer.dropped == 1 and tracer.queued == 1


@pytest.mark.parametrize("whole", [True, False], ids=["whole texts", "shared parts"])
@pytest.mark.parametrize("keys", ["", "order-1 order-2"])
def test_a_large_encoded_batch_is_cut_into_bounded_messages(keys: str, whole: bool) -> None:
    from tidemq.client.tracer import EncodedRecords, _MessageBuilder
    from tidemq.codec.trace import encode_pubs

    n = 3000
    ids = [f"{i:032X}" for i in range(n)]
    pubs = encode_pubs(1, "R", "pg", "T", "h:1", 1, MessageType.NORMAL, True, ids,
                       ["tag"] * n, [keys] * n, [128] * n, ["0" * 32] * n)
    texts = pubs.texts() if whole else pubs.cores
    shared = {} if whole else {"prefix": pubs.prefix, "suffix": pubs.suffix}
    builder = _MessageBuilder(TRACE)
    builder.extend(EncodedRecords(texts[:10], ids[:10], [keys] * 10, **shared))
    builder.extend(EncodedRecords(texts[10:], ids[10:], [keys] * (n - 10), **shared))
    builder.close()
    msgs = [m for m, _ in builder.messages]
    assert len(msgs) > 2
    assert sum(count for _, count in builder.messages) == n
    assert all(len(m.body) <= 128_000 and len(m.properties["KEYS"]) <= 24_000 for m in msgs)
    decoded = [decode_trace_data(m.body).records for m in msgs]
    assert [r.msg_id for recs in decoded for r in recs] == ids
    for m, recs in zip(msgs, decoded, strict=True):
        assert set(m.properties["KEYS"].split(" ")) == {
            r.msg_id for r in recs} | set(keys.split(" ")) - {""}


async def test_events_gather_into_one_trace_request() -> None:
    """One message sent at a time must not cost one trace request each: the background
    task waits for more events (here until ``gather`` are queued) before it sends."""
    requests: list[list[Message]] = []
    sent = asyncio.Event()

    async def send(msgs: list[Message]) -> object:
        requests.append(list(msgs))
        sent.set()
        return None

    tracer = Tracer(send, topic=TRACE, linger=60.0, gather=3)  # type: ignore[arg-type]
    tracer.start()
    record = PubRecord(1, "R", "pg", "T", "", "", "", "h:1", 1, 1, 0, "", True)  # type: ignore[arg-type]
    for i in range(3):
        tracer.record(dataclasses.replace(record, msg_id=f"id-{i}"))
        for _ in range(5):  # the task runs in between, as between two sends
            await asyncio.sleep(0)
    async with asyncio.timeout(10):
        await sent.wait()
    assert len(requests) == 1 and tracer.sent_records == 3
    assert [r.msg_id for r in decode_trace_data(requests[0][0].body).records] == [
        "id-0", "id-1", "id-2"]
    await tracer.close()


async def test_a_lone_event_is_sent_when_the_linger_ends() -> None:
    sent = asyncio.Event()

    async def send(msgs: list[Message]) -> object:
        sent.set()
        return None

    tracer = Tracer(send, topic=TRACE, linger=0.01)  # type: ignore[arg-type]
    tracer.start()
    tracer.record(PubRecord(1, "R", "pg", "T", "ID", "", "", "h:1", 1, 1, 0, "", True))  # type: ignore[arg-type]
    async with asyncio.timeout(10):
        await sent.wait()
    assert tracer.sent_records == 1
    await tracer.close()


async def test_abort_stops_the_task_and_sends_nothing_more() -> None:
    sent: list[Message] = []
    stuck = asyncio.Event()

    async def send(msgs: list[Message]) -> object:
        sent.extend(msgs)
        await stuck.wait()
        return None

    tracer = Tracer(send, topic=TRACE)  # type: ignore[arg-type]
    tracer.start()
    record = PubRecord(1, "R", "pg", "T", "ID", "", "", "h:1", 1, 1, 0, "", True)  # type: ignore[arg-type]
    tracer.record(record)
    async with asyncio.timeout(5):
        while not sent:
            await asyncio.sleep(0.01)
    tracer.record(record)
    await tracer.abort()
    assert (tracer.queued, tracer.held_bytes, len(sent)) == (0, 0, 1)
    assert not tracer._sends and tracer.sent_records == 0  # the stuck send was cancelled
    tracer.record(record)
    assert tracer.dropped == 1 and tracer.queued == 0


def _whole_text(made: object) -> str:
    """The text of the records ``pub_records`` made, one after the other."""
    from tidemq.client.tracer import EncodedRecords, RecordRun

    if isinstance(made, RecordRun):
        return made.prefix + made.text + made.suffix
    assert isinstance(made, EncodedRecords)
    return "".join(made.prefix + t + made.suffix for t in made.texts)


@pytest.mark.parametrize("bodies", [[b"ab", b"cd", b"ef"], [b"ab", b"cde", b"f"]],
                         ids=["alike", "bodies of several lengths"])
def test_a_prepared_batch_is_traced_as_its_messages(bodies: list[bytes]) -> None:
    """The records of a prepared batch whose messages are alike (read once) are those of
    its messages read one by one."""
    from tidemq.client.batching import _SharedMessages
    from tidemq.client.sending import BatchCompression, prepare_send_batch
    from tidemq.client.stamps import new_uniq_keys
    from tidemq.client.tracer import pub_records
    from tidemq.types import MessageQueue, SendResult, SendStatus

    msgs = [Message("Batched", b, {"TAGS": "t", "KEYS": "k1 k2"}) for b in bodies]
    prepared = prepare_send_batch(msgs, max_size=1024, keys=new_uniq_keys("127.0.0.1"),
                                  now_ms=1, compression=BatchCompression(None))
    assert prepared.alike == (len(set(map(len, bodies))) == 1)
    offsets = ",".join(f"7F00000100002A9F{i:016X}" for i in range(len(bodies)))
    result = SendResult(SendStatus.SEND_OK, ",".join(prepared.keys), offsets,
                        MessageQueue("Batched", "broker-a", 0), 0,
                        message_count=len(bodies))
    by_batch = pub_records("pg", msgs, prepared, result, 1, 2)
    one_by_one = pub_records("pg", msgs, list(prepared.keys), result, 1, 2)
    whole = _whole_text(by_batch)
    assert whole == _whole_text(one_by_one)
    # produce()'s batch: its messages as a view over the bodies and their shared entry
    view = _SharedMessages("Batched", bodies, {"TAGS": "t", "KEYS": "k1 k2"})
    by_view = pub_records("pg", view, prepared, result, 1, 2)
    assert _whole_text(by_view) == whole
    records = decode_trace_data(whole.encode()).records
    assert [(r.tags, r.keys, r.body_length) for r in records] == [  # type: ignore[union-attr]
        ("t", "k1 k2", len(b)) for b in bodies]


@settings(deadline=None, max_examples=50)
@given(st.lists(st.integers(1, 200), min_size=1, max_size=60), st.integers(0, 3000),
       st.integers(1, 5))
def test_records_of_varying_widths_fill_bounded_messages_in_order(widths: list[int],
                                                                    pad: int,
                                                                    rounds: int) -> None:
    """Records around a shared text whose ids differ in width (the alike path counts
    each as the widest): every message within its bounds (the body's and the keys'),
    every record once, in order."""
    from tidemq.client.tracer import EncodedRecords, _MessageBuilder

    ids = [f"{i}-" + "k" * w for i, w in enumerate(widths)]
    cores = [f"{m}\x01" + "x" * pad for m in ids]
    builder = _MessageBuilder(TRACE)
    for _ in range(rounds):
        builder.extend(EncodedRecords(cores, ids, [""] * len(ids), prefix="Pub\x01",
                                      suffix="\x02"))
    builder.close()
    msgs = [m for m, _ in builder.messages]
    assert sum(count for _, count in builder.messages) == len(ids) * rounds
    assert all(len(m.body) <= 128_000 and len(m.properties["KEYS"]) <= 24_000 for m in msgs)
    texts = "".join(m.body.decode() for m in msgs)
    assert texts == "".join(f"Pub\x01{c}\x02" for c in cores) * rounds
    for m in msgs:  # each message's keys are the ids of its records
        assert set(m.properties["KEYS"].split(" ")) == {
            part.split("\x01")[1] for part in m.body.decode().split("\x02") if part}


async def test_a_close_whose_timeout_ends_counts_and_logs_every_record_it_left_unsent(
        caplog: pytest.LogCaptureFixture) -> None:
    """The record being sent when the close gives up is dropped and counted as well as
    the queued ones: none is lost silently."""
    sent: list[Message] = []
    never = asyncio.Event()

    async def stuck_send(msgs: list[Message]) -> object:
        sent.extend(msgs)
        await never.wait()  # the trace topic's broker does not answer
        return None

    tracer = Tracer(stuck_send, topic=TRACE)  # type: ignore[arg-type]
    tracer.start()
    record = PubRecord(1, "R", "pg", "T", "ID", "", "", "h:1", 1, 1, 0, "", True)  # type: ignore[arg-type]
    tracer.record(record)
    async with asyncio.timeout(5):
        while not sent:  # the task took the first record and is stuck sending it
            await asyncio.sleep(0.01)
    tracer.record(dataclasses.replace(record, msg_id="later"))
    tracer.record(dataclasses.replace(record, msg_id="last"))
    with caplog.at_level("WARNING", logger="tidemq.client.tracer"):
        await tracer.close(timeout=0.2)
    assert (tracer.sent_records, tracer.failed_records, tracer.dropped) == (0, 0, 3)
    assert "dropped" in caplog.text
    assert not tracer._sends and tracer.queued == 0


async def test_a_batch_whose_records_fill_several_messages_sends_each_alone() -> None:
    """A client's trace send takes one message a request: the Pub records of a batch too
    large for one trace message go in several requests, none refused."""
    from tidemq.client.tracer import pub_records
    from tidemq.types import MessageQueue, SendStatus

    bodies: list[bytes] = []

    async def one_a_request(msgs: list[Message]) -> object:
        (msg,) = msgs  # as the trace producer's send
        bodies.append(msg.body)
        return None

    n = 3000
    msgs = [Message("Batched", b"b", {"KEYS": f"key{i}"}) for i in range(n)]
    ids = [f"{i:032X}" for i in range(n)]
    offsets = ",".join(f"7F00000100002A9F{i:016X}" for i in range(n))
    result = SendResult(SendStatus.SEND_OK, ",".join(ids), offsets,
                        MessageQueue("Batched", "broker-a", 0), 0, message_count=n)
    tracer = Tracer(one_a_request, topic=TRACE)  # type: ignore[arg-type]
    tracer.record(lambda: pub_records("pg", msgs, ids, result, 1, 1))
    await tracer.flush()
    assert (tracer.sent_records, tracer.failed_records, tracer.dropped) == (n, 0, 0)
    assert len(bodies) > 1
    assert [r.msg_id for b in bodies for r in decode_trace_data(b).records] == ids


async def test_a_drain_lets_the_event_loop_run_between_its_events() -> None:
    """A drain of many events does not hold the event loop until it has made them all:
    a send's answer arriving meanwhile is read after at most YIELD_EVERY of them."""
    order: list[str] = []

    async def send(msgs: list[Message]) -> object:
        return None

    def event(i: int) -> list[PubRecord]:
        order.append("event")
        return [PubRecord(1, "R", "pg", "T", f"id-{i}", "", "", "h:1", 1, 1, 0, "", True)]  # type: ignore[arg-type]

    tracer = Tracer(send, topic=TRACE)  # type: ignore[arg-type]
    for i in range(4 * YIELD_EVERY):
        tracer.record(functools.partial(event, i))
    asyncio.get_running_loop().call_soon(order.append, "answer")
    await tracer.flush()
    assert order.index("answer") == YIELD_EVERY
    assert tracer.sent_records == 4 * YIELD_EVERY and tracer.dropped == 0


async def test_a_close_whose_timeout_ends_inside_a_drain_counts_the_records_it_made(
        ) -> None:
    """The records a drain has made but not yet sent when the close's timeout ends it
    are counted as dropped, with those still queued: none is lost silently."""
    async def send(msgs: list[Message]) -> object:
        return None

    tracer = Tracer(send, topic=TRACE)  # type: ignore[arg-type]
    record = PubRecord(1, "R", "pg", "T", "ID", "", "", "h:1", 1, 1, 0, "", True)  # type: ignore[arg-type]
    events = 3 * YIELD_EVERY
    for i in range(events):
        tracer.record(dataclasses.replace(record, msg_id=f"id-{i}"))
    await tracer.close(timeout=0)  # ends at the drain's first pass of the loop
    assert tracer.sent_records + tracer.dropped == events
    assert tracer.dropped >= YIELD_EVERY
