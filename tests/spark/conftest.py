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

import pytest

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
    def __init__(self, namesrv: str, broker: str, proc: subprocess.Popen[bytes]) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self.proc = proc


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("tidemq")
    ns_port, broker_port = _free_port(), _free_port()
    log = open(data / "server.log", "wb")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "tidemq"), "standalone", "--data", str(data),
         "--namesrv-port", str(ns_port), "--broker-port", str(broker_port), "--no-console",
         "--set", "enableLmq=true", "--set", "enableMultiDispatch=true"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", broker_port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError((data / "server.log").read_text()) from None
            time.sleep(0.1)
    yield Server(f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}", proc)
    proc.terminate()
    proc.wait(30)
    log.close()


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
