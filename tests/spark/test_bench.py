"""``tidemq bench spark`` end to end on a small topic (the session's Spark and server)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tidemq.bench.spark import (
    SparkBenchConfig,
    master_cores,
    run_spark_bench,
    tree_cpu_seconds,
)

from .conftest import Server

pytestmark = pytest.mark.spark


def test_bench_reports_rates_cpu_and_verdicts(spark: Any, server: Server) -> None:
    lines: list[str] = []
    cfg = SparkBenchConfig(messages=3000, queues=2, batch=500, producers=2, repeat=1,
                           topic="BenchSparkSmall", namesrv=server.namesrv)
    result = run_spark_bench(cfg, lines.append)
    assert result["fill"]["msgs_per_s"] > 0
    assert result["raw"]["workers"] == 2  # as many readers as local[2] runs tasks
    for res in (result["raw"], result["spark"]["noop"], result["spark"]["count"]):
        assert res["median_rows_per_s"] > 0 and len(res["runs"]) == 1
    assert set(result["spark"]["noop"]["cpu_us_per_row"]) == {"spark", "jvm"}
    assert result["spark"]["noop"]["cpu_us_per_row"]["spark"] > 0
    assert set(result["verdicts"]) == {"spark_rows_per_s", "spark_over_raw"}
    assert any(line.startswith("spark noop run 1") for line in lines)
    assert spark.range(3).count() == 3  # the session it found is still running


def test_raw_readers_match_the_tasks_spark_runs_at_once() -> None:
    assert [master_cores(m) for m in ("local", "local[3]", "local[4, 2]")] == [1, 3, 4]
    assert master_cores("local[*]") >= 1 and master_cores("spark://h:7077") == 2


BUSY = """
import sys, time
t = time.process_time()
while time.process_time() - t < 0.3:
    pass
print("burned", flush=True)
sys.stdin.read()
"""

PARENT = """
import subprocess, sys, threading
def run():
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    print(child.stdout.readline(), end="", flush=True)
    child.communicate(sys.stdin.read())
threading.Thread(target=run).start()
"""


def test_tree_cpu_counts_live_children_forked_by_any_thread() -> None:
    proc = subprocess.Popen([sys.executable, "-c", PARENT, BUSY], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "burned\n"
        assert tree_cpu_seconds(proc.pid) >= 0.3  # the child of a non-main thread
    finally:
        proc.communicate("")
