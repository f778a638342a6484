"""End to end: ``tidemq standalone`` in a subprocess (name server, broker with metrics,
web console), driven by a real headless Chromium (tests/console/browser.py).

Skipped when Chromium is not installed (``make test`` installs Debian's ``chromium``
or stops); under ``CI=true`` that skip is a failure (tests/conftest.py). On failure the
page is saved as ``failure.png`` under the test's tmp dir; with
``TIDEMQ_CONSOLE_SCREENSHOTS=<dir>`` every page visited is saved there too (that is how
docs/console.md's pictures are made).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.child_server import SMALL_SEGMENT, ChildServer, free_ports
from tests.console.browser import Browser, chromium_path

from tidemq.client import Message, MessageQueue, Producer, PullConsumer
from tidemq.client.blocking import BlockingPullConsumer
from tidemq.errors import InvalidParameterError

pytestmark = pytest.mark.skipif(
    chromium_path() is None,
    reason="chromium is not installed (apt-get install chromium; `make test` does it)")

TOPIC = "ConsoleE2E"
GROUP = "console-e2e-group"
SPARK_GROUP = f"spark-{TOPIC}"
BANNER = "TideMQ standalone is running"


class Standalone(ChildServer):
    """``tidemq standalone`` with its console and metrics on free ports, JSON logs."""

    def __init__(self, data: Path, *extra: str, ha_port: int = 0) -> None:
        self.namesrv_port, self.broker_port, self.console_port, self.metrics_port = (
            free_ports(4))
        super().__init__(
            "standalone", {"metricsPort": str(self.metrics_port), "haListenPort": str(ha_port),
                           "mappedFileSizeCommitLog": SMALL_SEGMENT},
            ["--data", str(data), "--namesrv-port", str(self.namesrv_port),
             "--broker-port", str(self.broker_port), "--console-port", str(self.console_port),
             "--log-format", "json", *extra], ready=BANNER)
        self.start(60)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def console(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    server = Standalone(tmp_path / "data")
    yield server
    server.stop()
    assert server.returncode == 0, server.log(40)


class Visit:
    """Visits pages and keeps the screenshots docs/console.md shows."""

    def __init__(self, browser: Browser, base: str) -> None:
        self.browser = browser
        self.base = base
        shots = os.environ.get("TIDEMQ_CONSOLE_SCREENSHOTS")
        self.shots = Path(shots) if shots else None

    def shot(self, name: str) -> None:
        if self.shots is not None:
            self.browser.screenshot(self.shots / f"{name}.png")

    def page(self, path: str, name: str | None = None) -> None:
        self.browser.goto(self.base + path)
        assert "TideMQ console" in self.browser.eval("document.title"), path
        assert not self.browser.exists("#error"), self.browser.text("#error")
        if name:
            self.shot(name)


def test_console_end_to_end(standalone: Standalone, browser: Browser) -> None:
    scenario(Visit(browser, standalone.console), standalone)


def scenario(visit: Visit, server: Standalone) -> None:
    b = visit.browser

    # Every page of the navigation renders against the live server.
    visit.page("/cluster")
    assert b.text("#broker-count") == "1"
    assert "RUNNING" in b.text("#brokers")
    for path in ("/groups", "/messages", "/lmq"):
        visit.page(path)
    visit.page("/logical-queues")
    assert "No logical-queue topics" in b.text("#no-logical")
    b.submit("#create-logical", {"topic": "LogicalE2E", "queues": "4"})
    assert "Logical topic LogicalE2E created: 4 logical queues" in b.text("#flash")
    assert b.eval("document.querySelectorAll('table.logical tbody tr').length") == 4
    assert "LogicalQueue(3, 0-)" in b.text('table.logical[data-topic="LogicalE2E"]')
    visit.shot("logical-queues")

    # Create a topic through the form.
    visit.page("/topics")
    b.submit("#create-topic", {"topic": TOPIC, "read_queues": "4", "write_queues": "4",
                               "queue_type": "SimpleCQ"})
    assert f"Topic {TOPIC} saved" in b.text("#flash")
    assert b.text("#queue-type") == "SimpleCQ"

    # Send a message through the send form, then find it by key.
    b.submit("#send-message", {"tags": "TagE2E", "keys": "e2e-key-1",
                               "body": "hello from chromium"})
    assert re.search(r"Sent \w+ to broker-a queue \d at offset 0", b.text("#flash"))
    for _attempt in range(50):  # the key index and the route follow the send shortly
        visit.page(f"/messages?by=key&topic={TOPIC}&key=e2e-key-1")
        if b.exists(".message"):
            break
    assert b.text(".msg-keys") == "e2e-key-1"
    assert b.text("pre.body") == "hello from chromium"
    visit.shot("messages")
    visit.page("/topics")
    assert b.exists(f'tr[data-topic="{TOPIC}"]')

    # A consumer group's lag moves on its page as offsets are committed.
    asyncio.run(produce_and_commit(server.namesrv, commit=5))
    visit.page(f"/groups/{GROUP}")
    b.wait_for("document.getElementById('group-lag').textContent === '16'")
    asyncio.run(produce_and_commit(server.namesrv, commit=15, produce=0))
    b.wait_for("document.getElementById('group-lag').textContent === '6'", timeout=30)
    b.wait_for("document.querySelectorAll('#lag-chart path').length === 1")
    visit.shot("group")
    # A Spark query's group: stored offsets, no heartbeat, so no group config.
    with BlockingPullConsumer(SPARK_GROUP, server.namesrv) as spark:
        spark.commit(MessageQueue(TOPIC, "broker-a", 0), 10)
    visit.page(f"/topics/{TOPIC}", "topic")
    assert b.text("#message-count") == "21"
    assert b.exists(f'a[href="/groups/{SPARK_GROUP}"]')
    visit.page("/topics", "topics")
    visit.page("/groups", "groups")
    assert b.exists(f'tr[data-group="{GROUP}"]')
    assert "Spark?" in b.text(f'tr[data-group="{SPARK_GROUP}"]')
    assert "Spark?" not in b.text(f'tr[data-group="{GROUP}"]')
    visit.page("/cluster", "cluster")
    visit.page("/lmq", "lmq")

    # Reset offsets: a confirmation page first, then the reset.
    visit.page(f"/groups/{GROUP}")
    b.submit("#reset-form", {"topic": TOPIC, "to": "earliest"})
    assert b.exists("#confirm-form")
    b.click("#confirm")
    assert not b.exists("#error"), b.text("#error")
    assert "reset to the earliest offset" in b.text("#flash")
    visit.page(f"/groups/{GROUP}")  # every message is unconsumed again
    b.wait_for("document.getElementById('group-lag').textContent === '21'", timeout=30)

    # Delete the topic: a confirmation page first.
    visit.page(f"/topics/{TOPIC}")
    b.click("#delete-topic")
    assert "cannot be undone" in b.text(".error")
    b.click("#confirm")
    assert f"Topic {TOPIC} deleted" in b.text("#flash")

    scrape_metrics(server)
    json_logs(server)


async def commit_dispatched(consumer: PullConsumer, offsets: dict[MessageQueue, int]) -> None:
    """Commit ``offsets`` once the broker has dispatched the sends before them: it refuses
    an offset past a queue's end, and a standalone broker in another process gives the
    test no event for its dispatch."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        try:
            await consumer.commit(offsets)
            return
        except InvalidParameterError:
            assert loop.time() < deadline, f"{offsets}: the sends were never dispatched"
            await asyncio.sleep(0.05)


async def produce_and_commit(namesrv: str, *, commit: int, produce: int = 20) -> None:
    mq = MessageQueue(TOPIC, "broker-a", 0)
    if produce:
        async with Producer("console-e2e-producer", namesrv) as producer:
            for i in range(produce):
                await producer.send(Message(TOPIC, f"m{i}".encode()), queue=mq)
    async with PullConsumer(GROUP, namesrv) as consumer:
        consumer.subscribe(TOPIC)
        await consumer.instance.routes.get(TOPIC, refresh=True)
        await consumer.instance.send_heartbeat()
        await commit_dispatched(consumer, {mq: commit})


def scrape_metrics(server: Standalone) -> None:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    put = families["tidemq_broker_put_messages"].samples[0].value
    assert put >= 21
    sends = sum(s.value for s in families["tidemq_broker_send_latency_seconds"].samples
                if s.name.endswith("_count"))
    assert sends >= 21, text
    assert families["tidemq_broker_store_healthy"].samples[0].value == 1


def json_logs(server: Standalone) -> None:
    records = [json.loads(line) for line in server.lines if line.startswith("{")]
    assert records, "no JSON log line"
    assert {"ts", "level", "logger", "message"} <= set(records[0])
    assert any(r["logger"] == "tidemq.broker.app" for r in records)
