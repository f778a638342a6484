"""In a real headless Chromium against ``tidemq standalone``: the dead-letter pages (a
DLQ listed, also while the name server does not list it yet, its messages, a selection
resent after the confirmation page with its progress followed to the end), the groups
page sorted by lag, and a broker that accepts connections and never answers named on
the pages, which show what the others answered."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests.client.test_request_deadline import HungBroker
from tests.console.browser import Browser, chromium_path
from tests.console.test_browser import Standalone, Visit
from tests.console.test_browser_messages import OnlineConsumer
from tests.console.test_dlq import give_up
from tests.console.test_hung_broker import register

from tidemq.client import AdminClient, Message, MessageQueue, Producer, PullConsumer
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import DeleteTopicFromNamesrvRequestHeader
from tidemq.net import RemotingClient

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")

TOPIC = "RefundsE2E"
GROUP = "refunds-e2e"
T = TypeVar("T")
#: The brokers' periodic registration: longer than a test runs.
REGISTER_PERIOD_MS = 60_000


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    server = Standalone(tmp_path / "data", "--set", "consolePageDeadline=1")
    yield server
    server.stop()


async def bury(namesrv: str, count: int) -> None:
    """``count`` messages of TOPIC in GROUP's DLQ, and two more groups with offsets
    (lag 1 and 4) for the sorted group list."""
    mq = MessageQueue(TOPIC, "broker-a", 0)
    async with Producer("refunds-e2e-producer", namesrv) as producer:
        for i in range(count):
            await producer.send(Message(TOPIC, f"refund {i}".encode(), {"KEYS": f"r-{i}"}),
                                queue=mq)
    await give_up(namesrv, GROUP, mq, count)
    for group, offset in (("refunds-audit", count - 1), ("refunds-report", count - 4)):
        async with PullConsumer(group, namesrv) as consumer:
            await consumer.commit({mq: offset})


def create_and_bury(visit: Visit, namesrv: str, count: int) -> None:
    """TOPIC created on the topics page, then :func:`bury` ``count`` of its messages."""
    visit.page("/topics")
    visit.browser.submit("#create-topic", {"topic": TOPIC, "read_queues": "1",
                                           "write_queues": "1", "queue_type": "SimpleCQ"})
    asyncio.run(bury(namesrv, count))


class Background:
    """An event loop on a thread of its own (the browser blocks the test's thread)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_dead_letters_sorted_groups_and_a_hung_broker(standalone: Standalone,
                                                       browser: Browser) -> None:
    visit = Visit(browser, standalone.console)
    b = browser
    create_and_bury(visit, standalone.namesrv, 6)

    visit.page("/dlq")
    assert b.text(f'tr[data-group="{GROUP}"] .dlq-messages') == "6"
    visit.shot("dlq")
    b.click(f'tr[data-group="{GROUP}"] a[href^="/dlq/"]')
    assert b.text("#dlq-total").startswith("6 messages stored in %DLQ%refunds-e2e")
    assert b.eval("document.querySelectorAll('#dlq-messages tbody tr').length") == 6
    assert b.text("#dlq-messages tbody tr td.preview") == "refund 5"
    assert b.exists("#no-consumer")

    consumer = OnlineConsumer(standalone.namesrv, GROUP, "RefundsOwnE2E")
    try:
        visit.page(f"/dlq/{GROUP}")
        visit.shot("dlq-messages")
        b.eval("document.querySelectorAll('#dlq-messages input[name=msg]')[0].click()")
        b.eval("document.querySelectorAll('#dlq-messages input[name=msg]')[2].click()")
        b.click("#resend-selected")
        assert "Resend 2 selected messages" in b.text("h1")
        assert consumer.bodies == []
        b.click("#confirm")
        b.wait_for("!document.getElementById('resend-done').hidden")
        assert b.text("#resend-status") == "2 of 2 tried: 2 consumed, 0 failed"
        visit.shot("dlq-resend")
        assert sorted(consumer.wait_for(2)) == [b"refund 3", b"refund 5"]
    finally:
        consumer.close()

    visit.page("/groups")
    b.click("#sort-lag")
    assert b.eval("document.getElementById('groups').dataset.sort") == "lag"
    order = b.eval("Array.from(document.querySelectorAll('#groups tbody tr'))"
                   ".map(r => r.dataset.group)")
    assert order.index("refunds-report") < order.index("refunds-audit"), order
    visit.shot("groups-sorted")

    loop = Background()
    hung = HungBroker()
    client = RemotingClient()
    try:
        addr = loop.run(hung.start())
        loop.run(register(client, standalone.namesrv, "broker-hung", addr, ["Remote"]))
        visit.page("/cluster")
        assert f"broker-hung at {addr}" in b.text("#unanswered")
        assert "RUNNING" in b.text("#brokers")
        visit.shot("unanswered")
        visit.page("/groups?sort=lag")
        assert f"broker-hung at {addr}" in b.text("#unanswered")
        assert b.exists('tr[data-group="refunds-report"]')
        visit.page(f"/topics/{TOPIC}")
        assert not b.exists("#unanswered"), "a page about a topic it does not hold asked it"
    finally:
        loop.run(client.close())
        loop.run(hung.close())
        loop.close()


async def forget(namesrv: str, topic: str) -> None:
    """Once the broker's registration after it created ``topic`` has reached the name
    server, have the name server forget it (DELETE_TOPIC_IN_NAMESRV) while the broker
    keeps it: the name server knows it again at the broker's next registration."""
    client = RemotingClient()
    try:
        async with AdminClient(namesrv) as admin:
            while topic not in await admin.topic_list():
                await asyncio.sleep(0.05)
        response = await client.request(namesrv, RemotingCommand.request(
            RequestCode.DELETE_TOPIC_IN_NAMESRV,
            DeleteTopicFromNamesrvRequestHeader(topic=topic).to_ext()))
        assert response.code == 0, response.remark
        async with AdminClient(namesrv) as admin:
            assert topic not in await admin.topic_list()
    finally:
        await client.close()


@pytest.fixture
def registering_seldom(tmp_path: Path) -> Iterator[Standalone]:
    """A standalone whose broker registers again only after a topic change."""
    server = Standalone(tmp_path / "data", "--set", "consolePageDeadline=1",
                        "--set", f"registerNameServerPeriod={REGISTER_PERIOD_MS}")
    yield server
    server.stop()


def test_a_dlq_the_name_server_does_not_list_yet_is_shown(registering_seldom: Standalone,
                                                          browser: Browser) -> None:
    server = registering_seldom
    visit = Visit(browser, server.console)
    b = browser
    create_and_bury(visit, server.namesrv, 5)
    asyncio.run(forget(server.namesrv, "%DLQ%" + GROUP))
    visit.page("/dlq")
    assert b.text(f'tr[data-group="{GROUP}"] .dlq-messages') == "5"
    b.click(f'tr[data-group="{GROUP}"] a[href^="/dlq/"]')
    assert b.text("#dlq-total").startswith("5 messages stored in %DLQ%refunds-e2e")
    assert b.text("#dlq-messages tbody tr td.preview") == "refund 4"
    visit.page(f"/groups/{GROUP}")
    assert b.text("#dead-letters") == "5"
