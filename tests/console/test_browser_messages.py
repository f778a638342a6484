"""A topic's messages by time in a real headless Chromium: reached from the topic's
page, paged, with each group's consumed / not consumed status."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from tests.console.browser import Browser, chromium_path
from tests.console.test_browser import Standalone, Visit, commit_dispatched

from tidemq.client import (
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    SendResult,
)

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")

TOPIC = "TimedE2E"
T = TypeVar("T")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One server for the module: each test has topics and groups of its own."""
    server = Standalone(tmp_path_factory.mktemp("standalone") / "data",
                        "--set", "traceTopicEnable=true")
    yield server
    server.stop()


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
        await commit_dispatched(consumer, {mq: 12})


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


class OnlineConsumer:
    """A push consumer of ``topic`` kept online on an event loop of its own thread (the
    browser blocks the test's thread), recording the bodies its listener gets."""

    def __init__(self, namesrv: str, group: str, topic: str, *, trace: bool = False) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.bodies: list[bytes] = []
        self.changed = threading.Condition()
        config = ClientConfig(namesrv_addr=(namesrv,), enable_msg_trace=trace)
        self.consumer = PushConsumer(group, listener=self._listen, config=config,
                                     consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        self.consumer.subscribe(topic)
        self._call(self.consumer.start())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    async def _listen(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self.changed:
            self.bodies.extend(m.body for m in msgs)
            self.changed.notify_all()
        return ConsumeStatus.CONSUME_SUCCESS

    def wait_for(self, count: int) -> list[bytes]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.bodies) >= count, 20), self.bodies
            return list(self.bodies)

    @property
    def client_id(self) -> str:
        return self.consumer.instance.client_id

    def close(self) -> None:
        try:
            self._call(self.consumer.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def test_a_message_is_resent_to_one_consumer_and_its_trace_shown(
        standalone: Standalone, browser: Browser) -> None:
    """The message page's "Resend to consumer": the chosen consumer's listener gets the
    message again, and the page says how it answered. With trace on in the producer and
    the consumer, the page shows the message's trace: who sent it, where it was stored,
    which group consumed it and how."""
    visit = Visit(browser, standalone.console)
    b = browser
    visit.page("/topics")
    b.submit("#create-topic", {"topic": "ResendE2E", "read_queues": "1", "write_queues": "1",
                               "queue_type": "SimpleCQ"})
    traced = ClientConfig(namesrv_addr=(standalone.namesrv,), enable_msg_trace=True)

    async def send() -> SendResult:
        async with Producer("resend-e2e-producer", config=traced) as producer:
            return await producer.send(Message("ResendE2E", b"resend me", {"KEYS": "r-1"}))

    sent = asyncio.run(send())  # closing the producer sends its trace records
    consumer = OnlineConsumer(standalone.namesrv, "resend-e2e-group", "ResendE2E", trace=True)
    try:
        assert consumer.wait_for(1) == [b"resend me"]  # its normal delivery
        url = f"/messages?by=id&topic=ResendE2E&msg_id={sent.msg_id}"
        for _attempt in range(50):  # the route and the key index follow the sends shortly
            b.goto(standalone.console + url)
            if b.exists("form.resend select") and b.exists("tr.trace-consume"):
                break
        visit.page(url)
        assert b.text("tr.trace-send td:nth-child(2)") == "resend-e2e-producer"
        assert "SEND_OK, stored" in b.text("tr.trace-send")
        assert b.text("tr.trace-consume td:nth-child(2)") == "resend-e2e-group"
        visit.shot("message-trace")
        target = f"resend-e2e-group {consumer.client_id}"
        assert b.eval("Array.from(document.querySelectorAll('form.resend option'))"
                      ".map(o => o.value)") == [target]
        visit.shot("message-resend")
        b.submit("form.resend", {"target": target})
        flash = b.text("#flash")
        assert f"{consumer.client_id} of resend-e2e-group consumed it: CR_SUCCESS" in flash
        assert consumer.wait_for(2) == [b"resend me", b"resend me"]
        assert b.text(".msg-keys") == "r-1"  # back on the message's page
    finally:
        consumer.close()


def test_a_message_without_trace_says_so(standalone: Standalone, browser: Browser) -> None:
    visit = Visit(browser, standalone.console)
    visit.page("/topics")
    browser.submit("#create-topic", {"topic": "Untraced", "read_queues": "1",
                                     "write_queues": "1", "queue_type": "SimpleCQ"})

    async def send() -> SendResult:
        async with Producer("untraced-producer", standalone.namesrv) as producer:
            return await producer.send(Message("Untraced", b"x"))

    sent = asyncio.run(send())
    url = f"/messages?by=id&topic=Untraced&msg_id={sent.msg_id}"
    for _attempt in range(50):  # the route and the key index follow the send shortly
        browser.goto(standalone.console + url)
        if browser.exists(".trace-none"):
            break
    visit.page(url)
    assert "No trace" in browser.text(".trace-none")
    assert not browser.exists("table.trace")
