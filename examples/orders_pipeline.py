"""Orders pipeline: a TideMQ topic through Spark Structured Streaming into a TideMQ topic
and Parquet.

Reads JSON orders ``{"order_id": 7, "customer": "ada", "amount": 12.5,
"event_time": "2024-05-01T12:00:03Z"}`` from the ``orders`` topic, counts and sums them
per customer in one-minute event-time windows with a watermark, and writes each window
once the watermark has passed its end:

* to the ``order_totals`` topic (the tidemq sink): one JSON message per (window,
  customer), keyed by customer. The topic sink is **at-least-once**: a micro-batch
  replayed after a failure is sent again, and its messages carry the same
  ``SPARK_DEDUP_KEY`` property, so a consumer can drop the copies;
* to Parquet under ``--output``: one directory per micro-batch (``batch_id=N``),
  overwritten if the batch is replayed, so the files hold every window exactly once.

Run it with the cluster's name server (``TIDEMQ_NAMESRV`` or ``--namesrv``)::

    tidemq pipeline run examples/orders_pipeline.py -- --output /tmp/orders
    tidemq pipeline run examples/orders_pipeline.py --master spark://host:7077 \\
        --namesrv 10.0.0.5:9876 -- --output hdfs:///pipelines/orders

or with ``spark-submit`` directly (see docs/spark.md)::

    PYSPARK_PYTHON=.venv/bin/python spark-submit --master 'local[*]' \\
        examples/orders_pipeline.py --namesrv 127.0.0.1:9876 --output /tmp/orders

or with plain ``python`` (the master is then ``local[*]``).

``--available-now`` processes what the topic holds and stops (a scheduled job); without
it the query runs every ``--interval`` until stopped. Progress lives in ``--checkpoint``
(default ``<output>/_checkpoint``): a restart carries on where the last run stopped.
Windows are written once the watermark passes their end, so the newest window waits for
later orders (or the next run).

``--shuffle-partitions`` (default 4) sets ``spark.sql.shuffle.partitions`` for the
window aggregation. Spark's default of 200 means 200 tasks for every micro-batch, each
with its own state store, which dominates a small job's run time; and the first run
writes the number into the checkpoint, so a restarted query keeps it whatever the
setting says then. Choose it before the first run: a few per executor core.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
from pyspark.sql.streaming import StreamingQuery

from tidemq.spark import TideMQDataSource
from tidemq.spark.stream_start import start_stream

ORDER_SCHEMA = "order_id long, customer string, amount double, event_time timestamp"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--namesrv", default=os.environ.get("TIDEMQ_NAMESRV", "127.0.0.1:9876"),
                   help="name server address (default: $TIDEMQ_NAMESRV or 127.0.0.1:9876)")
    p.add_argument("--orders-topic", default="orders")
    p.add_argument("--totals-topic", default="order_totals")
    p.add_argument("--output", required=True, help="Parquet directory (any Hadoop path)")
    p.add_argument("--checkpoint", help="checkpoint directory (default <output>/_checkpoint)")
    p.add_argument("--window", default="1 minute", help="event-time window length")
    p.add_argument("--watermark", default="1 minute",
                   help="how late an order may arrive and still count")
    p.add_argument("--starting-offsets", default="earliest",
                   help="where a new query starts: earliest, latest or offsets JSON")
    p.add_argument("--max-offsets-per-trigger", type=int,
                   help="at most this many orders per micro-batch")
    p.add_argument("--available-now", action="store_true",
                   help="process what is there, then stop")
    p.add_argument("--interval", default="10 seconds", help="micro-batch interval")
    p.add_argument("--shuffle-partitions", type=int, default=4,
                   help="spark.sql.shuffle.partitions of the aggregation; fixed by the "
                        "checkpoint at the first run (default 4)")
    return p.parse_args(argv)


def read_orders(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    reader = (spark.readStream.format("tidemq").option("namesrv", args.namesrv)
              .option("topic", args.orders_topic)
              .option("startingOffsets", args.starting_offsets))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    raw = reader.load()
    parsed = raw.select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o"))
    return parsed.select("o.*").where(F.col("event_time").isNotNull())


def window_totals(orders: DataFrame, args: argparse.Namespace) -> DataFrame:
    return (orders.withWatermark("event_time", args.watermark)
            .groupBy(F.window("event_time", args.window), "customer")
            .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("amount"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "customer", "orders", "amount"))


def publisher(args: argparse.Namespace) -> Any:
    """The ``foreachBatch`` function: Parquet (per batch, replay-safe), then the topic."""

    def publish(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            if batch.isEmpty():
                return
            batch.write.mode("overwrite").parquet(f"{args.output}/batch_id={batch_id}")
            messages = batch.select(
                F.to_json(F.struct(F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX")
                                   .alias("window_start"),
                                   F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ssXXX")
                                   .alias("window_end"),
                                   "customer", "orders", "amount")).alias("body"),
                F.col("customer").alias("keys"), F.lit("window").alias("tags"))
            (messages.write.format("tidemq").option("namesrv", args.namesrv)
             .option("topic", args.totals_topic).mode("append").save())
        finally:
            batch.unpersist()

    return publish


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    spark.dataSource.register(TideMQDataSource)
    spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    writer = (window_totals(read_orders(spark, args), args).writeStream
              .outputMode("append").foreachBatch(publisher(args))
              .option("checkpointLocation", args.checkpoint or f"{args.output}/_checkpoint")
              .queryName("orders_pipeline"))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.interval)
    # writer.start(), started again if Spark gave up waiting for the source's Python
    # process on a busy machine (docs/spark.md, Streaming)
    return start_stream(writer)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    builder = SparkSession.builder.appName("tidemq-orders-pipeline")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # plain ``python``, not spark-submit
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    query = start(spark, args)
    try:
        query.awaitTermination()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
