"""A topic's messages by time in a real headless Chromium: reached from the topic's
page, paged, with each group's consumed / not consumed status."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.console.browser import Browser, chromium_path
from tests.console.test_browser import Standalone, Visit

from tidemq.client import Message, MessageQueue, Producer, PullConsumer

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")

TOPIC = "TimedE2E"


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    server = Standalone(tmp_path / "data")
    yield server
    server.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    with Browser(tmp_path / "profile") as b:
        yield b


async def traffic(namesrv: str) -> None:
    mq = MessageQueue(TOPIC, "broker-a", 0)
    async with Producer("timed-e2e-producer", namesrv) as producer:
        for i in range(25):
            await producer.send(Message(TOPIC, f"m{i}".encode(), {"TAGS": "TagA",
                                                                  "KEYS": f"order-{i}"}),
                                queue=mq)
    async with PullConsumer("timed-e2e-group", namesrv) as consumer:
        consumer.subscribe(TOPIC)
        await consumer.instance.routes.get(TOPIC, refresh=True)
        await consumer.instance.send_heartbeat()
        await consumer.commit({mq: 12})


def test_a_topics_messages_by_time(standalone: Standalone, browser: Browser) -> None:
    visit = Visit(browser, standalone.console)
    b = browser
    visit.page("/topics")
    b.submit("#create-topic", {"topic": TOPIC, "read_queues": "1", "write_queues": "1",
                               "queue_type": "SimpleCQ"})
    asyncio.run(traffic(standalone.namesrv))
    visit.page(f"/topics/{TOPIC}")
    b.click("#messages-by-time")
    assert b.text("#range-total").startswith("25 messages")
    assert b.eval("document.querySelectorAll('#range-messages tbody tr').length") == 20
    assert b.eval("document.querySelectorAll('td.consumed').length") == 12
    visit.shot("topic-messages")
    b.click("#next-page")
    assert b.eval("document.querySelectorAll('#range-messages tbody tr').length") == 5
    assert b.eval("document.querySelectorAll('td.consumed').length") == 0
    assert "Page 2 of 2" in b.text("#pager")
