"""The latency bench's pacer against a real broker: every message it hands over is sent,
acknowledged and counted once, stamped with its hand-over time."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.bench.meter import Meter
from tidemq.bench.pacer import STAMP, Pacer
from tidemq.bench.process import BenchError
from tidemq.client import (
    AdminClient,
    AutoBatchProducer,
    ClientConfig,
    MessageQueue,
    Producer,
    PullConsumer,
)
from tidemq.errors import TideMQError
from tidemq.testing import Cluster

TOPIC = "PacerTopic"


async def _queues(namesrv: str) -> list[MessageQueue]:
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            with contextlib.suppress(TideMQError):  # not registered yet
                route = await admin.instance.routes.get(TOPIC, refresh=True)
                if len(route.publish_queues) == 2:
                    return list(route.publish_queues)
            assert loop.time() < deadline, "the topic got no route"
            await asyncio.sleep(0.05)  # the broker registers the new topic soon after


@contextlib.asynccontextmanager
async def _producing(tmp_path: Path) -> AsyncIterator[
        tuple[ClientConfig, Producer, AutoBatchProducer, list[MessageQueue]]]:
    """A one-broker cluster serving the pacer's topic, a producer and its auto-batcher
    (which the test closes, to read what it shipped)."""
    async with Cluster(tmp_path, brokers=1) as cluster:
        queues = await _queues(cluster.namesrv_addr)
        config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,))
        async with Producer("pacer_producer", config=config) as producer:
            yield config, producer, AutoBatchProducer(producer, linger_ms=0), queues


async def _run_for(pacer: Pacer, seconds: float) -> None:
    running = [True]
    stop = asyncio.get_running_loop().call_later(seconds, running.__setitem__, 0, False)
    try:
        await pacer.run(running)
    finally:
        stop.cancel()


async def test_auto_batched_messages_are_each_acknowledged_once(tmp_path: Path) -> None:
    async with _producing(tmp_path) as (config, producer, batcher, queues):
        acks = Meter()
        pacer = Pacer(producer, batcher, queues, acks, topic=TOPIC, size=64, rate=2000,
                      in_flight=10_000)
        await _run_for(pacer, 0.3)
        await batcher.close()
        consumer = PullConsumer("pacer_consumer", config=config)
        await consumer.start()
        try:
            consumer.assign(queues)
            await consumer.seek_to_beginning()
            got: dict[int, list[bytes]] = {q.queue_id: [] for q in queues}
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while sum(map(len, got.values())) < pacer.sent and loop.time() < deadline:
                for m in await consumer.poll(timeout=1.0):
                    got[m.queue_id].append(m.body)
        finally:
            await consumer.close(commit=False)
    assert pacer.sent > 0 and pacer.skipped == 0 and pacer.in_flight == 0
    assert pacer.calls == pacer.sent == acks.count == len(acks.latencies)
    assert acks.errors == 0 and not pacer.tasks
    # what was handed over in one tick went out together
    assert batcher.shipped_messages == pacer.sent
    assert batcher.shipped_requests < pacer.sent
    # each body carries its hand-over time: in send order on each queue, before now
    assert sum(map(len, got.values())) == pacer.sent
    for bodies in got.values():
        assert all(len(b) == 64 for b in bodies)
        stamps = [STAMP.unpack_from(b)[0] for b in bodies]
        assert stamps == sorted(stamps) and all(s < time.perf_counter_ns() for s in stamps)


async def test_sends_over_the_in_flight_cap_are_skipped_and_counted(tmp_path: Path) -> None:
    async with _producing(tmp_path) as (_, producer, batcher, queues):
        acks = Meter()
        # at 100,000/s every tick has more due than the one send allowed in flight
        pacer = Pacer(producer, batcher, queues, acks, topic=TOPIC, size=64,
                      rate=100_000, in_flight=1)
        await _run_for(pacer, 0.2)
        await batcher.close()
    assert pacer.sent > 0 and pacer.skipped > 0 and pacer.in_flight == 0
    assert acks.count == pacer.sent == batcher.shipped_messages == batcher.shipped_requests


async def test_a_pacer_held_up_says_how_late_it_released(tmp_path: Path) -> None:
    """Stamps are hand-over times, so a stalled pacer would not show in the latencies;
    its lateness against the messages' due times is kept instead."""
    async with _producing(tmp_path) as (_, producer, batcher, queues):
        pacer = Pacer(producer, batcher, queues, Meter(), topic=TOPIC, size=64,
                      rate=2000, in_flight=10_000)
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, time.sleep, 0.2)  # the event loop held for 200 ms
        await _run_for(pacer, 0.5)
        await batcher.close()
    assert pacer.sent > 0 and len(pacer.late) > 1
    assert max(pacer.late) >= 0.19


class _FailingBatcher:
    """Fault injection: every ``fail_every``-th message's future fails with ``error``,
    the others succeed; all are settled one loop iteration after the hand-over."""

    def __init__(self, error: BaseException, fail_every: int) -> None:
        self.error = error
        self.fail_every = fail_every
        self.count = 0

    async def send(self, _msg: object) -> asyncio.Future[object]:
        self.count += 1
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        if self.count % self.fail_every == 0:
            loop.call_soon(future.set_exception, self.error)
        else:
            loop.call_soon(future.set_result, None)
        return future


async def test_failed_acknowledgements_are_counted_and_others_kill_the_bench() -> None:
    queues = [MessageQueue(TOPIC, "b", 0)]
    counted = _FailingBatcher(TideMQError("refused"), fail_every=3)
    acks = Meter()
    pacer = Pacer(None, counted, queues, acks, topic=TOPIC,  # type: ignore[arg-type]
                  size=64, rate=5000, in_flight=10_000)
    await _run_for(pacer, 0.2)
    assert pacer.sent == counted.count > 0 and pacer.in_flight == 0
    assert acks.errors == pacer.sent // 3 and acks.count == pacer.sent - acks.errors
    assert len(acks.latencies) == acks.count

    died = _FailingBatcher(RuntimeError("a bug"), fail_every=5)
    pacer = Pacer(None, died, queues, Meter(), topic=TOPIC,  # type: ignore[arg-type]
                  size=64, rate=5000, in_flight=10_000)
    with pytest.raises(BenchError, match="a bug"):
        await _run_for(pacer, 0.2)
    assert pacer.in_flight == 0
