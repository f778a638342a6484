"""``AutoBatchProducer.produce`` against a real cluster: one call per message, no future
per message; a delivery callback (or none), a topic whose route is not cached yet, the
full buffer, and failures reported by ``flush``."""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
import types
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.client.test_batching import create, dispatched, read_queue

from tidemq.client import AdminClient, ClientConfig, MessageQueue, Producer
from tidemq.client.batching import _BARE_SIZE, AutoBatchProducer
from tidemq.client.errors import (
    BufferFullError,
    ClientClosedError,
    DeliveryError,
    InvalidMessageError,
)
from tidemq.errors import BrokerResponseError, ResponseCode
from tidemq.testing import Cluster
from tidemq.types import Message, SendResult, SendStatus

BATCH_CQ = {"queue.type": "BatchCQ"}
Outcome = tuple[BaseException | None, SendResult | None]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=2) as running:
        yield running


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[AdminClient]:
    async with AdminClient(config=ClientConfig(namesrv_addr=(cluster.namesrv_addr,))) as a:
        yield a


@pytest.fixture
async def producer(cluster: Cluster) -> AsyncIterator[Producer]:
    async with Producer("pg", config=ClientConfig(namesrv_addr=(cluster.namesrv_addr,))) as p:
        yield p


def _recorder(outcomes: dict[int, Outcome], i: int):  # type: ignore[no-untyped-def]
    def on_delivery(error: BaseException | None, result: SendResult | None) -> None:
        assert i not in outcomes  # called once
        outcomes[i] = (error, result)
    return on_delivery


@pytest.mark.parametrize("attributes", [None, BATCH_CQ], ids=["plain", "batch-cq"])
async def test_each_produced_message_is_stored_once_and_told_its_place(
        cluster: Cluster, admin: AdminClient, producer: Producer,
        attributes: dict[str, str | None] | None) -> None:
    await create(admin, "Produced", attributes=attributes)
    outcomes: dict[int, Outcome] = {}
    async with AutoBatchProducer(producer, max_batch_messages=40) as batcher:
        # The route of "Produced" is not cached yet: the first messages wait for it.
        assert producer.instance.routes.ready("Produced") is None
        for i in range(300):
            batcher.produce("Produced", b"body %04d" % i, tags="even" if i % 2 == 0 else "odd",
                            keys=[f"k{i}", "all"], properties={"n": str(i)},
                            on_delivery=_recorder(outcomes, i))
            if i % 50 == 49:
                await batcher.drain()
    assert sorted(outcomes) == list(range(300))
    assert all(error is None for error, _ in outcomes.values())
    results = {i: r for i, (_, r) in outcomes.items() if r is not None}
    assert all(r.status is SendStatus.SEND_OK and r.message_count == 1
               for r in results.values())
    await dispatched(cluster)
    stored = {}
    for mq in {r.queue for r in results.values()}:
        for m in await read_queue(producer.instance, mq):
            stored[(mq, m.queue_offset)] = m
    assert len(stored) == 300  # nothing stored twice, nothing missing
    for i, r in results.items():
        m = stored[(r.queue, r.queue_offset)]
        assert (m.body, m.msg_id, m.properties["n"]) == (b"body %04d" % i, r.msg_id, str(i))
        assert m.tags == ("even" if i % 2 == 0 else "odd")
        assert m.keys == [f"k{i}", "all"]
    per_queue: dict[MessageQueue, list[int]] = {}
    for i in sorted(results):
        per_queue.setdefault(results[i].queue, []).append(results[i].queue_offset)
    assert all(offs == sorted(offs) for offs in per_queue.values())  # produce order


async def test_without_callbacks_messages_arrive_and_flush_reports_nothing(
        cluster: Cluster, admin: AdminClient, producer: Producer) -> None:
    await create(admin, "Quiet", queues=1, brokers=2)
    batcher = AutoBatchProducer(producer)
    for i in range(120):
        batcher.produce("Quiet", b"q%03d" % i, queue=MessageQueue("Quiet", "broker-a", 0))
    await batcher.flush()
    await dispatched(cluster)
    got = await read_queue(producer.instance, MessageQueue("Quiet", "broker-a", 0))
    assert [m.body for m in got] == [b"q%03d" % i for i in range(120)]
    await batcher.close()
    with pytest.raises(ClientClosedError):
        batcher.produce("Quiet", b"late")


async def test_flush_ships_what_waited_for_its_route(cluster: Cluster, admin: AdminClient,
                                                    producer: Producer) -> None:
    """Messages parked until their topic's route arrives join a lingering batch while
    flush waits: flush ships that batch too rather than leaving it to its timer."""
    await create(admin, "Parked")
    outcomes: dict[int, Outcome] = {}
    batcher = AutoBatchProducer(producer, linger_ms=60_000)
    assert producer.instance.routes.ready("Parked") is None
    for i in range(3):
        batcher.produce("Parked", b"p%d" % i, on_delivery=_recorder(outcomes, i))
    await batcher.flush()
    assert sorted(outcomes) == [0, 1, 2]
    assert all(error is None and result is not None and result.status is SendStatus.SEND_OK
               for error, result in outcomes.values())
    await batcher.close()


@pytest.mark.parametrize("cap", ["messages", "bytes"])
async def test_batches_close_exactly_at_their_cap(cluster: Cluster, admin: AdminClient,
                                                 producer: Producer, cap: str) -> None:
    """Bodies produced in a row fill the sticky queue's batch up to the cap and no
    further: 23 messages under a cap of 5 make batches of 5, 5, 5, 5 and 3."""
    await create(admin, "Capped")
    await producer.instance.routes.get("Capped")
    body = b"c" * 100
    limits = ({"max_batch_messages": 5} if cap == "messages"
              else {"max_batch_bytes": 5 * (_BARE_SIZE + len(body))})
    outcomes: dict[int, Outcome] = {}
    batcher = AutoBatchProducer(producer, linger_ms=60_000, **limits)
    for i in range(23):
        batcher.produce("Capped", body, on_delivery=_recorder(outcomes, i))
    await batcher.flush()
    assert (batcher.shipped_requests, batcher.shipped_messages) == (5, 23)
    assert sorted(outcomes) == list(range(23))
    assert all(error is None for error, _ in outcomes.values())
    await batcher.close()


@pytest.mark.parametrize("attributes", [None, BATCH_CQ], ids=["plain", "batch-cq"])
async def test_bodies_and_messages_with_properties_share_a_batch(
        cluster: Cluster, admin: AdminClient, producer: Producer,
        attributes: dict[str, str | None] | None) -> None:
    """Bare bodies and tagged messages produced in turn to one queue are stored as
    produced, each with its own properties or none."""
    await create(admin, "Mixed", queues=1, attributes=attributes)
    mq = MessageQueue("Mixed", "broker-a", 0)
    outcomes: dict[int, Outcome] = {}
    batcher = AutoBatchProducer(producer, linger_ms=60_000)
    for i in range(40):
        tags = "odd" if i % 2 else None
        batcher.produce("Mixed", b"m%02d" % i, tags=tags, queue=mq,
                        on_delivery=_recorder(outcomes, i))
    await batcher.flush()
    assert batcher.shipped_requests == 1
    assert all(error is None for error, _ in outcomes.values()) and len(outcomes) == 40
    await dispatched(cluster)
    stored = await read_queue(producer.instance, mq)
    assert [(m.body, m.tags) for m in stored] == [
        (b"m%02d" % i, "odd" if i % 2 else None) for i in range(40)]
    results = [outcomes[i][1] for i in range(40)]
    assert [m.msg_id for m in stored] == [r.msg_id for r in results if r is not None]
    await batcher.close()


@pytest.mark.parametrize("attributes", [None, BATCH_CQ], ids=["plain", "batch-cq"])
async def test_a_sticky_batch_of_bodies_takes_tagged_and_sent_messages_in_turn(
        cluster: Cluster, admin: AdminClient, producer: Producer,
        attributes: dict[str, str | None] | None) -> None:
    """Bodies produced to the topic's sticky queue join its open batch by the short way
    until a tagged message and a send()'s message join it too; the batch is stored as
    produced, and each callback and future gets its own message's result. Then a batch
    of bodies with callbacks alone. Both batches hand out their results in several
    rounds."""
    await create(admin, "Turns", queues=1, attributes=attributes)
    await producer.instance.routes.get("Turns")
    outcomes: dict[int, Outcome] = {}
    batcher = AutoBatchProducer(producer, linger_ms=60_000, max_batch_bytes=1 << 20)
    want: list[tuple[bytes, str | None]] = []
    futures: dict[int, asyncio.Future[SendResult]] = {}
    for i in range(1200):
        body = b"s%04d" % i
        if i in (10, 11, 300):
            futures[i] = await batcher.send(Message("Turns", body))
            want.append((body, None))
        else:
            tags = "t" if 14 <= i < 17 or 255 <= i < 258 else None
            batcher.produce("Turns", body, tags=tags, on_delivery=_recorder(outcomes, i))
            want.append((body, tags))
        if i == 599:
            await batcher.flush()
    await batcher.flush()
    assert batcher.shipped_requests == 2
    for i, future in futures.items():
        outcomes[i] = (None, future.result())
    assert sorted(outcomes) == list(range(1200))
    assert all(error is None for error, _ in outcomes.values())
    await dispatched(cluster)
    results = [r for _, r in (outcomes[i] for i in range(1200)) if r is not None]
    assert len(results) == 1200
    for first in (0, 600):  # each batch went to a queue of its own broker
        mq = results[first].queue
        assert all(r.queue == mq for r in results[first:first + 600])
        stored = await read_queue(producer.instance, mq)
        assert [(m.body, m.tags) for m in stored] == want[first:first + 600]
        assert [(m.msg_id, m.queue_offset) for m in stored] == [
            (r.msg_id, r.queue_offset) for r in results[first:first + 600]]
    # A result kept holds its batch's answer, not the batch's bodies or encoding.
    assert not [o for o in _reachable(results[700]) if isinstance(o, bytes | bytearray)]
    await batcher.close()


def _reachable(root: object, depth: int = 6) -> list[object]:
    """What ``root`` refers to, and so on ``depth`` steps deep, but for types, modules,
    functions and enum members (which reach everything)."""
    seen: dict[int, object] = {}
    layer = [root]
    for _ in range(depth):
        layer = [o for o in gc.get_referents(*layer)
                 if id(o) not in seen and not isinstance(
                     o, type | types.ModuleType | types.FunctionType | enum.Enum)]
        seen.update((id(o), o) for o in layer)
    return list(seen.values())


async def test_sticky_messages_with_the_same_tags_and_keys_join_by_the_short_way(
        cluster: Cluster, admin: AdminClient, producer: Producer) -> None:
    """Messages produced to the sticky queue with the last tags and keys join its batch
    of their like; other tags, other keys, keys given as a list, or a bare body, still
    land with their own properties, in produce order."""
    await create(admin, "Sticky", queues=1)
    await producer.instance.routes.get("Sticky")
    outcomes: dict[int, Outcome] = {}
    batcher = AutoBatchProducer(producer, linger_ms=60_000)
    want: list[tuple[bytes, str | None, list[str]]] = []
    batches: list[list[tuple[str | None, str | list[str] | None]]] = [
        [("a", "k1")] * 17 + [("a", "k2")] * 3,  # other keys
        [("b", "k1")] * 5 + [("a", "k1")] * 3 + [("a", None)] * 2 + [(None, "k2")] * 2
        + [("a", ["k1", "k2"])] * 2 + [(None, None)] * 2 + [("a", "k1")] * 3,  # other tags
        [("a", "k1")] * 3 + [(None, None)] * 2 + [("a", "k1")] * 2,  # a bare body
    ]
    for plan in batches:
        for tags, keys in plan:
            i = len(want)
            body = b"g%02d" % i
            batcher.produce("Sticky", body, tags=tags, keys=keys,
                            on_delivery=_recorder(outcomes, i))
            listed = keys.split() if isinstance(keys, str) else list(keys or [])
            want.append((body, tags, listed))
        await batcher.flush()
    assert batcher.shipped_requests == len(batches)
    assert sorted(outcomes) == list(range(len(want)))
    results = [r for _, r in (outcomes[i] for i in range(len(want))) if r is not None]
    assert len(results) == len(want)
    await dispatched(cluster)
    stored: dict[tuple[MessageQueue, int], tuple[bytes, str | None, list[str], str]] = {}
    for mq in {r.queue for r in results}:
        for m in await read_queue(producer.instance, mq):
            stored[(mq, m.queue_offset)] = (m.body, m.tags, m.keys, m.msg_id)
    assert [stored[(r.queue, r.queue_offset)] for r in results] == [
        (*w, r.msg_id) for w, r in zip(want, results, strict=True)]
    await batcher.close()


@pytest.mark.parametrize("attributes", [None, BATCH_CQ], ids=["plain", "batch-cq"])
async def test_tags_and_keys_are_checked_once_and_stored_with_each_message(
        cluster: Cluster, admin: AdminClient, producer: Producer,
        attributes: dict[str, str | None] | None) -> None:
    """Messages produced with the same tags and keys share one checked property set; a
    batch of them is stored as produced, and so is one where the tags change."""
    await create(admin, "Tagged", queues=1, attributes=attributes)
    mq = MessageQueue("Tagged", "broker-a", 0)
    outcomes: dict[int, Outcome] = {}
    batcher = AutoBatchProducer(producer, linger_ms=60_000)
    want: list[tuple[bytes, str | None, list[str]]] = []

    def produce(i: int, tags: str | None, keys: list[str] | str | None) -> None:
        batcher.produce("Tagged", b"t%02d" % i, tags=tags, keys=keys, queue=mq,
                        on_delivery=_recorder(outcomes, i))
        listed = keys.split() if isinstance(keys, str) else list(keys or [])
        want.append((b"t%02d" % i, tags, listed))

    for i in range(10):  # one property set: the batch is written as columns
        produce(i, "a", ["k1", "k2"])
    await batcher.flush()
    for i in range(10, 30):  # the tags and keys change inside the batch
        produce(i, ("a", "b", None)[i % 3], "k3" if i % 2 else ["k1", "k2"])
    await batcher.flush()
    assert batcher.shipped_requests == 2
    assert sorted(outcomes) == list(range(30))
    assert all(error is None for error, _ in outcomes.values())
    await dispatched(cluster)
    stored = await read_queue(producer.instance, mq)
    assert [(m.body, m.tags, m.keys) for m in stored] == want
    assert [m.msg_id for m in stored] == [
        r.msg_id for _, r in (outcomes[i] for i in range(30)) if r is not None]
    with pytest.raises(InvalidMessageError):
        batcher.produce("Tagged", b"x", tags="bad\x01tag")
    await batcher.close()


async def test_failures_reach_each_callback_and_flush_counts_the_rest(
        cluster: Cluster, admin: AdminClient, producer: Producer) -> None:
    await create(admin, "Closed")
    await admin.create_topic("Closed", read_queue_nums=2, write_queue_nums=2, perm=4)
    async with asyncio.timeout(5):
        while (await producer.instance.routes.get("Closed", refresh=True)).publish_queues:
            await asyncio.sleep(0.05)
    mq = MessageQueue("Closed", "broker-a", 0)
    batcher = AutoBatchProducer(producer)
    outcomes: dict[int, Outcome] = {}
    for i in range(4):
        batcher.produce("Closed", b"x", queue=mq, on_delivery=_recorder(outcomes, i))
    for _ in range(3):
        batcher.produce("Closed", b"y", queue=mq)  # no callback: counted
    with pytest.raises(DeliveryError) as info:
        await batcher.flush()
    assert info.value.count == 3
    assert isinstance(info.value.cause, BrokerResponseError)
    assert info.value.cause.code == ResponseCode.NO_PERMISSION
    assert sorted(outcomes) == [0, 1, 2, 3]
    for error, result in outcomes.values():
        assert result is None and isinstance(error, BrokerResponseError)
        assert error.code == ResponseCode.NO_PERMISSION
    await batcher.flush()  # reported once
    await batcher.close()


async def test_a_full_buffer_refuses_until_drained(cluster: Cluster, admin: AdminClient,
                                                   producer: Producer) -> None:
    await create(admin, "Full", attributes=BATCH_CQ)
    batcher = AutoBatchProducer(producer, max_batch_bytes=4 * 1024,
                                total_buffer_bytes=16 * 1024)
    delivered: list[int] = []
    refused = peak = 0
    i = 0
    while i < 200:
        try:
            batcher.produce("Full", b"z" * 500,
                            on_delivery=lambda e, r, i=i: delivered.append(i))  # type: ignore[misc]
        except BufferFullError as exc:
            assert exc.limit == 16 * 1024 and exc.buffered + exc.size > exc.limit
            refused += 1
            await batcher.drain()
            continue
        peak = max(peak, batcher.buffered_bytes)
        i += 1
    await batcher.close()
    assert refused > 0  # nothing yielded before the buffer filled: produce refused
    assert peak <= 16 * 1024
    assert sorted(delivered) == list(range(200))


async def test_a_refused_message_is_refused_at_the_call(admin: AdminClient,
                                                        producer: Producer) -> None:
    batcher = AutoBatchProducer(producer)
    with pytest.raises(InvalidMessageError):
        batcher.produce("Bad", b"")
    with pytest.raises(InvalidMessageError):
        batcher.produce("Bad", b"x", properties={"DELAY": "3"})
    with pytest.raises(ValueError):
        batcher.produce("Bad", b"x", queue=MessageQueue("Bad", "broker-a", 0),
                        sharding_key="k")
    assert batcher.buffered_bytes == 0
    await batcher.close()


async def test_a_failing_callback_is_logged_and_the_others_still_run(
        cluster: Cluster, admin: AdminClient, producer: Producer,
        caplog: pytest.LogCaptureFixture) -> None:
    await create(admin, "Callbacks")
    seen: list[int] = []

    def broken(error: BaseException | None, result: SendResult | None) -> None:
        raise RuntimeError("the application's own bug")

    async with AutoBatchProducer(producer) as batcher:
        with caplog.at_level(logging.ERROR, logger="tidemq.client.batching"):
            batcher.produce("Callbacks", b"a", on_delivery=broken)
            batcher.produce("Callbacks", b"b", on_delivery=lambda e, r: seen.append(1))
            await batcher.flush()
    assert seen == [1]
    assert "delivery callback" in caplog.text and "the application's own bug" in caplog.text
