"""PushConsumer / ThreadedPushConsumer: against the scripted fakes (exact requests), and
against a real in-process cluster (ordering across a rebalance, retry to DLQ, reset)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tests.client.fakes import FakeBroker, FakeNameServer

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
    ThreadedPushConsumer,
)
from tidemq.client.offsets import read_reset_offsets
from tidemq.client.push_consumer import _PushConsumerBase
from tidemq.codec.bodies import ConsumeType
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    PullMessageRequestHeader,
    ResetOffsetRequestHeader,
    SendMessageRequestHeaderV2,
)
from tidemq.errors import RemoteProtocolError, ResponseCode, TideMQError
from tidemq.formats.properties import decode_properties
from tidemq.testing import Cluster

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
OK = ConsumeStatus.CONSUME_SUCCESS
LATER = ConsumeStatus.RECONSUME_LATER
QA0 = MessageQueue("T", "broker-a", 0)
QA1 = MessageQueue("T", "broker-a", 1)
QB0 = MessageQueue("T", "broker-b", 0)
QB1 = MessageQueue("T", "broker-b", 1)
FAST = PushOptions(rebalance_interval=1.0, persist_consumer_offset_interval=0.1,
                   handover_delay=0.0, suspend_current_queue_time=0.05,
                   consume_retry_delay=0.05, lock_retry_interval=0.05)


class Recorder:
    """A listener that records what it got and answers ``decide(msg)`` per batch."""

    def __init__(self, decide: Callable[[MessageExt], ConsumeStatus] = lambda _m: OK,
                 gate: asyncio.Event | None = None) -> None:
        self.decide = decide
        self.gate = gate
        self.batches: list[list[MessageExt]] = []
        self.ok: list[MessageExt] = []
        self.started = asyncio.Event()
        #: (broker, offset, reconsume_times) of every message handed over, at that time.
        self.log: list[tuple[str, int, int]] = []
        self._changed = asyncio.Condition()

    async def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        self.started.set()
        self.log.extend((m.broker_name, m.queue_offset, m.reconsume_times) for m in msgs)
        if self.gate is not None:
            await self.gate.wait()
        status = OK
        for msg in msgs:
            if self.decide(msg) is not OK:
                status = LATER
        async with self._changed:
            self.batches.append(list(msgs))
            if status is OK:
                self.ok.extend(msgs)
            self._changed.notify_all()
        return status

    @property
    def seen(self) -> list[MessageExt]:
        return [m for b in self.batches for m in b]

    async def wait(self, probe: Callable[[Recorder], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: probe(self))


async def _fill(broker: FakeBroker, mq: MessageQueue, n: int, start: int = 0,
                **props: str) -> None:
    for i in range(start, start + n):
        await broker.put(mq.topic, mq.queue_id, f"{mq.broker_name}:{mq.queue_id}:{i}".encode(),
                         {"UNIQ_KEY": f"{mq.broker_name}-{mq.queue_id}-{i}", **props})


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition no event reports (broker-side state of a fake)."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


@pytest.fixture
def cluster(namesrv: FakeNameServer, brokers: list[FakeBroker]) -> list[FakeBroker]:
    namesrv.add_topic("T", brokers, queues=2)
    namesrv.add_topic("%RETRY%cg", brokers, queues=1)
    return brokers


def _consumer(config: ClientConfig, listener: Any, *, name: str = "c1",
              options: PushOptions = FAST, cls: type[_PushConsumerBase] = PushConsumer,
              **kw: Any) -> Any:
    cfg = dataclasses.replace(config, instance_name=name)
    consumer = cls("cg", config=cfg, listener=listener, options=options, **kw)
    consumer.subscribe("T")
    return consumer


async def test_consumes_everything_and_commits(cluster: list[FakeBroker],
                                               config: ClientConfig) -> None:
    a, b = cluster
    for mq in (QA0, QA1):
        await _fill(a, mq, 5)
    for mq in (QB0, QB1):
        await _fill(b, mq, 5)
    rec = Recorder()
    async with _consumer(config, rec, consume_from=FIRST) as consumer:
        await rec.wait(lambda r: len(r.ok) == 20)
        assert consumer.assignment() == sorted([QA0, QA1, QB0, QB1,
                                                MessageQueue("%RETRY%cg", "broker-a", 0),
                                                MessageQueue("%RETRY%cg", "broker-b", 0)])
        assert consumer.rebalance_count >= 1
    assert sorted(m.body for m in rec.ok) == sorted(
        f"{mq.broker_name}:{mq.queue_id}:{i}".encode() for mq in (QA0, QA1, QB0, QB1)
        for i in range(5))
    assert all(len(batch) == 1 for batch in rec.batches)
    # close committed the lowest unprocessed offset of every queue; the retry queues too
    assert a.offsets[("cg", "T", 0)] == a.offsets[("cg", "T", 1)] == 5
    assert b.offsets[("cg", "T", 0)] == b.offsets[("cg", "T", 1)] == 5
    assert a.offsets[("cg", "%RETRY%cg", 0)] == 0
    data = a.heartbeats[-1].consumer_data_set[0]
    assert data.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert sorted(s.topic for s in data.subscription_data_set) == ["%RETRY%cg", "T"]
    header = PullMessageRequestHeader.from_ext(a.log.of(RequestCode.PULL_MESSAGE)[0].ext_fields)
    assert (header.consumer_group, header.sys_flag) == ("cg", 6)
    assert a.log.of(RequestCode.UNREGISTER_CLIENT)  # left the group after committing
    assert not a.members["cg"]


async def test_batches_and_tag_filter(cluster: list[FakeBroker], config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 6, TAGS="keep")
    await _fill(a, QA0, 3, start=6, TAGS="drop")
    await _fill(a, QA0, 1, start=9, TAGS="keep")
    rec = Recorder()
    consumer = PushConsumer("cg", config=config, listener=rec, consume_from=FIRST,
                            options=dataclasses.replace(FAST, consume_batch_max_size=4))
    consumer.subscribe("T", "keep")
    async with consumer:
        await rec.wait(lambda r: len(r.ok) == 7)
    assert all(m.tags == "keep" for m in rec.ok)
    assert max(len(b) for b in rec.batches) > 1
    assert all(len(b) <= 4 for b in rec.batches)
    assert a.offsets[("cg", "T", 0)] == 10


def _pulls(broker: FakeBroker, mq: MessageQueue) -> list[int]:
    out = []
    for cmd in broker.log.of(RequestCode.PULL_MESSAGE):
        h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
        if (h.topic, h.queue_id) == (mq.topic, mq.queue_id):
            out.append(h.queue_offset)
    return out


async def test_failed_messages_return_through_the_retry_topic(cluster: list[FakeBroker],
                                                              config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 2)
    rec = Recorder(lambda m: OK if m.reconsume_times > 0 or m.queue_offset == 1 else LATER)
    async with _consumer(config, rec, consume_from=FIRST):
        await rec.wait(lambda r: len(r.ok) == 2)
    first, retried = rec.seen[0], rec.ok[-1]
    assert (first.queue_offset, first.reconsume_times) == (0, 0)
    assert retried.body == first.body and retried.reconsume_times == 1
    assert retried.topic == "T"  # presented under its original topic
    assert retried.properties["RETRY_TOPIC"] == "T"
    assert retried.uniq_key == first.uniq_key
    [back] = a.log.of(RequestCode.CONSUMER_SEND_MSG_BACK)
    assert back.ext_fields["group"] == "cg"
    assert back.ext_fields["offset"] == str(first.commit_log_offset)
    assert back.ext_fields["delayLevel"] == "0"
    assert back.ext_fields["maxReconsumeTimes"] == "16"
    assert back.ext_fields["originMsgId"] == first.uniq_key
    assert a.offsets[("cg", "T", 0)] == 2


async def test_send_back_falls_back_to_a_send(cluster: list[FakeBroker],
                                              config: ClientConfig) -> None:
    for broker in cluster:
        broker.send_back_code = ResponseCode.SYSTEM_ERROR
    a = cluster[0]
    await _fill(a, QA0, 1, TAGS="t")
    rec = Recorder(lambda m: OK if m.reconsume_times else LATER)
    async with _consumer(config, rec, consume_from=FIRST):
        await rec.wait(lambda r: len(r.ok) == 1)
    sends = [c for b in cluster for c in b.log.of(RequestCode.SEND_MESSAGE_V2)]
    [send] = sends
    header = SendMessageRequestHeaderV2.from_ext(send.ext_fields)
    props = decode_properties((header.properties or "").encode())
    assert header.topic == "%RETRY%cg" and header.producer_group == "CLIENT_INNER_PRODUCER"
    assert (header.reconsume_times, header.max_reconsume_times) == (1, 16)
    assert props["RETRY_TOPIC"] == "T" and props["RECONSUME_TIME"] == "1"
    assert props["DELAY"] == "3" and props["MAX_RECONSUME_TIMES"] == "16"
    assert props["ORIGIN_MESSAGE_ID"] == props["UNIQ_KEY"] == "broker-a-0-0"
    assert props["TAGS"] == "t" and "MIN_OFFSET" not in props
    [again] = rec.ok
    assert (again.topic, again.reconsume_times, again.tags) == ("T", 1, "t")


async def test_message_kept_when_it_cannot_go_back(cluster: list[FakeBroker],
                                                   config: ClientConfig) -> None:
    for broker in cluster:
        broker.send_back_code = ResponseCode.SYSTEM_ERROR
        broker.fail_always = ResponseCode.SYSTEM_BUSY  # the fallback send fails too
    a = cluster[0]
    await _fill(a, QA0, 2)
    failures = {"n": 0}

    def decide(msg: MessageExt) -> ConsumeStatus:
        if msg.queue_offset == 0 and failures["n"] < 2:
            failures["n"] += 1
            return LATER
        return OK

    rec = Recorder(decide)
    async with _consumer(config, rec, consume_from=FIRST) as consumer:
        await rec.wait(lambda r: len(r.ok) == 2)
        await consumer.commit()
    # offset 0 was retried locally (twice) and only then did the offset pass it
    assert [m.queue_offset for m in rec.seen].count(0) == 3
    assert rec.ok[-1].reconsume_times == 2
    assert a.offsets[("cg", "T", 0)] == 2


async def test_dead_letter_after_max_reconsume_times(cluster: list[FakeBroker],
                                                     config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 1)
    rec = Recorder(lambda _m: LATER)
    options = dataclasses.replace(FAST, max_reconsume_times=2)
    async with _consumer(config, rec, options=options, consume_from=FIRST):
        await until(lambda: bool(a.stored("%DLQ%cg", 0)))
    assert [m.reconsume_times for m in rec.seen] == [0, 1, 2]
    assert all(m.topic == "T" for m in rec.seen)
    [dead] = a.stored("%DLQ%cg", 0)
    assert dead.props["RETRY_TOPIC"] == "T"


async def test_reset_offset_drops_the_buffer_and_continues(cluster: list[FakeBroker],
                                                           config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 10)
    gate = asyncio.Event()
    rec = Recorder(gate=gate)
    options = dataclasses.replace(FAST, consume_concurrency=1)
    async with _consumer(config, rec, options=options, consume_from=FIRST) as consumer:
        await rec.started.wait()  # offset 0 in flight, 1..9 buffered
        assert await a.reset_offsets("cg", {QA0: 7, QB0: 3}) == 1
        gate.set()
        await rec.wait(lambda r: [m.queue_offset for m in r.ok][-3:] == [7, 8, 9])
        await consumer.commit()
        assert a.offsets[("cg", "T", 0)] == 10
    assert [m.queue_offset for m in rec.ok] == [0, 7, 8, 9]
    updates = [c for c in a.log.of(RequestCode.UPDATE_CONSUMER_OFFSET)
               if c.ext_fields["queueId"] == "0" and c.ext_fields["topic"] == "T"]
    assert updates[0].ext_fields["commitOffset"] == "7"  # committed at once on the reset


async def test_a_commit_answered_after_a_reset_is_not_taken_as_committed(
        cluster: list[FakeBroker], config: ClientConfig) -> None:
    """A commit sent before a reset and answered after the reset's own commit: the queue
    does not take the old offset as committed, so when consumption reaches it again it
    is committed again (else the broker kept the reset's offset, and a restart delivered
    everything once more)."""
    a = cluster[0]
    await _fill(a, QA0, 4)
    held, release = asyncio.Event(), asyncio.Event()
    store = a._update_offset

    async def late_answer(cmd: RemotingCommand) -> RemotingCommand:
        response = store(cmd)
        ext = cmd.ext_fields
        if (ext["topic"], ext["queueId"], ext["commitOffset"]) == ("T", "0", "4") \
                and not held.is_set():
            held.set()
            await release.wait()  # the fault: this answer comes after the reset's
        return response

    a.on(RequestCode.UPDATE_CONSUMER_OFFSET, late_answer)
    rec = Recorder()
    options = dataclasses.replace(FAST, persist_consumer_offset_interval=3600.0)
    async with _consumer(config, rec, options=options, consume_from=FIRST) as consumer:
        await rec.wait(lambda r: len(r.ok) == 4)
        before = asyncio.create_task(consumer.commit())
        await held.wait()
        assert await a.reset_offsets("cg", {QA0: 0}) == 1
        await until(lambda: a.offsets[("cg", "T", 0)] == 0)  # the reset's commit, answered
        release.set()
        await before
        await rec.wait(lambda r: len(r.ok) == 8)  # all four again
        await consumer.commit()
        assert a.offsets[("cg", "T", 0)] == 4


async def test_close_waits_a_bounded_time_for_listener_calls_in_flight(
        cluster: list[FakeBroker], config: ClientConfig) -> None:
    """With ``await_termination_when_shutdown`` a close gives a listener call that does
    not end that long, then cancels it and commits below its message, which the group
    gets again."""
    a = cluster[0]
    await _fill(a, QA0, 2)
    stuck = asyncio.Event()  # never set
    in_flight, cancelled = asyncio.Event(), asyncio.Event()

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        if msgs[0].queue_offset == 1:
            in_flight.set()
            try:
                await stuck.wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return OK

    bounded = dataclasses.replace(FAST, await_termination_when_shutdown=0.2,
                                  consume_concurrency=1)
    async with _consumer(config, listener, options=bounded, consume_from=FIRST):
        await in_flight.wait()
    assert cancelled.is_set()
    assert a.offsets[("cg", "T", 0)] == 1  # offset 1 comes again

    rec = Recorder()
    async with _consumer(config, rec, options=bounded):
        await rec.wait(lambda r: len(r.ok) == 1)
    assert [m.queue_offset for m in rec.ok] == [1]
    assert a.offsets[("cg", "T", 0)] == 2


async def test_close_gives_up_on_a_blocking_listener_after_the_bound(
        cluster: list[FakeBroker], config: ClientConfig) -> None:
    """A thread cannot be cancelled: a bounded close of a ThreadedPushConsumer leaves the
    listener's thread running, its answer ignored, and commits below its message."""
    a = cluster[0]
    await _fill(a, QA0, 1)
    in_flight, release, finished = threading.Event(), threading.Event(), threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        in_flight.set()
        release.wait(30)
        finished.set()
        return OK

    bounded = dataclasses.replace(FAST, await_termination_when_shutdown=0.2)
    try:
        async with _consumer(config, listener, options=bounded, consume_from=FIRST,
                             cls=ThreadedPushConsumer):
            assert await asyncio.to_thread(in_flight.wait, 10)
        assert not finished.is_set()  # close did not wait for the thread
        assert a.offsets[("cg", "T", 0)] == 0
    finally:
        release.set()


def test_await_termination_when_shutdown_is_checked() -> None:
    with pytest.raises(Exception, match="await_termination_when_shutdown"):
        PushOptions(await_termination_when_shutdown=-1)


async def test_consume_from_policies(cluster: list[FakeBroker], config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 3)
    await _fill(a, MessageQueue("%RETRY%cg", "broker-a", 0), 1,
                RETRY_TOPIC="T")  # an old retry: LAST still starts the retry queue at 0
    rec = Recorder()
    async with _consumer(config, rec) as consumer:
        await rec.wait(lambda r: len(r.ok) == 1)
        await _fill(a, QA0, 1, start=3)
        await rec.wait(lambda r: len(r.ok) == 2)
        assert consumer.consume_from is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert [(m.topic, m.body) for m in rec.ok] == [("T", b"broker-a:0:0"),
                                                   ("T", b"broker-a:0:3")]
    cut = a.stored("T", 0)[2].store_time
    rec2 = Recorder()
    async with _consumer(config, rec2, name="c2", consume_from=ConsumeFromWhere
                         .CONSUME_FROM_TIMESTAMP, consume_timestamp=cut):
        pass  # committed offsets exist now: the timestamp is not used
    assert rec2.ok == []
    with pytest.raises(ValueError, match="consume_timestamp"):
        PushConsumer("cg", config=config, listener=rec,
                     consume_from=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP)


async def test_listener_errors_count_as_failures(cluster: list[FakeBroker],
                                                 config: ClientConfig,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    a = cluster[0]
    await _fill(a, QA0, 2)
    seen: list[tuple[int, int]] = []

    async def listener(msgs: list[MessageExt]) -> Any:
        msg = msgs[0]
        seen.append((msg.queue_offset if msg.reconsume_times == 0 else -1,
                     msg.reconsume_times))
        if msg.reconsume_times == 0:
            if msg.queue_offset == 0:
                raise RuntimeError("boom")
            return None  # not a ConsumeStatus
        return OK

    async with _consumer(config, listener, consume_from=FIRST):
        await until(lambda: len(seen) == 4)
    assert sorted(seen) == [(-1, 1), (-1, 1), (0, 0), (1, 0)]
    assert "the listener failed" in caplog.text


async def test_threaded_listener(cluster: list[FakeBroker], config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 8)
    threads: set[int] = set()
    done = threading.Event()
    lock = threading.Lock()
    got: list[int] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            threads.add(threading.get_ident())
            got.extend(m.queue_offset for m in msgs)
            if len(got) == 8:
                done.set()
        return OK

    options = dataclasses.replace(FAST, consume_concurrency=3)
    async with _consumer(config, listener, options=options, cls=ThreadedPushConsumer,
                         consume_from=FIRST):
        assert await asyncio.to_thread(done.wait, 5)
    assert sorted(got) == list(range(8))
    assert threading.get_ident() not in threads and 1 <= len(threads) <= 3
    assert a.offsets[("cg", "T", 0)] == 8


async def test_orderly_consumes_in_order_under_a_lock(cluster: list[FakeBroker],
                                                      config: ClientConfig) -> None:
    a, b = cluster
    await _fill(a, QA0, 6)
    await _fill(b, QB1, 6)
    failed: set[tuple[str, int]] = set()

    def decide(msg: MessageExt) -> ConsumeStatus:
        key = (msg.broker_name, msg.queue_offset)
        if msg.queue_offset == 2 and key not in failed:
            failed.add(key)  # fails once: the queue pauses and retries it in place
            return LATER
        return OK

    rec = Recorder(decide)
    async with _consumer(config, rec, orderly=True, consume_from=FIRST) as consumer:
        await rec.wait(lambda r: len(r.ok) == 12)
        assert a.holder("cg", QA0) == consumer.instance.client_id
        assert b.holder("cg", QB1) == consumer.instance.client_id
    for broker in ("broker-a", "broker-b"):
        offsets = [m.queue_offset for m in rec.seen if m.broker_name == broker]
        assert offsets == [0, 1, 2, 2, 3, 4, 5]
    retried = [m for m in rec.ok if m.queue_offset == 2]
    assert all(m.reconsume_times == 1 for m in retried)
    assert not a.log.of(RequestCode.CONSUMER_SEND_MSG_BACK)
    # the lock came before the first pull of the queue; close unlocked everything
    first_lock = a.log.requests.index(a.log.of(RequestCode.LOCK_BATCH_MQ)[0])
    first_pull = a.log.requests.index(a.log.of(RequestCode.PULL_MESSAGE)[0])
    assert first_lock < first_pull
    assert a.log.of(RequestCode.UNLOCK_BATCH_MQ) and not a.locks and not b.locks
    assert a.offsets[("cg", "T", 0)] == 6 and b.offsets[("cg", "T", 1)] == 6


async def test_orderly_waits_for_a_lock_held_elsewhere(cluster: list[FakeBroker],
                                                       config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 3)
    loop_time = asyncio.get_running_loop().time
    a.locks[("cg", QA0)] = ("someone-else", loop_time() + 3600)
    rec = Recorder()
    async with _consumer(config, rec, orderly=True, consume_from=FIRST) as consumer:
        await until(lambda: a.holder("cg", QA1) == consumer.instance.client_id)
        assert not rec.seen and not _pulls(a, QA0)
        a.locks[("cg", QA0)] = ("someone-else", loop_time())  # the foreign lock expires
        await rec.wait(lambda r: len(r.ok) == 3)  # and the next lock round is granted it
    assert [m.queue_offset for m in rec.ok] == [0, 1, 2]


async def test_orderly_dead_letter_after_local_retries(cluster: list[FakeBroker],
                                                       config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 2)
    rec = Recorder(lambda m: LATER if m.queue_offset == 0 else OK)
    options = dataclasses.replace(FAST, max_reconsume_times=2)
    async with _consumer(config, rec, options=options, orderly=True, consume_from=FIRST):
        await rec.wait(lambda r: len(r.ok) == 1)
    assert [(off, times) for _b, off, times in rec.log] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    [back] = a.log.of(RequestCode.CONSUMER_SEND_MSG_BACK)
    assert back.ext_fields["delayLevel"] == "-1"
    assert a.stored("%DLQ%cg", 0)


def test_options_are_checked() -> None:
    with pytest.raises(Exception, match="consume_batch_max_size"):
        PushOptions(consume_batch_max_size=0)
    with pytest.raises(Exception, match="rebalance_interval"):
        PushOptions(rebalance_interval=0)
    assert PushOptions().max_reconsume(orderly=False) == 16
    assert PushOptions().max_reconsume(orderly=True) == -1



# ---------------------------------------------------------------- a real cluster


@pytest.fixture
async def real(tmp_path: Path) -> AsyncIterator[Cluster]:
    levels = " ".join(["100ms"] * 18)  # retries come back fast
    async with Cluster(tmp_path, brokers=2, broker={"message_delay_level": levels}) as running:
        yield running


def _real_config(cluster: Cluster, name: str = "DEFAULT") -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), instance_name=name,
                        long_polling_timeout=1.0, pull_error_backoff=0.1)


async def _topic(cluster: Cluster, topic: str, queues: int) -> None:
    async with AdminClient(config=_real_config(cluster, "admin")) as admin:
        await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        async with asyncio.timeout(5):
            while True:
                with contextlib.suppress(TideMQError):
                    if len((await admin.topic_route(topic)).queue_datas) == 2:
                        return
                await asyncio.sleep(0.02)


REAL = PushOptions(rebalance_interval=1.0, persist_consumer_offset_interval=0.5,
                   handover_delay=0.5, lock_retry_interval=0.1,
                   suspend_current_queue_time=0.1)


async def test_orderly_per_key_order_across_a_rebalance(real: Cluster) -> None:
    await _topic(real, "Ord", 4)
    log: list[tuple[str, str, int]] = []  # (member, key, seq) in processing order
    progress = asyncio.Event()

    def listener(name: str) -> Callable[[list[MessageExt]], Awaitable[ConsumeStatus]]:
        async def listen(msgs: list[MessageExt]) -> ConsumeStatus:
            for msg in msgs:
                key, seq = msg.body.decode().split(":")
                log.append((name, key, int(seq)))
            progress.set()
            await asyncio.sleep(0.002)  # slow enough that queues are busy at rebalances
            return OK
        return listen

    def member(name: str) -> PushConsumer:
        consumer = PushConsumer("ord", config=_real_config(real, name), listener=listener(name),
                                options=REAL, orderly=True, consume_from=FIRST)
        consumer.subscribe("Ord")
        return consumer

    keys = [f"k{i}" for i in range(12)]
    per_key = 25
    c1 = member("c1")
    await c1.start()
    async with Producer("ord-producer", config=_real_config(real, "p")) as producer:

        async def send(lo: int, hi: int) -> None:
            for seq in range(lo, hi):
                for key in keys:
                    await producer.send(Message("Ord", f"{key}:{seq}".encode()),
                                        sharding_key=key)

        await send(0, 8)
        c2 = member("c2")
        await c2.start()  # joins while c1 still has work buffered
        await send(8, 16)
        await _until_logged(log, progress, lambda: len({(k, s) for _, k, s in log}) >= 150)
        await c1.close()  # leaves while c2 and the producer keep going
        await send(16, per_key)
    await _until_logged(log, progress,
                        lambda: len({(k, s) for _, k, s in log}) == len(keys) * per_key)
    await c2.close()
    for key in keys:
        seqs = [s for _, k, s in log if k == key]
        assert seqs == list(range(per_key)), key  # in order, none twice, none lost
    assert {m for m, _, _ in log} == {"c1", "c2"}
    assert c2.rebalance_count >= 2


async def _until_logged(log: list[Any], progress: asyncio.Event, done: Callable[[], bool],
                        timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not done():
            progress.clear()
            await progress.wait()


async def test_retries_then_dead_letter_queue(real: Cluster) -> None:
    await _topic(real, "Fail", 2)
    deliveries: list[tuple[str, str, int]] = []
    progress = asyncio.Event()

    async def always_fails(msgs: list[MessageExt]) -> ConsumeStatus:
        deliveries.extend((m.topic, m.body.decode(), m.reconsume_times) for m in msgs)
        progress.set()
        return LATER

    options = dataclasses.replace(REAL, max_reconsume_times=2)
    consumer = PushConsumer("dlq", config=_real_config(real, "c"), listener=always_fails,
                            options=options, consume_from=FIRST)
    consumer.subscribe("Fail")
    bodies = {f"f{i}" for i in range(6)}
    async with consumer, Producer("fail-producer", config=_real_config(real, "p")) as producer:
        for body in sorted(bodies):
            await producer.send(Message("Fail", body.encode()))
        # 18 deliveries through two retry round trips each: a bound for a busy machine
        await _until_logged(deliveries, progress, lambda: len(deliveries) >= 18, timeout=60)
    # delivered three times each, always under the original topic, then dead-lettered
    assert sorted(deliveries) == sorted(("Fail", b, n) for b in bodies for n in range(3))
    dead: list[MessageExt] = []
    dlq = [MessageQueue("%DLQ%dlq", f"broker-{x}", 0) for x in "ab"]
    async with PullConsumer("dlq-reader", config=_real_config(real, "r"),
                            consume_from=FIRST) as reader:
        async with asyncio.timeout(10):
            while len(dead) < len(bodies):
                with contextlib.suppress(TideMQError):
                    reader.assign([q for q in dlq if q in await _dlq_queues(real)])
                dead += await reader.poll(timeout=0.5)
    assert sorted(m.body.decode() for m in dead) == sorted(bodies)
    assert all(m.properties.get("RETRY_TOPIC") == "Fail" for m in dead)


async def _dlq_queues(cluster: Cluster) -> list[MessageQueue]:
    """The DLQ queues that exist (the DLQ topic appears on a broker at its first use)."""
    async with AdminClient(config=_real_config(cluster, "admin")) as admin:
        route = await admin.topic_route("%DLQ%dlq")
    return [MessageQueue("%DLQ%dlq", qd.broker_name, 0) for qd in route.queue_datas]


def _slow_offset_writes(cluster: Cluster, monkeypatch: pytest.MonkeyPatch,
                        seconds: float) -> None:
    """Each broker's offsets file is written ``seconds`` late (a slow or busy disk), as
    INVOKE_BROKER_TO_RESET_OFFSET writes it before it tells the consumers."""
    for broker in cluster.brokers:
        write = broker.offsets.persist

        def slow(write: Callable[[], None] = write) -> None:
            time.sleep(seconds)  # the fault: runs on the broker's writer thread
            write()

        monkeypatch.setattr(broker.offsets, "persist", slow)


async def test_offset_reset_while_consuming(real: Cluster,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A reset rewinds every queue: what was consumed before it comes again, once. Each
    delivery is tagged when the listener is entered; the listener is held at a gate while
    the resets are sent, so a delivery tagged after them started after every queue was
    reset (a reset that reached one broker while the other's queues went on being
    consumed would otherwise count their old deliveries as new ones)."""
    await _topic(real, "Rst", 2)
    _slow_offset_writes(real, monkeypatch, 0.3)
    got: list[tuple[str, int]] = []  # (body, phase of the test when the delivery began)
    phase = {"n": 0}
    progress = asyncio.Event()
    gate = asyncio.Event()
    gate.set()

    async def slow(msgs: list[MessageExt]) -> ConsumeStatus:
        began = phase["n"]
        await gate.wait()
        await asyncio.sleep(0.01)
        got.extend((m.body.decode(), began) for m in msgs)
        progress.set()
        return OK

    options = dataclasses.replace(REAL, consume_concurrency=2)
    consumer = PushConsumer("rst", config=_real_config(real, "c"), listener=slow,
                            options=options, consume_from=FIRST)
    consumer.subscribe("Rst")
    bodies = {f"r{i}" for i in range(60)}
    async with consumer, Producer("rst-producer", config=_real_config(real, "p")) as producer:
        for body in sorted(bodies):
            await producer.send(Message("Rst", body.encode()))
        await _until_logged(got, progress, lambda: len(got) >= 15)  # well before the end
        gate.clear()
        inst = consumer.instance
        for broker in real.brokers:  # rewind the group to the start of every queue
            header = ResetOffsetRequestHeader(topic="Rst", group="rst", timestamp=0,
                                              is_force=True)
            cmd = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                          header.to_ext())
            # the broker tells the consumer (220) on this connection before it answers
            response = await inst.request(broker.broker_addr, cmd)
            assert response.code == ResponseCode.SUCCESS, response.remark
        phase["n"] = 1
        gate.set()
        await _until_logged(got, progress,
                            lambda: {b for b, p in got if p == 1} == bodies)
        await consumer.commit()
        async with AdminClient(config=_real_config(real, "admin")) as admin:
            offsets = await admin.consumer_offsets("rst", "Rst")
    before = [b for b, p in got if p == 0]
    assert len(before) < len(bodies)  # the reset came while consuming
    assert sum(o.broker_offset for o in offsets) == len(bodies)
    assert all(o.lag == 0 for o in offsets)
    # after the reset everything came again, and nothing more than twice
    assert max(collections.Counter(b for b, _ in got).values()) <= 2


def test_reset_offset_body_parsing() -> None:
    body = (b'{"offsetTable":[{"topic":"T","brokerName":"broker-a","queueId":1,'
            b'"offset":42}]}')
    cmd = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                  {"topic": "T", "group": "g", "timestamp": "0"}, body)
    assert read_reset_offsets(cmd) == {QA1: 42}
    assert read_reset_offsets(RemotingCommand.request(220, {})) == {}
    with pytest.raises(RemoteProtocolError):
        read_reset_offsets(RemotingCommand.request(220, {}, b'{"offsetTable":{"x":1}}'))


async def test_reset_offset_reaches_only_its_group(cluster: list[FakeBroker],
                                                   config: ClientConfig) -> None:
    a = cluster[0]
    await _fill(a, QA0, 4)
    async with PullConsumer("pg", config=config, consume_from=FIRST) as puller:
        puller.assign([QA0])
        assert len(await puller.poll(timeout=2)) == 4
        await puller.instance.send_heartbeat()
        assert await a.reset_offsets("pg", {QA0: 1, QB0: 0}) == 1
        assert puller.position(QA0) == 1  # seeks the assigned queue; ignores the other
        again = await puller.poll(timeout=2)
        assert [m.queue_offset for m in again] == [1, 2, 3]
        member = a.members["pg"][puller.instance.client_id]
        cmd = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                      {"topic": "T", "group": "nobody", "timestamp": "0"},
                                      b'{"offsetTable":[]}')
        response = await member.request(cmd, 2.0)
        assert response.code == ResponseCode.CONSUMER_NOT_ONLINE
        bad = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                      {"topic": "T", "group": "pg", "timestamp": "0"}, b"[1")
        assert (await member.request(bad, 2.0)).code == ResponseCode.SYSTEM_ERROR


def _served(broker: Any, group: str) -> int:
    """Messages ``broker`` has served to ``group``'s pulls (its own counter)."""
    meter = broker.stats.group_get.get(group)
    return 0 if meter is None else int(meter.total)


async def _flow_setup(real: Cluster, count: int, size: int) -> Any:
    await _topic(real, "Flow", 1)
    a = real.brokers[0]
    async with Producer("flow-producer", config=_real_config(real, "p")) as producer:
        for i in range(count):
            await producer.send(Message("Flow", f"{i:04d}".encode() + bytes(size)),
                                queue=MessageQueue("Flow", "broker-a", 0))
    assert await asyncio.to_thread(a.store.wait_dispatched, 10.0)
    return a


async def _paused_at(broker: Any, served: int) -> None:
    """The consumer stopped pulling once ``served`` messages were buffered: the broker
    served that many, and no more in a window of several pull round trips."""
    await until(lambda: _served(broker, "flow") >= served)
    await asyncio.sleep(0.3)  # a window in which no more pulls may happen
    assert _served(broker, "flow") == served


async def _paused_then_drained(real: Cluster, broker: Any, count: int, pull_batch_size: int,
                               options: PushOptions, paused_at: int) -> Recorder:
    """Consume "Flow" with a listener held at its first batch: pulling pauses once
    ``paused_at`` messages are buffered; released, the consumer takes all ``count``."""
    gate = asyncio.Event()
    rec = Recorder(gate=gate)
    cfg = dataclasses.replace(_real_config(real, "c1"), pull_batch_size=pull_batch_size)
    consumer = PushConsumer("flow", config=cfg, listener=rec, options=options,
                            consume_from=FIRST)
    consumer.subscribe("Flow")
    async with consumer:
        await rec.started.wait()
        try:
            await _paused_at(broker, paused_at)
        finally:
            gate.set()  # a failure must not leave the consumer blocked in its listener
        await rec.wait(lambda r: len(r.ok) == count, timeout=20)
    return rec


async def test_flow_control_pauses_pulling(real: Cluster) -> None:
    a = await _flow_setup(real, 60, 10)
    options = dataclasses.replace(REAL, pull_threshold_for_queue=8, consume_concurrency=2)
    # 12 buffered > 8: paused after the third batch of 4
    rec = await _paused_then_drained(real, a, 60, 4, options, paused_at=12)
    assert _served(a, "flow") == 60
    assert sorted(int(m.body[:4]) for m in rec.ok) == list(range(60))


async def test_flow_control_by_bytes(real: Cluster) -> None:
    a = await _flow_setup(real, 20, 1000)
    options = dataclasses.replace(REAL, pull_threshold_size_for_queue=3500)
    # 4 bodies of 1004 bytes buffered > 3500
    rec = await _paused_then_drained(real, a, 20, 2, options, paused_at=4)
    assert sorted(int(m.body[:4]) for m in rec.ok) == list(range(20))


async def test_a_new_groups_first_retry_comes_after_its_delay(tmp_path: Path) -> None:
    """The first rebalance of a new group runs before the broker has registered the
    group's retry topic; the retry must not wait for the next periodic rebalance."""
    levels = " ".join(["1s"] * 18)
    async with Cluster(tmp_path, brokers=2, broker={"message_delay_level": levels}) as cluster:
        await _topic(cluster, "FirstRetry", 2)
        loop = asyncio.get_running_loop()
        deliveries: list[tuple[int, float]] = []  # (reconsume times, when)
        came = asyncio.Event()

        async def fail_once(msgs: list[MessageExt]) -> ConsumeStatus:
            deliveries.extend((m.reconsume_times, loop.time()) for m in msgs)
            came.set()
            return OK if msgs[0].reconsume_times else ConsumeStatus.RECONSUME_LATER

        interval = 60.0
        options = dataclasses.replace(REAL, rebalance_interval=interval, retry_delay_level=1)
        consumer = PushConsumer("first-retry", config=_real_config(cluster, "c"),
                                listener=fail_once, options=options, consume_from=FIRST)
        consumer.subscribe("FirstRetry")
        async with Producer("first-retry-producer", config=_real_config(cluster, "p")) as p:
            await p.send(Message("FirstRetry", b"once"))
        async with consumer:
            await _until_logged(deliveries, came, lambda: len(deliveries) >= 2,
                                timeout=interval * 1.5)
    (times0, first), (times1, again) = deliveries[:2]
    assert (times0, times1) == (0, 1)
    assert again - first < interval / 2  # the 1 s delay, not a periodic rebalance later
