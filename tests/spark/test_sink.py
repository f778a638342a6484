"""The topic sink is at-least-once: a failure between the write of a micro-batch and its
commit replays the batch, and the copies carry the same dedup key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidemq.spark.stream_start import start_stream

from .conftest import Server, produce, wait_visible

pytestmark = pytest.mark.spark


def test_failure_after_the_write_of_batch_1_gives_copies_with_one_key(
        spark: Any, server: Server, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    produce(server, "SinkFailIn", 30)
    wait_visible(server, "SinkFailIn", 30)
    flag = tmp_path / "fail-once"
    flag.touch()
    written: list[int] = []

    def publish(df: Any, batch_id: int) -> None:
        (df.selectExpr("body", "keys").write.format("tidemq")
         .option("namesrv", server.namesrv).option("topic", "SinkFailOut")
         .mode("append").save())
        written.append(df.count())
        if batch_id == 1 and flag.exists():  # first attempt of batch 1 only
            flag.unlink()
            raise RuntimeError("injected failure between the write and the commit")

    def run() -> Any:
        return start_stream(spark.readStream.format("tidemq").option("namesrv", server.namesrv)
                .option("topic", "SinkFailIn").option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "10").load()
                .writeStream.foreachBatch(publish)
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(availableNow=True))

    first = run()
    with pytest.raises(StreamingQueryException, match="injected failure"):
        first.awaitTermination(120)
    second = run()
    assert second.awaitTermination(120)
    assert second.exception() is None
    replayed = written[1]  # batch 1 ran twice: before the failure and after the restart
    assert written[2] == replayed and sum(written) == 30 + replayed

    wait_visible(server, "SinkFailOut", 30 + replayed)
    rows = spark.read.format("tidemq").option("namesrv", server.namesrv) \
        .option("topic", "SinkFailOut").load().collect()
    copies: dict[bytes, list[str]] = {}
    for r in rows:
        copies.setdefault(r.body, []).append(r.properties["SPARK_DEDUP_KEY"])
        assert r.keys == f"k{r.body.decode()[1:]}"  # the user's keys, without the dedup key
    assert set(copies) == {f"m{i}".encode() for i in range(30)}  # every row at least once
    assert sum(len(v) == 2 for v in copies.values()) == replayed  # at-least-once, not more
    assert all(len(set(keys)) == 1 for keys in copies.values())  # a copy has the same key
    assert len({keys[0] for keys in copies.values()}) == 30  # different rows, different keys
    batches = {str(b) for b in range(len(written) - 1)}  # the streaming batch ids
    assert {keys[0].split(":")[2] for keys in copies.values()} == batches


def test_sink_options_are_checked(spark: Any, server: Server) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="unknown sink option"):
        df.write.format("tidemq").option("namesrv", server.namesrv) \
            .option("topic", "T").option("exactlyOnce", "true").mode("append").save()


def test_rows_to_messages() -> None:
    from tidemq.spark.options import parse_sink_options
    from tidemq.spark.sink import _message, dedup_prefix, sharding_key

    opts = parse_sink_options({"namesrv": "ns:9876", "topic": "Out"})
    source_row = {"topic": "In", "body": b"b", "keys": "k1", "tags": "t",
                  "properties": {"UNIQ_KEY": "U", "CLUSTER": "C", "MIN_OFFSET": "0",
                                 "color": "red", "KEYS": "old"}}
    msg = _message(opts, source_row, "spark:q:3:1:7")
    assert msg.topic == "Out"  # the option wins over the row's topic column
    assert msg.properties == {"color": "red", "KEYS": "k1",
                              "SPARK_DEDUP_KEY": "spark:q:3:1:7", "TAGS": "t"}
    bare = parse_sink_options({"namesrv": "ns:9876"})
    assert _message(bare, {"topic": "In", "body": "text"}, "d").body == b"text"
    kafka_row = {"key": b"k2", "value": b"v", "topic": "In", "partition": 1,
                 "headers": [{"key": "color", "value": b"blue"}, {"key": "UNIQ_KEY",
                                                                  "value": b"U"}]}
    msg = _message(bare, kafka_row, "d")
    assert (msg.topic, msg.body) == ("In", b"v")
    assert msg.properties == {"color": "blue", "KEYS": "k2", "SPARK_DEDUP_KEY": "d"}
    assert sharding_key(kafka_row) == "partition:1"
    assert sharding_key({"key": b"k2"}) == "k2"  # Kafka: one key, one partition, in order
    with pytest.raises(ValueError, match="key is not UTF-8"):
        _message(bare, {"topic": "In", "value": b"v", "key": b"\xff"}, "d")
    with pytest.raises(ValueError, match="no topic"):
        _message(bare, {"body": b"x"}, "d")
    assert dedup_prefix("w1") == ("spark:w1", 0)  # outside a Spark task
