"""A streaming query over a logical-queue topic (RIP-21) keeps running, with no restart,
no duplicate and no missing row, while logical queues migrate between brokers.

The three-broker cluster runs in this process on a background event loop (Spark's
Python workers reach it over TCP); producing and migrating run on that loop too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidemq.client import AdminClient, Producer
from tidemq.client.logical_admin import LogicalQueueAdmin
from tidemq.spark.stream_start import start_stream
from tidemq.testing import Cluster
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue

pytestmark = pytest.mark.spark

T = TypeVar("T")
TOPIC = "SparkLogical"
N = 4


class LoopThread:
    """An event loop on a daemon thread; ``run`` waits for a coroutine's result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Load:
    """Sends to every logical queue in turn until stopped; remembers what was acked."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.acked: set[tuple[int, int, str]] = set()
        self.running = True

    async def produce(self) -> None:
        producer = Producer("spark-lq-producer", self.namesrv)
        await producer.start()
        try:
            i = 0
            while self.running:
                body = f"lq{i}"
                res = await producer.send(Message(TOPIC, body.encode()),
                                          queue=MessageQueue(TOPIC, LOGICAL_BROKER, i % N))
                self.acked.add((res.queue.queue_id, res.queue_offset, body))
                i += 1
                await asyncio.sleep(0.004)
        finally:
            await producer.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LoopThread, Cluster, AdminClient]]:
    loop = LoopThread()
    c = Cluster(tmp_path / "cluster", brokers=3)
    loop.run(c.start())
    admin = AdminClient(c.namesrv_addr)
    loop.run(admin.start())
    try:
        yield loop, c, admin
    finally:
        loop.run(admin.close())
        loop.run(c.stop())
        loop.close()


async def _logical_route(admin: AdminClient) -> None:
    for _ in range(300):
        with contextlib.suppress(Exception):
            qd = (await admin.topic_route(TOPIC)).queue_datas
            if qd and qd[0].broker_name == LOGICAL_BROKER and qd[0].read_queue_nums == N:
                return
        await asyncio.sleep(0.02)
    raise AssertionError("the logical route never appeared")


def test_a_query_reads_through_migrations_without_restart_gap_or_duplicate(
        spark: Any, cluster: tuple[LoopThread, Cluster, AdminClient], tmp_path: Path) -> None:
    loop, c, admin = cluster
    lqa = LogicalQueueAdmin(admin)
    loop.run(lqa.create(TOPIC, N, ["broker-a", "broker-b"]))
    loop.run(_logical_route(admin))
    load = Load(c.namesrv_addr)
    producing = loop.submit(load.produce())
    query = start_stream(spark.readStream.format("tidemq").option("namesrv", c.namesrv_addr)
             .option("topic", TOPIC).option("startingOffsets", "earliest").load()
             .selectExpr("queue", "offset", "cast(body as string) as body", "broker")
             .writeStream.format("memory").queryName("lq_rows").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="1 second"))
    run_id = query.runId
    deadline = time.monotonic() + 150

    def rows() -> int:
        return int(spark.sql("select count(*) from lq_rows").first()[0])

    def wait_rows(n: int) -> None:
        while rows() < n:
            assert time.monotonic() < deadline, f"the query is stuck below {n} rows"
            assert query.isActive and query.exception() is None
            query.awaitTermination(0.3)  # the query's own wait: returns at once if it died

    try:
        wait_rows(20)
        loop.run(lqa.migrate(TOPIC, 0, "broker-c"))  # queue 0: a -> c, under load
        wait_rows(len(load.acked) + 20)
        loop.run(lqa.migrate(TOPIC, 1, "broker-c"))  # queue 1: b -> c
        wait_rows(len(load.acked) + 20)
        loop.run(lqa.migrate(TOPIC, 0, "broker-a"))  # and queue 0 back while c is readable
        wait_rows(len(load.acked) + 20)
        load.running = False
        producing.result(30)
        wait_rows(len(load.acked))
    finally:
        load.running = False
        query.stop()
    assert query.exception() is None and query.runId == run_id  # never restarted
    got = [(r.queue, r.offset, r.body) for r in spark.sql("select * from lq_rows").collect()]
    assert len(got) == len(set(got))  # no duplicate
    assert set(got) == load.acked  # no gap: every acknowledged send, nothing else
    assert {r.broker for r in spark.sql("select broker from lq_rows").collect()} == {
        LOGICAL_BROKER}
    for lq in range(N):  # logical offsets stay contiguous across the segments
        offsets = sorted(o for q, o, _ in got if q == lq)
        assert offsets == list(range(len(offsets)))
    mapping = loop.run(lqa.query(TOPIC))  # the migrations did happen
    assert [s.broker for s in mapping.queues[0]] == ["broker-a", "broker-c", "broker-a"]
    assert [s.broker for s in mapping.queues[1]] == ["broker-b", "broker-c"]
    ends = [json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress]
    assert all(list(e[TOPIC]) == [f"{LOGICAL_BROKER}:{i}" for i in range(N)] for e in ends)
