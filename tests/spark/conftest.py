"""Spark tests: one local[2] session for the whole run, a standalone TideMQ server in a
subprocess (Spark's Python workers are separate processes and reach it over TCP)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tidemq.client.blocking import BlockingProducer, BlockingPullConsumer
from tidemq.errors import TideMQError
from tidemq.types import Message, MessageQueue

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

SRC = str(Path(__file__).resolve().parents[2] / "src")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, namesrv: str, broker: str, proc: subprocess.Popen[bytes],
                 log: IO[bytes], data: Path) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self.proc = proc
        self.log = log
        self.data = data

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def start_standalone(data: Path, *settings: str) -> Server:
    """``tidemq standalone`` in a subprocess on free ports, with ``--set`` ``settings``."""
    ns_port, broker_port = _free_port(), _free_port()
    log = open(data / "server.log", "wb")  # noqa: SIM115 - closed by Server.stop
    cmd = [str(Path(sys.executable).parent / "tidemq"), "standalone", "--data", str(data),
           "--namesrv-port", str(ns_port), "--broker-port", str(broker_port), "--no-console",
           "--set", "haListenPort=0"]  # any free port: listenPort + 1 may be another's
    for item in settings:
        cmd += ["--set", item]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    server = Server(f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}", proc, log, data)
    deadline = time.monotonic() + 30
    with BlockingPullConsumer("probe", server.namesrv) as probe:
        while time.monotonic() < deadline:
            try:  # ready once the broker registered (with the default topic) by name
                probe.routes.fetch("TBW102")
                return server
            except TideMQError:
                if proc.poll() is not None:
                    server.stop()  # closes its log
                    raise RuntimeError((data / "server.log").read_text()) from None
                time.sleep(0.1)  # another process: nothing to wait on but its answers
    server.stop()
    raise RuntimeError("the standalone server did not get ready:\n"
                       + (data / "server.log").read_text())


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
        deadline = time.monotonic() + 10
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
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    from tidemq.spark import TideMQDataSource

    s.dataSource.register(TideMQDataSource)
    yield s
    for q in s.streams.active:
        q.stop()
    s.stop()
