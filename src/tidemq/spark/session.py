"""A Spark session set up for the tidemq source (benchmarks, scripts, notebooks).

:func:`spark_session` puts :func:`tidemq.spark.launch.job_environment` into this process's
environment (Spark's Python workers inherit it), builds or reuses the session with quiet
defaults (no UI, no progress bars, loopback addresses for ``local`` masters) and registers
:class:`~tidemq.spark.source.TideMQDataSource` as ``format("tidemq")``.
:func:`session_scope` does the same and stops the session on exit, unless it was running
already.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql import SparkSession

from tidemq.spark.launch import is_local, job_environment
from tidemq.spark.source import TideMQDataSource

__all__ = ["jvm_pid", "session_scope", "spark_session", "timed_read"]

QUIET = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}
LOOPBACK = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def spark_session(master: str = "local[2]", app_name: str = "tidemq",
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    os.environ.update(job_environment(master))
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {**QUIET, **(LOOPBACK if is_local(master) else {}), **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TideMQDataSource)
    return spark


@contextlib.contextmanager
def session_scope(master: str = "local[2]", app_name: str = "tidemq",
                  conf: Mapping[str, str] | None = None) -> Iterator[SparkSession]:
    """:func:`spark_session`, stopped on exit unless it was already running."""
    existed = SparkSession.getActiveSession() is not None
    spark = spark_session(master, app_name, conf)
    try:
        yield spark
    finally:
        if not existed:
            spark.stop()


def jvm_pid(spark: SparkSession) -> int:
    """The driver JVM's process id (Python workers of a local master are its children)."""
    jvm: Any = spark.sparkContext._jvm
    return int(jvm.java.lang.ProcessHandle.current().pid())


def timed_read(spark: SparkSession, options: Mapping[str, str], sink: str = "noop"
               ) -> tuple[int, float]:
    """One batch read of ``format("tidemq")`` with ``options`` into ``sink`` (``noop``:
    every row through a sink that drops it; ``count``: ``DataFrame.count()``); returns
    (rows, wall seconds of the job)."""
    df = spark.read.format("tidemq").options(**options).load()
    start = time.perf_counter()
    if sink == "count":
        rows = df.count()
    elif sink == "noop":
        df.write.format("noop").mode("overwrite").save()
        rows = -1
    else:
        raise ValueError(f"sink must be noop or count, not {sink!r}")
    return rows, time.perf_counter() - start
