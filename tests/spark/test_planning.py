"""What the source and sink decide before any task runs, against a live server: reads
that find nothing, offsets naming queues that do not exist, ends beyond a queue's end,
schemas that cannot be served or written."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.blocking import BlockingPullConsumer
from tidemq.errors import TideMQError

from .conftest import Server, produce, wait_visible

pytestmark = pytest.mark.spark


def create_topic(server: Server, topic: str, queues: int = 2) -> None:
    async def create() -> None:
        async with AdminClient(config=ClientConfig(namesrv_addr=(server.namesrv,))) as admin:
            await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    asyncio.run(create())
    with BlockingPullConsumer("probe", server.namesrv) as c:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the broker registers the topic's route
            try:
                if c.queues(topic):
                    return
            except TideMQError:  # no route yet
                time.sleep(0.05)
    raise AssertionError(f"{topic} got no route")


def read(spark: Any, server: Server, **options: str) -> Any:
    return spark.read.format("tidemq").option("namesrv", server.namesrv) \
        .options(**options).load()


def test_reads_that_find_nothing_give_an_empty_dataframe(spark: Any, server: Server) -> None:
    create_topic(server, "PlanEmpty")
    produce(server, "PlanSome", 6)
    wait_visible(server, "PlanSome", 6)
    future = str(int(time.time() * 1000) + 3_600_000)
    now = str(int(time.time() * 1000))
    for options in ({"topic": "PlanEmpty"},
                    {"topicPattern": "NoSuchTopic.*"},
                    {"topic": "PlanSome", "startingTimestamp": future},
                    {"topic": "PlanSome", "startingTimestamp": now, "endingTimestamp": "1"}):
        df = read(spark, server, **options)
        assert df.collect() == [], options
        assert df.count() == 0, options
    assert read(spark, server, topic="PlanSome").count() == 6  # the same topic has rows


def test_offsets_naming_what_does_not_exist_fail_at_planning(spark: Any,
                                                             server: Server) -> None:
    produce(server, "PlanOffsets", 8, queue=0)
    wait_visible(server, "PlanOffsets", 8)
    cases = [
        ("startingOffsets", {"PlanOffset": {"broker-a:0": 1}}, "its topics: PlanOffsets"),
        ("startingOffsets", {"PlanOffsets": {"broker-x:0": 1}}, "no broker 'broker-x'"),
        ("endingOffsets", {"PlanOffsets": {"broker-a:99": 1}}, "no queue broker-a:99"),
        ("endingOffsets", {"PlanOffsets": {"broker-a:0": 9}},
         "broker-a:0: 9 is beyond the queue's end 8"),
    ]
    for option, offsets, message in cases:
        with pytest.raises(Exception, match=message):
            read(spark, server, topic="PlanOffsets", **{option: json.dumps(offsets)}).collect()
    rows = read(spark, server, topic="PlanOffsets",
                startingOffsets='{"PlanOffsets": {"broker-a:0": 2}}',
                endingOffsets='{"PlanOffsets": {"broker-a:0": 8}}').collect()
    assert sorted(r.offset for r in rows) == list(range(2, 8))


def test_a_read_schema_that_cannot_be_served_is_refused(spark: Any, server: Server) -> None:
    produce(server, "PlanSchema", 2)
    wait_visible(server, "PlanSchema", 2)

    def reader() -> Any:  # a DataFrameReader keeps the schema it was given: a new one
        return spark.read.format("tidemq").option("namesrv", server.namesrv) \
            .option("topic", "PlanSchema")

    with pytest.raises(Exception, match="serves exactly"):
        reader().schema("body string, offset long").load().collect()
    served = reader().load().schema
    assert len(reader().schema(served).load().collect()) == 2  # the served one is accepted


def test_the_sink_checks_its_input_before_sending_anything(spark: Any,
                                                           server: Server) -> None:
    good = [(f"b{i}", f"k{i}") for i in range(4)]
    df = spark.createDataFrame(good, "payload string, keys string").repartition(2)
    with pytest.raises(Exception, match="exactly one of the columns body"):
        df.write.format("tidemq").option("namesrv", server.namesrv) \
            .option("topic", "PlanSinkOut").mode("append").save()
    typed = spark.createDataFrame([(1, "k")], "body int, keys string")
    with pytest.raises(Exception, match="sink column body is int"):
        typed.write.format("tidemq").option("namesrv", server.namesrv) \
            .option("topic", "PlanSinkOut").mode("append").save()
    with BlockingPullConsumer("probe", server.namesrv) as c, pytest.raises(TideMQError):
        c.queues("PlanSinkOut")  # nothing was sent: the topic was never even created
