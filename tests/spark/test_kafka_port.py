"""A job written for Spark's Kafka source and sink, ported by changing the format (and
the bootstrap servers to the name server): same columns, same results."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tidemq.client.blocking import BlockingProducer, BlockingPullConsumer
from tidemq.types import Message, MessageQueue

from .conftest import Server, wait_visible

pytestmark = pytest.mark.spark


def kafka_job(spark: Any, fmt: str, servers: dict[str, str], topic_in: str,
              topic_out: str) -> list[Any]:
    """A Kafka user's batch job: upper-cased values written on. ``mode("append")`` is the
    one line more than a Kafka job needs: Spark lets Python data sources be written in
    append and overwrite modes only, where Kafka's default is ``errorifexists``."""
    df = (spark.read.format(fmt).options(**servers)
          .option("subscribe", topic_in)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .option("includeHeaders", "true").load())
    records = df.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                            "topic", "partition", "offset", "timestamp", "timestampType",
                            "headers")
    (records.selectExpr("key", "upper(value) AS value")
     .write.format(fmt).options(**servers).option("topic", topic_out).mode("append").save())
    return sorted(records.collect(), key=lambda r: (r.partition, r.offset))


def test_a_kafka_batch_job_runs_with_format_tidemq(spark: Any, server: Server) -> None:
    born = int(time.time() * 1000)
    with BlockingProducer("kafka-port", server.namesrv) as p:
        for i in range(12):
            p.send(Message("KafkaIn", f"v{i}".encode(), {"KEYS": f"k{i % 3}", "color": "red"}),
                   queue=MessageQueue("KafkaIn", "broker-a", i % 2))
    wait_visible(server, "KafkaIn", 12)
    servers = {"namesrv": server.namesrv, "schema": "kafka"}  # was kafka.bootstrap.servers
    rows = kafka_job(spark, "tidemq", servers, "KafkaIn", "KafkaOut")

    assert [(r.partition, r.offset) for r in rows] == \
        [(p, o) for p in (0, 1) for o in range(6)]
    assert [(r.key, r.value) for r in rows] == \
        [(f"k{i % 3}", f"v{i}") for i in (0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11)]
    assert {r.topic for r in rows} == {"KafkaIn"} and {r.timestampType for r in rows} == {0}
    assert all(born - 1000 <= r.timestamp.timestamp() * 1000 <= time.time() * 1000
               for r in rows)
    assert all(dict((h.key, h.value) for h in r.headers)["color"] == b"red" for r in rows)

    wait_visible(server, "KafkaOut", 12)
    back = (spark.read.format("tidemq").options(**servers).option("subscribe", "KafkaOut")
            .load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                               "partition").collect())
    assert sorted((r.key, r.value) for r in back) == \
        sorted((f"k{i % 3}", f"V{i}") for i in range(12))
    per_key = {r.key: {b.partition for b in back if b.key == r.key} for r in back}
    assert all(len(parts) == 1 for parts in per_key.values())  # one key, one partition


def test_kafka_options_at_planning(spark: Any, server: Server) -> None:
    with pytest.raises(Exception, match="is a Kafka option; use namesrv"):
        spark.read.format("tidemq").option("kafka.bootstrap.servers", "127.0.0.1:9092") \
            .option("subscribe", "KafkaPlan").load().collect()
    with BlockingProducer("kafka-plan", server.namesrv) as p:  # its own topic: any order
        for i in range(12):
            p.send(Message("KafkaPlan", f"v{i}".encode()),
                   queue=MessageQueue("KafkaPlan", "broker-a", i % 2))
    wait_visible(server, "KafkaPlan", 12)
    rows = (spark.read.format("tidemq").option("namesrv", server.namesrv)
            .option("assign", '{"KafkaPlan": [1]}').option("schema", "kafka")
            .option("maxRecordsPerPartition", "4").load())
    assert rows.rdd.getNumPartitions() >= 2
    assert sorted(r.offset for r in rows.collect() if r.partition == 1) == list(range(6))
    assert {r.partition for r in rows.collect()} == {1}


def test_offsets_by_timestamp_per_partition(spark: Any, server: Server) -> None:
    q0, q1 = MessageQueue("KafkaTs", "broker-a", 0), MessageQueue("KafkaTs", "broker-a", 1)
    with BlockingProducer("kafka-port-ts", server.namesrv) as p:
        for i in range(10):
            p.send(Message("KafkaTs", f"a{i}".encode()), queue=q0)
        for i in range(3):
            p.send(Message("KafkaTs", f"b{i}".encode()), queue=q1)
    wait_visible(server, "KafkaTs", 13)
    with BlockingPullConsumer("kafka-port-ts", server.namesrv) as c:
        stored = [m.store_timestamp for m in c.pull(q0, 0, 32).messages]
    at = stored[6]
    first = min(o for o, ts in enumerate(stored) if ts >= at)  # the broker's search rule

    def offsets(**options: str) -> list[tuple[int, int]]:
        rows = (spark.read.format("tidemq").option("namesrv", server.namesrv)
                .option("subscribe", "KafkaTs").option("schema", "kafka")
                .options(**options).load().collect())
        return sorted((r.partition, r.offset) for r in rows)

    assert offsets(startingOffsetsByTimestamp=f'{{"KafkaTs": {{"0": {at}}}}}') == \
        [(0, o) for o in range(first, 10)] + [(1, o) for o in range(3)]  # left out: earliest
    assert offsets(endingOffsetsByTimestamp=f'{{"KafkaTs": {{"broker-a:0": {at}}}}}') == \
        [(0, o) for o in range(first)] + [(1, o) for o in range(3)]  # left out: latest


def kafka_streaming_job(spark: Any, fmt: str, servers: dict[str, str], topic_in: str,
                        topic_out: str, checkpoint: str) -> Any:
    """A Kafka user's streaming job, unchanged but for the format and the servers: values
    upper-cased and written on by key, at most five records a micro-batch, until what
    was there at the start is done (availableNow)."""
    stream = (spark.readStream.format(fmt).options(**servers)
              .option("subscribe", topic_in).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "5").option("failOnDataLoss", "true").load())
    return (stream.selectExpr("CAST(key AS STRING) AS key",
                              "upper(CAST(value AS STRING)) AS value")
            .writeStream.format(fmt).options(**servers).option("topic", topic_out)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def test_a_kafka_streaming_job_runs_with_format_tidemq(spark: Any, server: Server,
                                                       tmp_path: Any) -> None:
    with BlockingProducer("kafka-stream-port", server.namesrv) as p:
        for i in range(12):
            p.send(Message("KafkaStreamIn", f"s{i}".encode(), {"KEYS": f"k{i % 4}"}),
                   queue=MessageQueue("KafkaStreamIn", "broker-a", i % 2))
    wait_visible(server, "KafkaStreamIn", 12)
    servers = {"namesrv": server.namesrv, "schema": "kafka"}  # was kafka.bootstrap.servers
    query = kafka_streaming_job(spark, "tidemq", servers, "KafkaStreamIn", "KafkaStreamOut",
                                str(tmp_path / "ckpt"))
    assert query.awaitTermination(180)
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(batches) == 12 and max(batches) <= 5  # maxOffsetsPerTrigger was obeyed

    wait_visible(server, "KafkaStreamOut", 12)
    back = (spark.read.format("tidemq").options(**servers).option("subscribe", "KafkaStreamOut")
            .load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                               "partition").collect())
    assert sorted((r.key, r.value) for r in back) == \
        sorted((f"k{i % 4}", f"S{i}") for i in range(12))
    per_key = {r.key: {b.partition for b in back if b.key == r.key} for r in back}
    assert all(len(parts) == 1 for parts in per_key.values())  # one key, one partition
