"""The small-message path asks for no running loop once under way: on Python 3.11 each
such lookup (``get_running_loop``, the ``ensure_future`` of a coroutine, ``current_task``
without a loop) is a ``getpid`` system call, and a consumer that keeps up pays them for
every message. The auto-batching producer, the batch requester and the pull consumer keep
the loop they first ran on."""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import AsyncIterator

import pytest

from tidemq.bench.topics import create_routed_topic
from tidemq.client import (
    AdminClient,
    AutoBatchProducer,
    ClientConfig,
    Message,
    Producer,
    PullConsumer,
)
from tidemq.testing import Cluster

pytestmark = pytest.mark.timeout(60)

#: The lookups of the running loop a profiler sees, by the name of the callable.
_LOOKUPS = {"get_running_loop", "_get_running_loop", "get_event_loop", "_get_event_loop",
            "ensure_future"}


@pytest.fixture
async def clients(cluster: Cluster) -> AsyncIterator[tuple[AutoBatchProducer, PullConsumer]]:
    async with AdminClient(cluster.namesrv_addr) as admin:
        queues = list((await create_routed_topic(admin, "Lookups", 2)).publish_queues)
    producer = Producer("lookups", config=ClientConfig(namesrv_addr=(cluster.namesrv_addr,)))
    await producer.start()
    batcher = AutoBatchProducer(producer, linger_ms=0)
    consumer = PullConsumer("lookups", config=ClientConfig(
        namesrv_addr=(cluster.namesrv_addr,), instance_name="lookups_c",
        long_polling_timeout=5.0))
    await consumer.start()
    consumer.assign(queues)
    await consumer.seek_to_end()
    await consumer.poll(timeout=0.2)  # its pulls are now held
    try:
        yield batcher, consumer
    finally:
        await batcher.close()
        await consumer.close(commit=False)
        await producer.close()


async def _tick(batcher: AutoBatchProducer, consumer: PullConsumer, n: int) -> None:
    """``n`` messages sent together, each with its future, then polled until received."""
    futures = [await batcher.send(Message("Lookups", b"x" * 64)) for _ in range(n)]
    for future in futures:
        await future
    got = 0
    while got < n:
        got += len(await consumer.poll(timeout=5.0))


async def test_sends_and_polls_ask_for_no_running_loop(
        clients: tuple[AutoBatchProducer, PullConsumer]) -> None:
    batcher, consumer = clients
    for _ in range(5):  # connections, routes, caches
        await _tick(batcher, consumer, 5)
    seen: list[str] = []

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "c_call":
            name = getattr(arg, "__name__", "")
        elif event == "call":
            name = frame.f_code.co_name
        else:
            return
        if name in _LOOKUPS:
            seen.append(f"{name} from {frame.f_code.co_filename}:{frame.f_lineno}")

    sys.setprofile(profile)
    try:
        for _ in range(10):
            await _tick(batcher, consumer, 5)
    finally:
        sys.setprofile(None)
    assert seen == []
    await asyncio.sleep(0)
