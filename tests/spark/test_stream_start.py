"""start_stream: a streaming query whose source's Python process did not connect back
within Spark's fixed wait is started again from its checkpoint and reads everything.

The fault is real: ``format("tidemq")`` is registered for the test with a Python
executable that, the first time it is asked to start pyspark's streaming source
runner, sleeps past Spark's 10 s before starting Python (a machine too busy to start
an interpreter in time)."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tidemq.spark import TideMQDataSource
from tidemq.spark.stream_start import ATTEMPTS_CONF, DEFAULT_ATTEMPTS, start_stream

from .conftest import Server, produce, wait_visible

pytestmark = pytest.mark.spark

_SLOW_ONCE = """#!/bin/sh
case "$*" in
  *streaming_source_runner*) mkdir "{mark}" 2>/dev/null && sleep 11 ;;
esac
exec "{python}" "$@"
"""


@contextmanager
def slow_first_runner(spark: Any, tmp_path: Path) -> Iterator[Path]:
    """``format("tidemq")`` whose first streaming source runner starts too late; yields
    the directory made when that happened."""
    mark = tmp_path / "missed"
    exe = tmp_path / "python-slow-once"
    exe.write_text(_SLOW_ONCE.format(mark=mark, python=os.environ.get("PYSPARK_PYTHON",
                                                                      sys.executable)))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    sc = spark.sparkContext
    python = sc.pythonExec
    sc.pythonExec = str(exe)  # captured by the registration below, and only by it
    try:
        spark.dataSource.register(TideMQDataSource)
    finally:
        sc.pythonExec = python
    try:
        yield mark
    finally:
        spark.dataSource.register(TideMQDataSource)  # the session's own again


def test_a_stream_whose_source_missed_the_connect_wait_is_started_again(
        spark: Any, server: Server, tmp_path: Path) -> None:
    """Into the memory sink with a checkpoint: the sink Spark refuses to recover from a
    checkpoint once its offsets directory exists, which the missed start leaves behind
    (empty: nothing was read)."""
    produce(server, "SlowStart", 8)
    wait_visible(server, "SlowStart", 8)
    with slow_first_runner(spark, tmp_path) as missed:
        writer = (spark.readStream.format("tidemq").option("namesrv", server.namesrv)
                  .option("topic", "SlowStart").option("startingOffsets", "earliest").load()
                  .selectExpr("cast(body as string) as body")
                  .writeStream.format("memory").queryName("slow_start")
                  .option("checkpointLocation", str(tmp_path / "ckpt"))
                  .trigger(availableNow=True))
        # The first start is made to miss Spark's wait; every later one is a real start
        # of Python, which a loaded machine can make miss it as well: the query gets
        # the default number of real starts after the missed one (with one, a start
        # that took over 10 s at load ~20 failed the test).
        spark.conf.set(ATTEMPTS_CONF, str(1 + DEFAULT_ATTEMPTS))
        try:
            query = start_stream(writer)
        finally:
            spark.conf.unset(ATTEMPTS_CONF)
        assert query.awaitTermination(120)
    assert missed.is_dir(), "the first runner was not delayed: the test tested nothing"
    assert query.exception() is None
    bodies = [row.body for row in spark.table("slow_start").collect()]
    assert sorted(bodies) == sorted(f"m{i}" for i in range(8))


@pytest.mark.parametrize("value", ["0", "many"])
def test_a_bad_attempts_setting_is_refused_naming_the_key(spark: Any, value: str,
                                                          tmp_path: Path) -> None:
    writer = (spark.readStream.format("rate").load().writeStream.format("noop")
              .option("checkpointLocation", str(tmp_path / "ckpt")))
    spark.conf.set(ATTEMPTS_CONF, value)
    try:
        with pytest.raises(ValueError, match=ATTEMPTS_CONF):
            start_stream(writer)
    finally:
        spark.conf.unset(ATTEMPTS_CONF)
    assert not spark.streams.active  # refused before anything started
