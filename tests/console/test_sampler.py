"""The background sampler against a real cluster: it records lag and rates while no page
is viewed, and the rates add up to the messages stored and consumed."""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator

import pytest
from tests.console.test_app import registered

from tidemq.client import Message, MessageQueue, Producer, PullConsumer
from tidemq.console import ConsoleServer
from tidemq.console.config import ConsoleConfig
from tidemq.console.history import History
from tidemq.console.sampler import Sampler
from tidemq.testing import Cluster


@pytest.fixture
async def fast(cluster: Cluster) -> AsyncIterator[ConsoleServer]:
    config = ConsoleConfig(sample_interval=0.3, history_seconds=60)
    async with ConsoleServer(cluster.namesrv_addr, port=0, config=config) as server:
        yield server


def moved(points: list[tuple[int, float]]) -> float:
    """Messages a rate series accounts for: each rate times the time since the sample
    before it."""
    return sum(v * (t - t0) / 1000 for (t0, _), (t, v) in itertools.pairwise(points))


async def test_rates_and_lag_are_sampled_without_a_page_view(fast: ConsoleServer,
                                                              cluster: Cluster) -> None:
    console = fast.console
    await console.admin.create_topic("Sampled", read_queue_nums=1, write_queue_nums=1)
    await registered(cluster)
    mq = MessageQueue("Sampled", "broker-a", 0)
    await console.sampler.wait_rounds(2)
    assert console.history.get("put:Sampled")[-1][1] == 0
    async with Producer("sampled-producers", cluster.namesrv_addr) as producer:
        for i in range(30):
            await producer.send(Message("Sampled", f"m{i}".encode()), queue=mq)
    cluster.brokers[0].store.wait_dispatched()
    async with PullConsumer("sampled-group", cluster.namesrv_addr) as consumer:
        consumer.subscribe("Sampled")
        await consumer.instance.routes.get("Sampled", refresh=True)
        await consumer.instance.send_heartbeat()
        await consumer.commit({mq: 10})
        await console.sampler.wait_rounds(2)
        assert console.history.get("lag:sampled-group")[-1][1] == 20
        await consumer.commit({mq: 30})
        await console.sampler.wait_rounds(2)
    lag = console.history.get("lag:sampled-group")
    assert lag[-1][1] == 0 and 20 in [v for _, v in lag]
    assert math.isclose(moved(console.history.get("put:Sampled")), 30, rel_tol=1e-6)
    assert math.isclose(moved(console.history.get("get:Sampled")), 30, rel_tol=1e-6)


def test_rounds_that_bunch_up_lose_no_messages_from_the_rates() -> None:
    """Rounds closer together than the history's minimum gap (behind a slow one) would
    replace the last rate sample, and the messages of its interval with it; the rates
    still add up to the growth of the total."""
    history = History(seconds=60, interval=0.3, min_gap_ms=150)
    sampler = Sampler(None, history, 0.3)  # type: ignore[arg-type]  # no round is run
    for now, total in [(0, 0), (300, 10), (600, 40), (700, 55), (760, 60), (1000, 70),
                       (1050, 90), (1400, 100)]:
        sampler._rate("put:T", now, total)
    points = history.get("put:T")
    assert all(t1 - t0 >= 150 for (t0, _), (t1, _) in itertools.pairwise(points))
    assert math.isclose(points[0][1] * 300 / 1000 + moved(points), 100)
