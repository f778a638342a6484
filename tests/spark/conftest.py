"""Spark tests: one local[2] session for the whole run, a standalone TideMQ server in a
subprocess (Spark's Python workers are separate processes and reach it over TCP)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.child_server import SMALL_SEGMENT, ChildServer, free_ports

from tidemq.client.blocking import BlockingProducer, BlockingPullConsumer
from tidemq.errors import TideMQError
from tidemq.types import Message, MessageQueue

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

SRC = str(Path(__file__).resolve().parents[2] / "src")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)


class Server(ChildServer):
    """``tidemq standalone`` without a console on free ports."""

    def __init__(self, data: Path, *settings: str) -> None:
        ns_port, broker_port = free_ports(2)
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.broker = f"127.0.0.1:{broker_port}"
        self.data = data
        super().__init__(
            "standalone", {"haListenPort": "0", "mappedFileSizeCommitLog": SMALL_SEGMENT,
                           **dict(item.split("=", 1) for item in settings)},
            ["--data", str(data), "--namesrv-port", str(ns_port),
             "--broker-port", str(broker_port), "--no-console"],
            ready="TideMQ standalone is running")


def start_standalone(data: Path, *settings: str) -> Server:
    """``tidemq standalone`` in a subprocess on free ports, with ``--set`` ``settings``;
    returned once its broker is registered (the name server routes TBW102 by then)."""
    server = Server(data, *settings).start(60)
    with BlockingPullConsumer("probe", server.namesrv) as probe:
        probe.routes.fetch("TBW102")
    return server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_standalone(tmp_path_factory.mktemp("tidemq"), "enableLmq=true",
                         "enableMultiDispatch=true")
    yield s
    s.stop()


def produce(server: Server, topic: str, n: int, *, start: int = 0, tags: str = "t",
            queue: int | None = None) -> None:
    """Messages ``m<start>`` .. with keys ``k<i>``, round robin or all to ``queue``."""
    mq = MessageQueue(topic, "broker-a", queue) if queue is not None else None
    with BlockingProducer("spark-test-producer", server.namesrv) as p:
        for i in range(start, start + n):
            p.send(Message(topic, f"m{i}".encode(), {"TAGS": tags, "KEYS": f"k{i}"}),
                   queue=mq)


def wait_visible(server: Server, topic: str, total: int) -> None:
    with BlockingPullConsumer("probe", server.namesrv) as c:
        deadline = time.monotonic() + 60  # a bound for a busy machine, not a wait
        while time.monotonic() < deadline:
            try:  # the route appears once the broker has re-registered the new topic
                if sum(c.get_max_offset(q) for q in c.queues(topic)) >= total:
                    return
            except TideMQError:
                pass
            time.sleep(0.05)
    raise AssertionError(f"{topic}: fewer than {total} messages became visible")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("tidemq-tests")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.default.parallelism", "2")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("wh")))
         .config("spark.sql.streaming.stopTimeout", "10s")
         # The tests run many small jobs, each planned and compiled once: the JVM's
         # optimising compiler and parallel collector cost more CPU than they return.
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
         # A Python worker connecting to a busy JVM may wait long for it to accept.
         .config("spark.python.authenticate.socketTimeout", "120s")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    from tidemq.spark import TideMQDataSource

    s.dataSource.register(TideMQDataSource)
    yield s
    for q in s.streams.active:
        q.stop()
    s.stop()
