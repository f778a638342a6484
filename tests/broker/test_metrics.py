"""The broker's Prometheus endpoint (metricsPort): scraped over HTTP and parsed with
prometheus_client's own parser, against a real in-process cluster."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import shutil
import socket
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from tests.broker import wire
from tests.broker.held import Held, answered_meanwhile
from tests.broker.wire import Peer
from tests.tls_certs import Certs, der, renew, served_certificate, wait_until_served

import tidemq.broker.metrics as metrics_module
from tidemq.broker.metrics import BrokerCollector, BrokerMetrics
from tidemq.client import AdminClient, Message, MessageQueue, Producer, PullConsumer
from tidemq.codec.batch_protocol import decode_batch_response, encode_batch_request
from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.net.ports import free_port
from tidemq.testing import Cluster
from tidemq.types import FlushDiskType


def scrape(port: int) -> dict[str, list[Sample]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(families: dict[str, list[Sample]], name: str, **labels: str) -> float:
    family = name.removesuffix("_total")
    for sample in families[family]:
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    raise KeyError(f"{name} {labels}")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """SYNC_FLUSH, so that every acknowledged send was flushed by the flusher the
    flush metrics describe."""
    async with Cluster(tmp_path, brokers=1, broker={"metrics_port": free_port()},
                       store={"flush_disk_type": FlushDiskType.SYNC_FLUSH}) as c:
        yield c


async def test_broker_metrics_follow_traffic(cluster: Cluster) -> None:
    app = cluster.brokers[0]
    assert app.metrics_server is not None
    port = app.config.metrics_port
    async with AdminClient(cluster.namesrv_addr) as admin:
        await admin.create_topic("Metered", read_queue_nums=2, write_queue_nums=2)
    assert app.registrar is not None
    await app.registrar.register_all()
    mq = MessageQueue("Metered", "broker-a", 1)
    async with Producer("metrics-producers", cluster.namesrv_addr) as producer:
        await producer.send(Message("Metered", b"warm-up"), queue=mq)
        for i in range(9):
            await producer.send(Message("Metered", b"x" * 100 + bytes([i])), queue=mq)
    app.store.wait_dispatched()
    async with PullConsumer("metrics-group", cluster.namesrv_addr) as consumer:
        consumer.assign([mq])
        await consumer.seek_to_beginning()
        got = []
        async with asyncio.timeout(10):
            while len(got) < 10:
                got += await consumer.poll(timeout=1.0)
    async with PullConsumer("metrics-group", cluster.namesrv_addr) as rewinder:
        await rewinder.commit({mq: 4})
    async with PullConsumer("caught-up", cluster.namesrv_addr) as done:
        await done.commit({mq: 10})
    fourth = app.store.store_time_at("Metered", 1, 4)  # the oldest one metrics-group lacks

    async with AdminClient(cluster.namesrv_addr) as admin:
        await admin.broker_status(app.broker_addr)  # one open connection while scraping
        m = await asyncio.to_thread(scrape, port)
    assert value(m, "tidemq_broker_put_messages_total") == 10
    assert value(m, "tidemq_broker_put_bytes_total") > 900
    assert value(m, "tidemq_broker_get_messages_total") >= 10
    assert value(m, "tidemq_broker_topic_put_messages_total", topic="Metered") == 10
    assert value(m, "tidemq_broker_group_get_messages_total", group="metrics-group") >= 10
    assert "tidemq_broker_put_tps" not in m  # rates are rate() of the counters
    sends = sum(s.value for s in m["tidemq_broker_send_latency_seconds"]
                if s.name.endswith("_count") and s.labels["request"] == "SEND_MESSAGE_V2")
    pulls = sum(s.value for s in m["tidemq_broker_pull_latency_seconds"]
                if s.name.endswith("_count") and s.labels["request"] == "PULL_MESSAGE")
    assert sends >= 10 and pulls >= 1
    # SYNC_FLUSH: each send was answered by the flush, after its processor returned.
    assert value(m, "tidemq_broker_requests_total", request="SEND_MESSAGE_V2",
                 response="DEFERRED") == sends
    assert value(m, "tidemq_broker_requests_total", request="GET_BROKER_RUNTIME_INFO",
                 response="SUCCESS") >= 1
    assert value(m, "tidemq_broker_queue_max_offset", topic="Metered", queue_id="1") == 10
    assert value(m, "tidemq_broker_queue_min_offset", topic="Metered", queue_id="1") == 0
    assert value(m, "tidemq_broker_consumer_lag_messages", group="metrics-group",
                 topic="Metered") == 6
    assert "tidemq_broker_consumer_offset" not in m  # a sum of offsets means nothing
    behind = value(m, "tidemq_broker_consumer_lag_seconds", group="metrics-group",
                   topic="Metered")
    assert fourth > 0 and behind >= 0
    assert abs(behind - (time.time() * 1000 - fourth) / 1000) < 5  # since message 4
    assert value(m, "tidemq_broker_consumer_lag_messages", group="caught-up",
                 topic="Metered") == 0
    assert value(m, "tidemq_broker_consumer_lag_seconds", group="caught-up",
                 topic="Metered") == 0
    assert "tidemq_broker_consumer_queue_lag_messages" not in m  # metricsQueueLag is off
    app.ctx.config = dataclasses.replace(app.config, metrics_queue_lag=True)
    q = {f.name: f.samples for f in text_string_to_metric_families(
        BrokerMetrics(app.ctx).render().decode())}
    assert value(q, "tidemq_broker_consumer_queue_lag_messages", group="metrics-group",
                 topic="Metered", queue_id="1") == 6
    assert value(q, "tidemq_broker_consumer_queue_lag_messages", group="metrics-group",
                 topic="Metered", queue_id="0") == 0
    assert value(q, "tidemq_broker_consumer_queue_lag_seconds", group="metrics-group",
                 topic="Metered", queue_id="0") == 0
    # Everything was dispatched and flushed (SYNC_FLUSH) before the scrape; nothing since.
    assert value(m, "tidemq_broker_dispatch_behind_bytes") == 0
    assert value(m, "tidemq_broker_dispatch_lag_seconds") == 0
    assert app.store.flusher is not None
    assert 1 <= value(m, "tidemq_broker_flushes_total") <= app.store.flusher.flush_count
    assert value(m, "tidemq_broker_flush_last_seconds") > 0
    assert value(m, "tidemq_broker_commitlog_bytes") > 1000
    assert 0 < value(m, "tidemq_broker_disk_used_ratio") < 1
    assert value(m, "tidemq_broker_connections") >= 1
    assert value(m, "tidemq_broker_topics") >= 2
    assert value(m, "tidemq_broker_store_healthy", status="RUNNING") == 1
    assert value(m, "tidemq_broker_info", broker="broker-a", cluster="DefaultCluster") == 1
    assert "tidemq_broker_lmq_queues" not in m  # LMQ is off here


async def test_label_cardinality_is_bounded(cluster: Cluster) -> None:
    app = cluster.brokers[0]
    for i in range(5):
        app.offsets.commit(f"g{i}", "Bounded", 0, 0)
    text = BrokerMetrics(app.ctx, max_series=2).render().decode()
    families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    assert len(families["tidemq_broker_consumer_lag_messages"]) == 2
    assert value(families, "tidemq_broker_series_dropped", family="consumer_lag") == 3


async def test_metrics_are_off_by_default_and_a_busy_port_is_not_fatal(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path / "a", brokers=1) as plain:
        assert plain.brokers[0].metrics_server is None
        assert b"tidemq_broker_put_messages_total 0.0" in plain.brokers[0].metrics.render()
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with Cluster(tmp_path / "b", brokers=1, broker={"metrics_port": port}) as busy:
            assert busy.brokers[0].metrics_server is None
            assert busy.brokers[0].started


async def test_forced_retention_counts_what_no_group_consumed(tmp_path: Path) -> None:
    """Messages a forced pass deletes above the group's committed offset are exported."""
    async with Cluster(tmp_path, brokers=1, broker={"metrics_port": free_port()},
                       store={"mapped_file_size_commit_log": 4096,
                              "mapped_file_size_consume_queue": 20 * 30}) as c:
        app = c.brokers[0]
        async with AdminClient(c.namesrv_addr) as admin:
            await admin.create_topic("Lost", read_queue_nums=1, write_queue_nums=1)
        assert app.registrar is not None
        await app.registrar.register_all()
        mq = MessageQueue("Lost", "broker-a", 0)
        async with Producer("lost-producers", c.namesrv_addr) as producer:
            for i in range(30):
                await producer.send(Message("Lost", bytes([i]) * 400), queue=mq)
        assert app.store.wait_dispatched()
        async with PullConsumer("slow-group", c.namesrv_addr) as consumer:
            await consumer.commit({mq: 2})
        app.store.retention.disk_usage = lambda _path: 0.87  # over the forced ratio
        report = await asyncio.to_thread(app.store.run_retention)
        assert report.forced and report.deleted_segments
        new_min = app.store.min_offset("Lost", 0)
        assert [(r.topic, r.start, r.end) for r in report.lost] == [("Lost", 2, new_min)]
        m = await asyncio.to_thread(scrape, app.config.metrics_port)
        assert value(m, "tidemq_broker_retention_lost_messages_total") == new_min - 2


async def test_batch_children_are_timed_like_requests(cluster: Cluster) -> None:
    """The latency histograms are a pipeline interceptor: a batch-protocol parent of
    three sends counts three sends, each under its child's code."""
    app = cluster.brokers[0]
    async with Peer(app.broker_addr) as peer:
        await peer.ok(wire.create_topic("Timed", 2))
        before = await asyncio.to_thread(scrape, app.config.metrics_port)
        kids = [wire.send("Timed", b"t%d" % i, queue_id=i % 2) for i in range(3)]
        resp = await peer(encode_batch_request(RequestCode.SEND_MESSAGE_V2, kids))
        assert [r.code for r in decode_batch_response(resp, [1, 2, 3])] == [0, 0, 0]
    after = await asyncio.to_thread(scrape, app.config.metrics_port)

    def count(m: dict[str, list[Sample]]) -> float:
        return sum(s.value for s in m.get("tidemq_broker_send_latency_seconds", [])
                   if s.name.endswith("_count")
                   and s.labels.get("request") == "SEND_MESSAGE_V2")

    assert count(after) - count(before) == 3


async def test_each_answer_is_counted_under_its_names(cluster: Cluster) -> None:
    """Requests are counted by request and response name, refusals included."""
    app = cluster.brokers[0]
    async with Peer(app.broker_addr) as peer:
        await peer.ok(wire.create_topic("Named", 1))
        answer = await peer(wire.send("Named", b"x", queue_id=7))  # no such queue
        assert answer.code == ResponseCode.INVALID_PARAMETER
    m = await asyncio.to_thread(scrape, app.config.metrics_port)
    assert value(m, "tidemq_broker_requests_total", request="UPDATE_AND_CREATE_TOPIC",
                 response="SUCCESS") == 1
    refused = [s for s in m["tidemq_broker_requests"] if s.name.endswith("_total")
               and s.labels["request"] == "SEND_MESSAGE_V2"]
    assert [(s.labels["response"], s.value) for s in refused] == [("INVALID_PARAMETER", 1)]


async def test_metrics_https_serves_a_renewed_certificate(tmp_path: Path,
                                                          tls_certs: Certs) -> None:
    cert, key = tmp_path / "metrics.crt", tmp_path / "metrics.key"
    shutil.copyfile(tls_certs.server_cert, cert)
    shutil.copyfile(tls_certs.server_key, key)
    port = free_port()
    async with Cluster(tmp_path / "cluster", brokers=1, broker={
            "metrics_port": port, "metrics_cert_path": str(cert),
            "metrics_key_path": str(key)}):
        assert await asyncio.to_thread(served_certificate, port) == der(tls_certs.server_cert)
        renew(cert, key, tls_certs.other_host_cert, tls_certs.other_host_key)
        await asyncio.to_thread(wait_until_served, port, der(tls_certs.other_host_cert))


def _families(text: bytes, *names: str) -> dict[str, list[Sample]]:
    return {f.name: f.samples for f in text_string_to_metric_families(text.decode())
            if f.name in names}


async def test_a_scrape_gathered_a_slice_at_a_time_is_the_scrape_read_at_once(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    app = cluster.brokers[0]
    async with AdminClient(cluster.namesrv_addr) as admin:
        await admin.create_topic("Sliced", read_queue_nums=3, write_queue_nums=3)
        async with Producer("sliced-producers", cluster.namesrv_addr) as producer:
            for i in range(6):
                await producer.send(Message("Sliced", b"x%d" % i))
    assert await asyncio.to_thread(app.store.wait_dispatched, 10.0)  # both scrapes see all
    for i in range(5):
        app.offsets.commit(f"g{i}", "Sliced", i % 3, i % 2)
    monkeypatch.setattr(metrics_module, "LAG_SLICE", 2)
    metrics = BrokerMetrics(app.ctx, max_series=4)
    names = ("tidemq_broker_consumer_lag_messages", "tidemq_broker_consumer_lag_seconds",
             "tidemq_broker_queue_max_offset", "tidemq_broker_queue_min_offset",
             "tidemq_broker_series_dropped")
    gathered = _families(await metrics.render_async(), *names)
    at_once = _families(metrics.render(), *names)
    ages = ("tidemq_broker_consumer_lag_seconds",)  # measured from each scrape's clock
    assert {k: v for k, v in gathered.items() if k not in ages} == {
        k: v for k, v in at_once.items() if k not in ages}
    assert [s.labels for s in gathered[ages[0]]] == [s.labels for s in at_once[ages[0]]]
    assert len(gathered["tidemq_broker_consumer_lag_messages"]) == 4


async def test_a_scrape_chooses_its_series_off_the_loop(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    app = cluster.brokers[0]
    app.offsets.commit("g", "Chosen", 0, 0)
    first = metrics_module._first

    def slow(*args: Any) -> Any:
        held.hold()
        return first(*args)

    monkeypatch.setattr(metrics_module, "_first", slow)
    scraping = asyncio.create_task(asyncio.to_thread(scrape, app.config.metrics_port))
    await answered_meanwhile(peer, held)
    families = await scraping
    assert held.gave_up == [False]
    assert value(families, "tidemq_broker_consumer_lag_messages", group="g", topic="Chosen") == 0


class _OnTheLoop(dict[str, dict[int, int]]):
    """An offsets table that counts the walks over it on the event loop's thread."""

    walks = 0

    def __iter__(self) -> Iterator[str]:
        if threading.current_thread() is threading.main_thread():
            _OnTheLoop.walks += 1
        return super().__iter__()


async def test_a_scrape_walks_none_of_the_offsets_table_on_the_loop(cluster: Cluster) -> None:
    """A copy of the keys of every group's offsets holds the loop as long as the table
    is long: the scrape reads them on its thread, a slice at a time."""
    app = cluster.brokers[0]
    for i in range(5):
        app.offsets.commit(f"g{i}", "Walked", 0, 0)
    app.offsets.table = _OnTheLoop(app.offsets.table)
    _OnTheLoop.walks = 0
    families = await asyncio.to_thread(scrape, app.config.metrics_port)
    assert _OnTheLoop.walks == 0
    assert value(families, "tidemq_broker_consumer_lag_messages", group="g3",
                 topic="Walked") == 0


async def test_a_scrape_reads_the_lag_a_slice_at_a_time(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    app = cluster.brokers[0]
    for i in range(4):
        app.offsets.commit(f"g{i}", "Turns", 0, 0)
    marks: list[str] = []
    lag_row = BrokerCollector._lag_row

    def row(self: BrokerCollector, *args: Any) -> Any:
        marks.append("row")
        return lag_row(self, *args)

    async def other_work() -> None:
        while True:
            marks.append("turn")
            await asyncio.sleep(0)

    monkeypatch.setattr(BrokerCollector, "_lag_row", row)
    monkeypatch.setattr(metrics_module, "LAG_SLICE", 1)
    ticker = asyncio.create_task(other_work())
    try:
        await BrokerMetrics(app.ctx).render_async()
    finally:
        ticker.cancel()
    rows = [i for i, mark in enumerate(marks) if mark == "row"]
    assert len(rows) == 4
    assert all(b - a > 1 for a, b in itertools.pairwise(rows))  # the loop turned between


async def test_a_scrape_writes_its_text_off_the_loop(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    app = cluster.brokers[0]
    app.offsets.commit("g", "Written", 0, 0)
    write = metrics_module.generate_latest

    def slow(registry: Any) -> bytes:
        held.hold()
        return write(registry)

    monkeypatch.setattr(metrics_module, "generate_latest", slow)
    scraping = asyncio.create_task(asyncio.to_thread(scrape, app.config.metrics_port))
    await answered_meanwhile(peer, held)
    families = await scraping
    assert held.gave_up == [False]
    assert value(families, "tidemq_broker_consumer_lag_messages", group="g",
                 topic="Written") == 0
