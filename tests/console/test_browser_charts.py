"""The charts in a real headless Chromium: a caught-up group's lag chart reads 0 on its
value axis, and both axes are labelled (time and values)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.console.browser import Browser, chromium_path
from tests.console.test_browser import Standalone, Visit, commit_dispatched

from tidemq.client import Message, MessageQueue, Producer, PullConsumer

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")

LAG_TOPIC, RATE_TOPIC = "ChartLagE2E", "ChartRateE2E"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One server for the module: each test has a topic and a group of its own."""
    server = Standalone(tmp_path_factory.mktemp("standalone") / "data",
                        "--set", "consoleSampleInterval=0.5")
    yield server
    server.stop()


def group_of(topic: str) -> str:
    return f"{topic}-group"


async def caught_up(namesrv: str, topic: str, total: int = 5) -> None:
    """Five more messages in ``topic``, all consumed by its group (``total`` in the
    queue): the group's lag is 0."""
    mq = MessageQueue(topic, "broker-a", 0)
    async with Producer("chart-e2e-producer", namesrv) as producer:
        for i in range(5):
            await producer.send(Message(topic, f"m{i}".encode()), queue=mq)
    async with PullConsumer(group_of(topic), namesrv) as consumer:
        consumer.subscribe(topic)
        await consumer.instance.routes.get(topic, refresh=True)
        await consumer.instance.send_heartbeat()
        await commit_dispatched(consumer, {mq: total})


def labels(b: Browser, selector: str) -> list[str]:
    found = b.eval(f"Array.from(document.querySelectorAll({selector!r}))"
                   ".map(function (e) { return e.textContent; }).join('|')")
    return [t for t in str(found).split("|") if t]


def test_a_caught_up_groups_lag_chart_reads_zero(standalone: Standalone, browser: Browser
                                                 ) -> None:
    visit = Visit(browser, standalone.console)
    visit.page("/topics")
    browser.submit("#create-topic", {"topic": LAG_TOPIC, "read_queues": "1",
                                     "write_queues": "1", "queue_type": "SimpleCQ"})
    asyncio.run(caught_up(standalone.namesrv, LAG_TOPIC))
    visit.page(f"/groups/{group_of(LAG_TOPIC)}")
    browser.wait_for("document.getElementById('group-lag').textContent === '0'")
    browser.wait_for("document.querySelectorAll('#lag-chart path').length === 1")
    assert labels(browser, "#lag-chart .ytick") == ["0"], labels(browser, "#lag-chart text")
    assert "messages behind" in labels(browser, "#lag-chart .ytitle")
    times = labels(browser, "#lag-chart .xtick")
    assert times and all(len(t.split(":")) == 3 for t in times), times
    browser.wait_for("document.getElementById('chart-note').textContent.includes('updated')")
    note = browser.text("#chart-note")
    assert re.fullmatch(r"\(refreshes every 2 s; updated \d\d:\d\d:\d\d\)", note), \
        f"{note!r}: the update time reads as the axis's clock times do"


def test_a_topics_rate_chart_draws_put_and_get_over_time(standalone: Standalone,
                                                        browser: Browser) -> None:
    visit = Visit(browser, standalone.console)
    visit.page("/topics")
    browser.submit("#create-topic", {"topic": RATE_TOPIC, "read_queues": "1",
                                     "write_queues": "1", "queue_type": "SimpleCQ"})
    asyncio.run(caught_up(standalone.namesrv, RATE_TOPIC))
    visit.page(f"/topics/{RATE_TOPIC}")
    # Both lines appear once the sampler has two rounds with the topic in them.
    browser.wait_for("document.querySelectorAll('#rate-chart path').length === 2",
                     timeout=60)
    assert labels(browser, "#rate-chart .ytitle") == ["messages per second"]
    assert labels(browser, "#rate-chart .ytick")[0] == "0"
    # traffic while the page is open
    asyncio.run(caught_up(standalone.namesrv, RATE_TOPIC, total=10))
    browser.wait_for("document.querySelectorAll('#rate-chart .ytick').length > 1", timeout=60)
    times = labels(browser, "#rate-chart .xtick")
    assert len(times) == 3 and all(len(t.split(":")) == 3 for t in times), times
    visit.shot("topic-rates")


def test_a_rate_chart_without_samples_says_so(tmp_path: Path, browser: Browser) -> None:
    """Before the sampler's second round a topic's rates have no point: the chart says
    why it is empty, instead of a bare axis under a put TPS card that reads otherwise."""
    server = Standalone(tmp_path / "data", "--set", "consoleSampleInterval=600")
    try:
        visit = Visit(browser, server.console)
        visit.page("/topics")
        browser.submit("#create-topic", {"topic": "NoSamplesYet", "read_queues": "1",
                                         "write_queues": "1", "queue_type": "SimpleCQ"})
        visit.page("/topics/NoSamplesYet")
        browser.wait_for("document.querySelectorAll('#rate-chart .ytick').length > 0")
        assert labels(browser, "#rate-chart .no-data") == [
            "No samples yet: a rate needs two samples, taken every 600 s"]
    finally:
        server.stop()
