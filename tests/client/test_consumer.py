"""PullConsumer against scripted fake name server and brokers."""

from __future__ import annotations

import asyncio

import pytest
from tests.client.fakes import FakeBroker, FakeNameServer, hold_commit_answer

from tidemq.client import ClientConfig, ConsumeFromWhere, PullConsumer
from tidemq.codec.bodies import ConsumeType
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import PullMessageRequestHeader
from tidemq.types import MessageExt, MessageQueue

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
QA = MessageQueue("T", "broker-a", 0)
QB = MessageQueue("T", "broker-b", 1)


async def _fill(broker: FakeBroker, mq: MessageQueue, n: int, tags: str | None = None,
                start: int = 0) -> None:
    for i in range(start, start + n):
        props = {"TAGS": tags} if tags else {}
        await broker.put(mq.topic, mq.queue_id, f"{mq.broker_name}-{i}".encode(), props)


async def _collect(consumer: PullConsumer, count: int, rounds: int = 20) -> list[MessageExt]:
    got: list[MessageExt] = []
    for _ in range(rounds):
        got += await consumer.poll(timeout=0.5)
        if len(got) >= count:
            break
    return got


@pytest.fixture
def cluster(namesrv: FakeNameServer, brokers: list[FakeBroker]) -> list[FakeBroker]:
    namesrv.add_topic("T", brokers, queues=2)
    return brokers


async def test_found_commit_and_committed(cluster: list[FakeBroker],
                                          config: ClientConfig) -> None:
    await _fill(cluster[0], QA, 5)
    async with PullConsumer("cg", config=config, consume_from=FIRST) as consumer:
        consumer.assign([QA])
        msgs = await consumer.poll(timeout=2, max_messages=3)
        assert [m.body for m in msgs] == [b"broker-a-0", b"broker-a-1", b"broker-a-2"]
        assert all(m.broker_name == "broker-a" and m.queue_id == 0 for m in msgs)
        assert consumer.position(QA) == 3
        await consumer.commit()
        assert await consumer.committed(QA) == 3
        rest = await consumer.poll(timeout=2)
        assert [m.queue_offset for m in rest] == [3, 4]
    # close committed the final position
    assert cluster[0].offsets[("cg", "T", 0)] == 5
    pulls = cluster[0].log.of(RequestCode.PULL_MESSAGE)
    header = PullMessageRequestHeader.from_ext(pulls[0].ext_fields)
    assert (header.consumer_group, header.sys_flag, header.subscription) == ("cg", 6, "*")


async def test_starts_from_committed_offset(cluster: list[FakeBroker],
                                            config: ClientConfig) -> None:
    await _fill(cluster[0], QA, 4)
    cluster[0].offsets[("cg", "T", 0)] = 2
    async with PullConsumer("cg", config=config) as consumer:
        consumer.assign([QA])
        msgs = await consumer.poll(timeout=2)
    assert [m.queue_offset for m in msgs] == [2, 3]


async def test_consume_from_last_skips_old_messages(cluster: list[FakeBroker],
                                                    config: ClientConfig) -> None:
    await _fill(cluster[0], QA, 3)
    async with PullConsumer("cg", config=config) as consumer:
        consumer.assign([QA])
        assert await consumer.poll(timeout=0.5) == []
        assert consumer.position(QA) == 3
        await _fill(cluster[0], QA, 1, start=3)
        msgs = await consumer.poll(timeout=2)
    assert [m.body for m in msgs] == [b"broker-a-3"]


async def test_nothing_found_returns_empty(cluster: list[FakeBroker],
                                           config: ClientConfig) -> None:
    async with PullConsumer("cg", config=config, consume_from=FIRST) as consumer:
        consumer.assign([QA])
        assert await consumer.poll(timeout=0.5) == []
        assert consumer.position(QA) == 0


async def test_long_poll_wakes_on_new_message(cluster: list[FakeBroker],
                                              namesrv: FakeNameServer) -> None:
    config = ClientConfig(namesrv_addr=(namesrv.address,), long_polling_timeout=10.0)
    async with PullConsumer("cg", config=config, consume_from=FIRST) as consumer:
        consumer.assign([QA])
        polling = asyncio.ensure_future(consumer.poll(timeout=8))
        await cluster[0].wait_parked()
        assert not polling.done()
        await _fill(cluster[0], QA, 1)
        msgs = await asyncio.wait_for(polling, 5)
    assert [m.body for m in msgs] == [b"broker-a-0"]
    [pull] = cluster[0].log.of(RequestCode.PULL_MESSAGE)
    assert PullMessageRequestHeader.from_ext(pull.ext_fields).suspend_timeout_millis == 10000


async def test_offset_moved_continues_at_corrected_offset(cluster: list[FakeBroker],
                                                          config: ClientConfig) -> None:
    await _fill(cluster[0], QA, 6)
    cluster[0].truncate("T", 0, 4)
    async with PullConsumer("cg", config=config) as consumer:
        consumer.assign([QA])
        consumer.seek(QA, 1)
        msgs = await consumer.poll(timeout=2)
        assert [m.queue_offset for m in msgs] == [4, 5]
        consumer.seek(QA, 50)  # beyond the end: moved back to max
        assert await consumer.poll(timeout=0.5) == []
        assert consumer.position(QA) == 6


async def test_tag_filter(cluster: list[FakeBroker], config: ClientConfig) -> None:
    await _fill(cluster[0], QA, 2, tags="a")
    await _fill(cluster[0], QA, 2, tags="b", start=2)
    await _fill(cluster[0], QA, 1, start=4)
    async with PullConsumer("cg", config=config, consume_from=FIRST) as consumer:
        consumer.subscribe("T", "a || c")
        msgs = await _collect(consumer, 2)
        assert [m.body for m in msgs] == [b"broker-a-0", b"broker-a-1"]
        assert consumer.position(QA) == 5


async def test_subscribe_reads_every_queue_and_heartbeats(cluster: list[FakeBroker],
                                                          config: ClientConfig) -> None:
    await _fill(cluster[0], QA, 2)
    await _fill(cluster[1], QB, 3)
    async with PullConsumer("cg", config=config, consume_from=FIRST) as consumer:
        consumer.subscribe("T")
        msgs = await _collect(consumer, 5)
        assert sorted(m.body for m in msgs) == sorted(
            [b"broker-a-0", b"broker-a-1", b"broker-b-0", b"broker-b-1", b"broker-b-2"])
        assert len(consumer.assignment()) == 4
    for broker in cluster:
        [beat, *_] = broker.heartbeats
        [data] = beat.consumer_data_set
        assert data.group_name == "cg" and data.consume_type is ConsumeType.CONSUME_ACTIVELY
        assert [s.topic for s in data.subscription_data_set] == ["T"]


async def test_seek_helpers(cluster: list[FakeBroker], config: ClientConfig) -> None:
    await _fill(cluster[0], QA, 4)
    stamps = [s.store_time for s in cluster[0].stored("T", 0)]
    async with PullConsumer("cg", config=config) as consumer:
        consumer.assign([QA])
        await consumer.seek_to_beginning()
        assert consumer.position(QA) == 0
        await consumer.seek_to_end([QA])
        assert consumer.position(QA) == 4
        await consumer.seek_by_timestamp(stamps[2])
        assert consumer.position(QA) == 2
        msgs = await consumer.poll(timeout=2)
        assert [m.queue_offset for m in msgs] == [2, 3]
        with pytest.raises(ValueError):
            consumer.seek(QB, 0)


async def test_async_iteration(cluster: list[FakeBroker], config: ClientConfig) -> None:
    await _fill(cluster[1], QB, 3)
    got = []
    async with PullConsumer("cg", config=config, consume_from=FIRST) as consumer:
        consumer.assign([QB])
        async for msg in consumer:
            got.append(msg.body)
            if len(got) == 3:
                break
    assert got == [b"broker-b-0", b"broker-b-1", b"broker-b-2"]
    assert cluster[1].offsets[("cg", "T", 1)] == 3


async def test_a_failing_queue_does_not_stop_the_others(cluster: list[FakeBroker],
                                                        config: ClientConfig) -> None:
    await _fill(cluster[1], QB, 2)
    async with PullConsumer("cg", config=config) as consumer:
        consumer.assign([QA, QB])
        consumer.seek(QA, 0)
        consumer.seek(QB, 0)
        await cluster[0].close()
        msgs = await _collect(consumer, 2)
        assert [m.body for m in msgs] == [b"broker-b-0", b"broker-b-1"]
        await consumer.close(commit=False)


async def test_assign_and_subscribe_exclude_each_other(config: ClientConfig) -> None:
    consumer = PullConsumer("cg", config=config)
    consumer.assign([QA])
    with pytest.raises(ValueError):
        consumer.subscribe("T")
    consumer.unsubscribe()
    consumer.subscribe("T")
    with pytest.raises(ValueError):
        consumer.assign([QA])


async def test_notify_consumer_ids_changed(cluster: list[FakeBroker],
                                           config: ClientConfig) -> None:
    async with PullConsumer("cg", config=config) as consumer:
        consumer.assign([QA])
        # A round trip to the broker opens the connection; a poll of 0.1 s did only when
        # the machine let its pull connect in time (none, or one closed, otherwise).
        await consumer.committed(QA)
        [conn] = cluster[0].server.connections
        notify = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                         {"consumerGroup": "cg"})
        consumer._reresolve = False
        await conn.oneway(notify)
        await consumer.committed(QA)  # a round trip on the same connection: notify handled
        assert consumer._reresolve


async def test_seek_drops_the_pull_in_flight(cluster: list[FakeBroker],
                                             config: ClientConfig) -> None:
    await _fill(cluster[0], QA, 3)
    async with PullConsumer("cg", config=config) as consumer:
        consumer.assign([QA])
        assert await consumer.poll(timeout=0.5) == []  # at the end: a pull is held
        assert consumer.position(QA) == 3
        consumer.seek(QA, 1)
        msgs = await consumer.poll(timeout=2)
        assert [m.queue_offset for m in msgs] == [1, 2]
        assert consumer.position(QA) == 3


async def test_full_batch_pulls_ahead_without_gaps(cluster: list[FakeBroker],
                                                   config: ClientConfig) -> None:
    """A pull that brings a full batch starts the next one before it is decoded; the
    messages still come in order, each once, and seeking drops the pull ahead."""
    await _fill(cluster[0], QA, 7)
    small = ClientConfig(namesrv_addr=config.namesrv_addr, pull_batch_size=2)
    async with PullConsumer("cg", config=small, consume_from=FIRST) as consumer:
        consumer.assign([QA])
        got = await _collect(consumer, 7)
        assert [m.queue_offset for m in got] == list(range(7))
        starts = [PullMessageRequestHeader.from_ext(c.ext_fields).queue_offset
                  for c in cluster[0].log.of(RequestCode.PULL_MESSAGE)]
        assert starts[:4] == [0, 2, 4, 6]
        consumer.seek(QA, 1)
        again = await _collect(consumer, 6)
        assert [m.queue_offset for m in again] == list(range(1, 7))


async def test_a_commit_answered_after_a_seek_is_not_taken_as_committed(
        cluster: list[FakeBroker], config: ClientConfig) -> None:
    """A commit sent before a seek and answered after the commit that followed the seek:
    the queue does not take the old offset as committed, so when polling reaches it
    again it is committed again (else the broker kept the later commit's offset, and a
    restart delivered everything once more)."""
    a = cluster[0]
    await _fill(a, QA, 4)
    held, release = hold_commit_answer(a, 4)
    async with PullConsumer("cg", config=config, consume_from=FIRST) as consumer:
        consumer.assign([QA])
        assert len(await _collect(consumer, 4)) == 4
        before = asyncio.create_task(consumer.commit())
        await held.wait()
        consumer.seek(QA, 0)
        await consumer.commit()
        assert a.offsets[("cg", "T", 0)] == 0
        release.set()
        await before
        assert [m.queue_offset for m in await _collect(consumer, 4)] == [0, 1, 2, 3]
        await consumer.commit()
        assert a.offsets[("cg", "T", 0)] == 4


async def test_a_commit_answered_after_an_offset_reset_is_not_taken_as_committed(
        cluster: list[FakeBroker], config: ClientConfig) -> None:
    """The same race with a broker's offset reset (RESET_CONSUMER_CLIENT_OFFSET): the
    broker stores the reset's offset, then tells the consumer, while the consumer's
    older commit is still unanswered."""
    a = cluster[0]
    await _fill(a, QA, 4)
    held, release = hold_commit_answer(a, 4)
    async with PullConsumer("cg", config=config, consume_from=FIRST) as consumer:
        consumer.assign([QA])
        assert len(await _collect(consumer, 4)) == 4
        before = asyncio.create_task(consumer.commit())
        await held.wait()
        a.offsets[("cg", "T", 0)] = 0  # what a broker's reset stores
        await consumer.instance.send_heartbeat()  # the broker knows it as a member
        assert await a.reset_offsets("cg", {QA: 0}) == 1
        assert consumer.position(QA) == 0
        release.set()
        await before
        assert [m.queue_offset for m in await _collect(consumer, 4)] == [0, 1, 2, 3]
        await consumer.commit()
        assert a.offsets[("cg", "T", 0)] == 4
