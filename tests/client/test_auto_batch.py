"""AutoBatchProducer against a real cluster: lanes (one batch in flight per queue, the
next one filling behind it), the sticky queue of unpinned messages, one future per
message, errors, flush and close."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client import AdminClient, ClientConfig, Message, MessageQueue, Producer
from tidemq.client.batch_rpc import batch_requester
from tidemq.client.batching import AutoBatchProducer, _message, _SharedMessages
from tidemq.client.errors import ClientClosedError
from tidemq.client.sending import BatchCompression, new_send_result, prepare_send_batch
from tidemq.errors import BrokerResponseError, ResponseCode, TideMQError, error_for_code
from tidemq.testing import Cluster
from tidemq.types import SendResult, SendStatus


@pytest.fixture
async def producer(cluster: Cluster) -> AsyncIterator[Producer]:
    cfg = ClientConfig(namesrv_addr=(cluster.namesrv_addr,))
    async with AdminClient(config=cfg) as admin:
        await admin.create_topic("Lanes", read_queue_nums=4, write_queue_nums=4)
        async with asyncio.timeout(5):
            while True:
                with contextlib.suppress(BrokerResponseError):  # not routed yet
                    route = await admin.instance.routes.get("Lanes", refresh=True)
                    if len(route.publish_queues) == 4:
                        break
                await asyncio.sleep(0.02)  # the broker registers the topic soon
    async with Producer("pg", config=cfg) as p:
        yield p


class Spy:
    """Wraps ``producer.send_prepared_batch`` and ``producer.send`` (a batch of one):
    records every batch (queue, size, how many of its queue were in flight) and fails the
    batches ``fail`` names (by call index)."""

    def __init__(self, producer: Producer, fail: set[int] | None = None) -> None:
        self.calls: list[tuple[MessageQueue | None, int]] = []
        self.coalesced: list[bool] = []
        #: Calls that were plain sends (a batch of one message).
        self.singles: list[int] = []
        self.max_in_flight: dict[MessageQueue | None, int] = {}
        self._in_flight: dict[MessageQueue | None, int] = {}
        self.fail = fail or set()
        self.release = asyncio.Event()
        self.release.set()
        real = producer.send_prepared_batch

        async def wrapped(prepared: Any, first: Message, **kwargs: Any) -> SendResult:
            queue = kwargs.get("queue")
            index = len(self.calls)
            self.calls.append((queue, prepared.count))
            self.coalesced.append(kwargs.get("coalesce", False))  # the default
            self._in_flight[queue] = self._in_flight.get(queue, 0) + 1
            self.max_in_flight[queue] = max(self.max_in_flight.get(queue, 0),
                                            self._in_flight[queue])
            try:
                await self.release.wait()
                if index in self.fail:
                    raise error_for_code(ResponseCode.SYSTEM_ERROR, "injected")
                return await real(prepared, first, **kwargs)
            finally:
                self._in_flight[queue] -= 1

        real_one = producer.send

        async def wrapped_one(msg: Message, **kwargs: Any) -> SendResult:
            queue = kwargs.get("queue")
            index = len(self.calls)
            self.calls.append((queue, 1))
            self.singles.append(index)
            await self.release.wait()
            if index in self.fail:
                raise error_for_code(ResponseCode.SYSTEM_ERROR, "injected")
            return await real_one(msg, **kwargs)

        producer.send_prepared_batch = wrapped  # type: ignore[method-assign]
        producer.send = wrapped_one  # type: ignore[method-assign]


async def turns(n: int = 3) -> None:
    """Let the loop run ``n`` iterations (callbacks queued now, then the tasks they start)."""
    for _ in range(n):
        await asyncio.sleep(0)


def bodies(n: int, start: int = 0) -> list[Message]:
    return [Message("Lanes", f"m{start + i:05d}".encode()) for i in range(n)]


async def test_one_batch_in_flight_per_queue_and_order_kept(producer: Producer) -> None:
    spy = Spy(producer)
    mq = (await producer.instance.routes.get("Lanes")).publish_queues[0]
    batcher = AutoBatchProducer(producer, linger_ms=0, max_batch_messages=16)
    spy.release.clear()
    first = await batcher.send(Message("Lanes", b"first"), queue=mq)
    await turns()  # the first batch ships alone at the end of this iteration
    assert spy.calls == [(mq, 1)]
    rest = [await batcher.send(m, queue=mq) for m in bodies(40)]  # fill behind it
    assert len(spy.calls) == 1  # the lane is busy: nothing else left
    spy.release.set()
    results = await asyncio.gather(first, *rest)
    assert [size for _, size in spy.calls] == [1, 16, 16, 8]
    assert spy.singles == [0]  # the lone message went as a plain send
    assert spy.max_in_flight == {mq: 1}
    assert [r.queue_offset for r in results] == list(range(41))  # send order
    assert all(r.queue == mq and r.message_count == 1 for r in results)
    assert len({r.msg_id for r in results}) == 41
    assert not any(spy.coalesced)  # batches go out as their own requests
    await batcher.close()


async def test_concurrent_senders_each_get_their_own_result(producer: Producer) -> None:
    spy = Spy(producer)
    results: list[SendResult] = []
    async with AutoBatchProducer(producer, linger_ms=0, max_batch_messages=20) as batcher:

        async def worker(k: int) -> None:
            for i in range(10):
                results.append(await (await batcher.send(Message("Lanes", b"%d" % (k * 100 + i)))))

        await asyncio.gather(*(worker(k) for k in range(50)))
    assert len(results) == 500 and all(r.status is SendStatus.SEND_OK for r in results)
    per_queue: dict[MessageQueue, list[int]] = {}
    for r in results:
        per_queue.setdefault(r.queue, []).append(r.queue_offset)
    assert len(per_queue) > 1  # the sticky queue moved on as batches closed
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))  # no gap, no duplicate
    assert max(spy.max_in_flight.values()) == 1
    assert sum(size for _, size in spy.calls) == 500
    assert max(size for _, size in spy.calls) == 20
    assert len(spy.calls) < 100  # batched, not one request per message


async def test_unpinned_messages_of_one_iteration_make_one_batch(producer: Producer) -> None:
    spy = Spy(producer)
    async with AutoBatchProducer(producer, linger_ms=0) as batcher:
        futures = [await batcher.send(m) for m in bodies(7)]
        first = await asyncio.gather(*futures)
        futures = [await batcher.send(m) for m in bodies(5, 7)]
        second = await asyncio.gather(*futures)
    assert [size for _, size in spy.calls] == [7, 5]
    assert len({r.queue for r in first}) == 1 and len({r.queue for r in second}) == 1
    assert first[0].queue != second[0].queue  # the next batch went to the next queue
    assert [r.queue_offset for r in first] == list(range(7))


async def test_unpinned_sends_of_one_iteration_fill_batches_to_the_cap(
        producer: Producer) -> None:
    """Messages joining the sticky queue's open batch: the one that fills it closes it,
    the next opens a batch on the next queue, and a message with properties joins the
    open batch as any other."""
    spy = Spy(producer)
    async with AutoBatchProducer(producer, linger_ms=0, max_batch_messages=3) as batcher:
        msgs = [*bodies(4), Message("Lanes", b"tagged", {"TAGS": "t"}), *bodies(3, 4)]
        futures = [await batcher.send(m) for m in msgs]
        results = await asyncio.gather(*futures)
    assert [size for _, size in spy.calls] == [3, 3, 2]
    assert [r.queue_offset for r in results] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert [len({r.queue for r in results[i:i + 3]}) for i in (0, 3, 6)] == [1, 1, 1]
    assert len({r.queue for r in results}) == 3


@pytest.mark.parametrize("odd", [None, Message("Lanes", b"flagged", {}, 7),
                                 Message("Lanes", b"tagged", {"TAGS": "t"})])
async def test_a_batch_of_sends_is_stored_as_its_messages(producer: Producer,
                                                          odd: Message | None) -> None:
    """Messages sent without properties join their batch the short way, and the batch
    goes as their bodies alone; one with a flag (or properties) among them makes it a
    batch of messages again. Either way each message is stored as it was sent, under the
    key its result names."""
    msgs = bodies(3) + ([] if odd is None else [odd]) + bodies(3, 3)
    spy = Spy(producer)
    async with AutoBatchProducer(producer, linger_ms=0) as batcher:
        futures = [await batcher.send(m) for m in msgs]
        results = await asyncio.gather(*futures)
    assert [size for _, size in spy.calls] == [len(msgs)]
    async with AdminClient(config=producer.config) as admin:
        for msg, result in zip(msgs, results, strict=True):
            stored = await admin.view_message(result.offset_msg_id)
            assert (stored.body, stored.flag) == (msg.body, msg.flag)
            assert stored.properties["UNIQ_KEY"] == result.msg_id
            assert stored.properties.get("TAGS") == msg.properties.get("TAGS")


async def test_a_cancelled_future_leaves_the_others_of_its_batch_their_results(
        producer: Producer) -> None:
    """The messages of a batch of send()'s futures get their results together; one whose
    future its caller cancelled meanwhile is still sent, and the others still learn their
    own places."""
    async with AutoBatchProducer(producer, linger_ms=0) as batcher:
        futures = [await batcher.send(m) for m in bodies(5)]
        futures[2].cancel()
        await asyncio.wait(futures)
    assert futures[2].cancelled()
    offsets = [f.result().queue_offset for i, f in enumerate(futures) if i != 2]
    assert offsets == [0, 1, 3, 4]
    assert len({f.result().msg_id for i, f in enumerate(futures) if i != 2}) == 4


async def test_linger_holds_a_lone_message_until_flush(producer: Producer) -> None:
    spy = Spy(producer)
    batcher = AutoBatchProducer(producer, linger_ms=60_000)
    futures = [await batcher.send(m) for m in bodies(3)]
    await turns()
    assert spy.calls == [] and not any(f.done() for f in futures)
    await batcher.flush()
    assert [size for _, size in spy.calls] == [3]
    assert all(f.result().status is SendStatus.SEND_OK for f in futures)
    await batcher.close()
    with pytest.raises(ClientClosedError):
        await batcher.send(Message("Lanes", b"late"))


async def test_flush_waits_for_batches_queued_behind_a_busy_one(producer: Producer) -> None:
    spy = Spy(producer)
    mq = (await producer.instance.routes.get("Lanes")).publish_queues[1]
    batcher = AutoBatchProducer(producer, linger_ms=60_000, max_batch_messages=4)
    spy.release.clear()
    futures = [await batcher.send(m, queue=mq) for m in bodies(10)]  # 4 + 4 full, 2 open
    await turns()
    assert spy.calls == [(mq, 4)]
    flushing = asyncio.ensure_future(batcher.close())
    await turns()
    assert not flushing.done()
    spy.release.set()
    await flushing
    assert [size for _, size in spy.calls] == [4, 4, 2]
    assert [f.result().queue_offset for f in futures] == list(range(10))
    assert batcher.buffered_bytes == 0


async def test_a_cancelled_flush_cancels_no_send(producer: Producer) -> None:
    spy = Spy(producer)
    spy.release.clear()
    batcher = AutoBatchProducer(producer)
    futures = [await batcher.send(m) for m in bodies(3)]
    flushing = asyncio.ensure_future(batcher.flush())
    await turns()
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    spy.release.set()
    results = await asyncio.gather(*futures)
    assert [r.queue_offset for r in results] == [0, 1, 2]
    await batcher.close()


async def test_a_failed_batch_fails_its_messages_only(producer: Producer) -> None:
    spy = Spy(producer, fail={1})
    mq = (await producer.instance.routes.get("Lanes")).publish_queues[2]
    async with AutoBatchProducer(producer, linger_ms=0, max_batch_messages=3) as batcher:
        spy.release.clear()
        futures = [await batcher.send(m, queue=mq) for m in bodies(9)]
        spy.release.set()
        await asyncio.gather(*futures, return_exceptions=True)
    errors = [f.exception() for f in futures]
    assert [e is None for e in errors] == [True] * 3 + [False] * 3 + [True] * 3
    failed = [e for e in errors if e is not None]
    assert all(isinstance(e, TideMQError) and "injected" in str(e) for e in failed)
    assert len({id(e) for e in failed}) == 1  # one error, its batch's
    assert [f.result().queue_offset for f in futures[6:]] == [3, 4, 5]  # lane went on


async def test_a_retriable_failure_of_an_unpinned_batch_is_sent_again(
        producer: Producer) -> None:
    spy = Spy(producer, fail={0})
    async with AutoBatchProducer(producer, linger_ms=0) as batcher:
        futures = [await batcher.send(m) for m in bodies(4)]
        results = await asyncio.gather(*futures)
    assert [size for _, size in spy.calls] == [4, 4]
    assert spy.calls[1][0] is None  # the producer chose the queue of the second attempt
    assert [r.queue_offset for r in results] == list(range(4))


def test_send_result_built_through_slots_equals_the_dataclass() -> None:
    mq = MessageQueue("T", "b", 3)
    fast = new_send_result(SendStatus.SEND_OK, "key", "offid", mq, 17, None)
    assert fast == SendResult(SendStatus.SEND_OK, "key", "offid", mq, 17, None)
    assert fast.queue_offsets == range(17, 18)
    batch = new_send_result(SendStatus.FLUSH_DISK_TIMEOUT, "k", "o", mq, 5, "t", 3)
    assert batch == SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "k", "o", mq, 5, "t", 3)
    with pytest.raises(AttributeError):
        fast.msg_id = "x"  # type: ignore[misc]


async def test_prepared_batches_skip_the_batch_protocol_when_asked(
        producer: Producer) -> None:
    queues = (await producer.instance.routes.get("Lanes")).publish_queues
    keys = producer.instance.uniq_keys
    stats = batch_requester(producer.instance).stats

    async def two(coalesce: bool) -> list[SendResult]:
        prepared = [prepare_send_batch(bodies(3), max_size=1 << 20, keys=keys, now_ms=0,
                                       compression=BatchCompression()) for _ in queues[:2]]
        return list(await asyncio.gather(*(
            producer.send_prepared_batch(p, Message("Lanes", b"x"), queue=mq,
                                         coalesce=coalesce)
            for p, mq in zip(prepared, queues[:2], strict=True))))

    before = stats.parents
    alone = await two(False)
    assert stats.parents == before  # two requests of their own
    merged = await two(True)
    assert stats.parents == before + 1  # one parent carried both
    for results in (alone, merged):
        assert [r.message_count for r in results] == [3, 3]
        assert [r.queue for r in results] == list(queues[:2])


async def test_a_lone_message_is_a_plain_send_and_retried_like_a_batch(
        producer: Producer) -> None:
    spy = Spy(producer, fail={0})
    async with AutoBatchProducer(producer) as batcher:
        result = await (await batcher.send(Message("Lanes", b"alone")))
    assert spy.singles == [0, 1] and spy.calls[1][0] is None  # the producer chose again
    assert result.status is SendStatus.SEND_OK and result.message_count == 1
    pinned = Spy(producer, fail={0})
    mq = (await producer.instance.routes.get("Lanes")).publish_queues[3]
    async with AutoBatchProducer(producer) as batcher:
        future = await batcher.send(Message("Lanes", b"pinned"), queue=mq)
        with pytest.raises(TideMQError, match="injected"):
            await future
    assert pinned.calls == [(mq, 1)]  # a pinned message never moves


@settings(deadline=None, max_examples=100)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=12),
       st.one_of(st.none(), st.dictionaries(st.sampled_from(["TAGS", "KEYS", "a"]),
                                            st.text(min_size=1, max_size=4))),
       st.integers(-15, 15), st.integers(-15, 15))
def test_a_batch_of_shared_entries_reads_as_its_messages(bodies: list[bytes],
                                                          entry: dict[str, str] | None,
                                                          start: int, stop: int) -> None:
    """produce()'s traced batch hands its messages over as a view made when read: the
    same messages as the list it replaces, however it is read."""
    view = _SharedMessages("T", bodies, entry)
    listed = [_message("T", b, entry) for b in bodies]
    assert len(view) == len(listed) and list(view) == listed
    assert [view[i] for i in range(-len(bodies), len(bodies))] == [
        listed[i] for i in range(-len(bodies), len(bodies))]
    assert view[start:stop] == listed[start:stop]
    with pytest.raises(IndexError):
        view[len(bodies)]
