"""Streaming reads: a processingTime trigger, a replay after a missing commit (with the
real topic sink), and the consumer-group progress the reader stores on the broker."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.blocking import BlockingPullConsumer
from tidemq.client.monitor import ConsumeStats, consume_stats
from tidemq.spark.stream_start import start_stream

from .conftest import Server, produce, wait_visible

pytestmark = pytest.mark.spark


def read_stream(spark: Any, server: Server, topic: str, **options: str) -> Any:
    return (spark.readStream.format("tidemq").option("namesrv", server.namesrv)
            .option("topic", topic).option("startingOffsets", "earliest")
            .options(**options).load())


def test_processing_time_trigger_passes_every_row_once(spark: Any, server: Server,
                                                       tmp_path: Path) -> None:
    produce(server, "SparkTicks", 20)
    wait_visible(server, "SparkTicks", 20)
    query = start_stream(read_stream(spark, server, "SparkTicks")
             .selectExpr("cast(body as string) as body", "queue", "offset")
             .writeStream.format("memory").queryName("ticks").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="1 second"))
    deadline = time.monotonic() + 120

    def wait_rows(n: int) -> None:
        while spark.sql("select count(*) from ticks").first()[0] < n:
            assert time.monotonic() < deadline, "the query did not catch up"
            assert query.exception() is None
            query.awaitTermination(0.3)  # the query's own wait: returns at once if it died

    try:
        for start in (20, 35, 50):  # each round lands while the query runs
            wait_rows(start)
            produce(server, "SparkTicks", 15, start=start)
        wait_rows(65)
    finally:
        query.stop()
    assert query.exception() is None
    bodies = [r.body for r in spark.sql("select body from ticks").collect()]
    assert sorted(bodies) == sorted(f"m{i}" for i in range(65))  # rows in = rows out
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert sum(p["numInputRows"] for p in query.recentProgress) == 65
    assert len(batches) >= 4  # the rounds arrived while the query was running


def test_a_batch_without_its_commit_is_replayed_to_the_sink_with_the_same_keys(
        spark: Any, server: Server, tmp_path: Path) -> None:
    produce(server, "SparkReplayIn", 30)
    wait_visible(server, "SparkReplayIn", 30)
    ckpt = tmp_path / "ckpt"

    def run() -> None:
        q = start_stream(read_stream(spark, server, "SparkReplayIn", maxOffsetsPerTrigger="12",
                         group="spark-replay")
             .selectExpr("body", "keys")
             .writeStream.format("tidemq").option("namesrv", server.namesrv)
             .option("topic", "SparkReplayOut").option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True))
        assert q.awaitTermination(120)
        assert q.exception() is None

    run()
    offsets = sorted(int(f.name) for f in (ckpt / "offsets").glob("[0-9]*"))
    assert offsets == [0, 1, 2]  # at most 12 rows a batch

    def end(batch: int) -> dict[str, int]:
        return dict(json.loads((ckpt / "offsets" / str(batch)).read_text()
                               .splitlines()[-1])["SparkReplayIn"])

    replayed = sum(end(2).values()) - sum(end(1).values())
    last_end = end(2)
    for name in ("2", ".2.crc"):  # as if the driver died after the sink published
        (ckpt / "commits" / name).unlink(missing_ok=True)
    run()
    assert sorted(int(f.name) for f in (ckpt / "offsets").glob("[0-9]*")) == [0, 1, 2]
    assert end(2) == last_end
    assert (ckpt / "commits" / "2").exists()

    wait_visible(server, "SparkReplayOut", 30 + replayed)
    rows = spark.read.format("tidemq").option("namesrv", server.namesrv) \
        .option("topic", "SparkReplayOut").load().collect()
    copies: dict[bytes, list[str]] = {}
    for r in rows:
        copies.setdefault(r.body, []).append(r.properties["SPARK_DEDUP_KEY"])
    assert set(copies) == {f"m{i}".encode() for i in range(30)}  # every row at least once
    assert sorted(len(v) for v in copies.values()) == [1] * (30 - replayed) + [2] * replayed
    assert all(len(set(keys)) == 1 for keys in copies.values())  # copies share their key
    assert len({keys[0] for keys in copies.values()}) == 30  # and different rows do not
    assert all(k.split(":")[2] in ("0", "1", "2") for keys in copies.values() for k in keys)

    # The reader stored the group's offsets on the broker: consumerProgress shows no lag.
    with BlockingPullConsumer("spark-replay", server.namesrv) as c:
        for q in c.queues("SparkReplayIn"):
            assert c.committed(q) == c.get_max_offset(q)
    stats = asyncio.run(progress(server, "spark-replay", "SparkReplayIn"))
    assert len(stats.queues) == 4 and stats.lag == 0
    assert sum(q.consumer_offset for q in stats.queues) == 30


async def progress(server: Server, group: str, topic: str) -> ConsumeStats:
    """GET_CONSUME_STATS, what ``mqadmin consumerProgress`` and the console show."""
    async with AdminClient(config=ClientConfig(namesrv_addr=(server.namesrv,))) as admin:
        return await consume_stats(admin, group, topic)


class Triggers:
    """A running query's triggers as its progress events tell them (one per trigger,
    with or without data, while ``noDataProgressEventInterval`` is 0)."""

    def __init__(self, query: Any, timeout: float = 120) -> None:
        self.query = query
        self.deadline = time.monotonic() + timeout

    def _tick(self) -> None:
        assert time.monotonic() < self.deadline, "the query made no progress"
        assert self.query.exception() is None
        self.query.awaitTermination(0.2)  # the query's own wait: at once if it died

    def wait(self, count: int) -> list[dict[str, Any]]:
        """Wait until ``count`` more triggers have ended; the progress events of those
        ``count`` (more may have ended meanwhile on a busy machine: they are not returned)."""
        seen = {p["timestamp"] for p in self.query.recentProgress}
        while True:
            new = [p for p in self.query.recentProgress if p["timestamp"] not in seen]
            if len(new) >= count:
                return new[:count]
            self._tick()

    def wait_rows(self, spark: Any, table: str, n: int) -> None:
        while spark.sql(f"select count(*) from {table}").first()[0] < n:
            self._tick()


def _held_stream(spark: Any, server: Server, topic: str, table: str, ckpt: Path,
                 **options: str) -> Any:
    return start_stream(read_stream(spark, server, topic, startingOffsets="latest", **options)
            .selectExpr("cast(body as string) as body")
            .writeStream.format("memory").queryName(table).outputMode("append")
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime="200 milliseconds"))


@pytest.fixture
def every_trigger_reported(spark: Any) -> Any:
    key = "spark.sql.streaming.noDataProgressEventInterval"
    old = spark.conf.get(key)
    spark.conf.set(key, "0")
    yield
    spark.conf.set(key, old)


def test_min_offsets_per_trigger_holds_batches_in_a_running_stream(
        spark: Any, server: Server, tmp_path: Path, every_trigger_reported: None) -> None:
    """Kafka's ``minOffsetsPerTrigger``: while fewer rows wait, triggers pass without a
    batch; once enough have come, one batch takes them all."""
    produce(server, "SparkMinRows", 1)  # the topic exists; the query starts after it
    wait_visible(server, "SparkMinRows", 1)
    query = _held_stream(spark, server, "SparkMinRows", "min_rows", tmp_path / "ckpt",
                         minOffsetsPerTrigger="10", maxTriggerDelay="10m")
    try:
        triggers = Triggers(query)
        triggers.wait(1)
        produce(server, "SparkMinRows", 4, start=1)
        wait_visible(server, "SparkMinRows", 5)
        held = triggers.wait(3)  # three triggers that saw the 4 rows waiting
        assert [p["numInputRows"] for p in held] == [0, 0, 0]
        assert spark.sql("select count(*) from min_rows").first()[0] == 0
        produce(server, "SparkMinRows", 6, start=5)
        triggers.wait_rows(spark, "min_rows", 10)
    finally:
        query.stop()
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [10]
    assert sorted(r.body for r in spark.sql("select body from min_rows").collect()) == \
        sorted(f"m{i}" for i in range(1, 11))


def test_max_trigger_delay_lets_a_small_batch_through(
        spark: Any, server: Server, tmp_path: Path, every_trigger_reported: None) -> None:
    """Kafka's ``maxTriggerDelay``: rows fewer than ``minOffsetsPerTrigger`` are read
    once that long has passed since the last batch (here: the query's first trigger,
    which found nothing new)."""
    produce(server, "SparkDelayRows", 1)
    wait_visible(server, "SparkDelayRows", 1)
    query = _held_stream(spark, server, "SparkDelayRows", "delay_rows", tmp_path / "ckpt",
                         minOffsetsPerTrigger="1000", maxTriggerDelay="2s")
    try:
        triggers = Triggers(query)
        triggers.wait(1)
        produce(server, "SparkDelayRows", 3, start=1)
        triggers.wait_rows(spark, "delay_rows", 3)
    finally:
        query.stop()
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [3]
    assert sorted(r.body for r in spark.sql("select body from delay_rows").collect()) == \
        ["m1", "m2", "m3"]
