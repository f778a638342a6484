"""The tidemq data source against a live standalone server, in local Spark."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tidemq.client.blocking import BlockingProducer
from tidemq.spark.options import SourceOptionError
from tidemq.spark.stream_start import start_stream
from tidemq.types import Message

from .conftest import Server, produce, wait_visible

pytestmark = pytest.mark.spark


def test_batch_read_of_a_known_topic(spark: Any, server: Server) -> None:
    produce(server, "SparkBatch", 40)
    wait_visible(server, "SparkBatch", 40)
    df = spark.read.format("tidemq").option("namesrv", server.namesrv) \
        .option("topic", "SparkBatch").load()
    rows = df.collect()
    assert sorted(r.body for r in rows) == sorted(f"m{i}".encode() for i in range(40))
    assert {r.topic for r in rows} == {"SparkBatch"}
    assert all(r.tags == "t" and r.keys.startswith("k") and r.msg_id for r in rows)
    per_queue: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        per_queue.setdefault((r.broker, r.queue), []).append(r.offset)
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))  # dense from 0 per queue
    assert df.schema["properties"].dataType.simpleString() == "map<string,string>"


def test_unknown_and_contradictory_options_fail_at_planning(spark: Any,
                                                           server: Server) -> None:
    reader = spark.read.format("tidemq").option("namesrv", server.namesrv)
    with pytest.raises(Exception, match="unknown option"):
        reader.option("topic", "SparkBatch").option("bogus", "1").load().collect()
    with pytest.raises(Exception, match="exactly one of topic"):
        spark.read.format("tidemq").option("namesrv", server.namesrv) \
            .option("topic", "A").option("topics", "B").load().collect()
    with pytest.raises(SourceOptionError):
        from tidemq.spark.options import parse_source_options

        parse_source_options({"namesrv": "x", "topic": "t", "maxOffsetsPerTrigger": "5"},
                             streaming=False)


def test_streaming_available_now_then_restart_resumes_exactly(
        spark: Any, server: Server, tmp_path: Path) -> None:
    produce(server, "SparkStream", 30)
    wait_visible(server, "SparkStream", 30)
    out = tmp_path / "out"
    ckpt = tmp_path / "ckpt"

    def run() -> None:
        q = start_stream(spark.readStream.format("tidemq").option("namesrv", server.namesrv)
             .option("topic", "SparkStream").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "12").load()
             .selectExpr("cast(body as string) as body", "offset", "queue", "broker")
             .writeStream.format("json").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True))
        assert q.awaitTermination(120)
        assert q.exception() is None

    run()
    produce(server, "SparkStream", 20, start=30)
    wait_visible(server, "SparkStream", 50)
    run()
    bodies = [json.loads(line)["body"] for f in sorted(out.glob("*.json"))
              for line in f.read_text().splitlines() if line]
    assert sorted(bodies) == sorted(f"m{i}" for i in range(50))  # no dup, no gap
    offsets = json.loads(sorted((ckpt / "offsets").glob("[0-9]*"))[-1]
                         .read_text().splitlines()[-1])
    assert list(offsets) == ["SparkStream"]


def test_sink_round_trip(spark: Any, server: Server) -> None:
    df = spark.createDataFrame([(f"s{i}", f"key{i}") for i in range(25)],
                               "body string, keys string")
    df.write.format("tidemq").option("namesrv", server.namesrv) \
        .option("topic", "SparkSink").mode("append").save()
    wait_visible(server, "SparkSink", 25)
    back = spark.read.format("tidemq").option("namesrv", server.namesrv) \
        .option("topic", "SparkSink").load().collect()
    assert sorted(r.body.decode() for r in back) == sorted(f"s{i}" for i in range(25))
    assert sorted(r.keys for r in back) == sorted(f"key{i}" for i in range(25))
    assert all(r.properties["SPARK_DEDUP_KEY"].startswith("spark:") for r in back)


def test_lmq_read(spark: Any, server: Server) -> None:
    with BlockingProducer("spark-lmq", server.namesrv) as p:
        for i in range(10):
            p.send(Message("SparkLmqParent", f"l{i}".encode(),
                           {"INNER_MULTI_DISPATCH": "%LMQ%inboxA,%LMQ%inboxB"}))
    time.sleep(0.5)
    rows = spark.read.format("tidemq").option("namesrv", server.namesrv) \
        .option("lmq", "%LMQ%inboxA").option("broker", server.broker).load().collect()
    assert sorted(r.offset for r in rows) == list(range(10))
    assert {r.lmq for r in rows} == {"%LMQ%inboxA"}


def test_batch_read_by_tag_of_a_batch_cq_topic(spark: Any, server: Server) -> None:
    """A tag option keeps exactly the messages with that tag inside inner batches."""
    subprocess.run([str(Path(sys.executable).parent / "tidemq"), "admin", "updateTopic",
                    "-n", server.namesrv, "-t", "SparkBcqTags", "-r", "1", "-w", "1",
                    "-a", "+queue.type=BatchCQ"], check=True, capture_output=True, timeout=60)
    with BlockingProducer("spark-bcq", server.namesrv) as p:
        for start in (0, 20):
            p.send_batch([Message("SparkBcqTags", f"m{i}".encode(), {"TAGS": f"tag{i % 2}"})
                          for i in range(start, start + 20)])
    wait_visible(server, "SparkBcqTags", 40)
    rows = spark.read.format("tidemq").option("namesrv", server.namesrv) \
        .option("topic", "SparkBcqTags").option("tags", "tag1").load().collect()
    assert sorted(r.body for r in rows) == sorted(f"m{i}".encode() for i in range(1, 40, 2))
    assert {r.tags for r in rows} == {"tag1"}
