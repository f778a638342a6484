"""``tidemq bench dispatch``: a tiny run of every part through the CLI."""

from __future__ import annotations

import gc
import json
from pathlib import Path

from tests.cli.runner import CliRunner

from tidemq.bench.dispatch import MODES, DispatchBenchConfig, run_dispatch_bench
from tidemq.broker.gc_settings import THRESHOLDS
from tidemq.cli.main import app

runner = CliRunner()


def test_dispatch_bench_measures_both_dispatchers_in_one_run(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    data_dir = tmp_path / "data"
    result = runner.invoke(app, [
        "bench", "dispatch", "--messages", "400", "--queues", "4", "--fanout", "2",
        "--lmqs", "8", "--rates", "200,400", "--seconds", "0.3", "--warmup", "0.1",
        "--repeat", "1", "--skip-gil", "--data-dir", str(data_dir), "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    for mode in MODES:
        assert data["backlog"][mode]["median_msgs_per_s"] > 0
        assert len(data["backlog"][mode]["runs"]) == 1
    assert data["backlog"]["median_ratio"] > 0
    rows = data["sustained"]["table"]
    assert [row["rate"] for row in rows] == [200, 400]
    first = rows[0]["serial"]
    assert first["runs"] == 1 and first["lag_p99_ms"] >= first["lag_p50_ms"] >= 0
    assert set(data["sustained"]["max_sustained"]) == set(MODES)
    assert "highest sustained rate" in result.output and "lag p50 / p99" in result.output
    assert list(data_dir.iterdir()) == [], "a store directory is left behind"


def test_dispatch_bench_rejects_bad_rates() -> None:
    result = runner.invoke(app, ["bench", "dispatch", "--rates", "10,x"])
    assert result.exit_code != 0
    assert "--rates" in result.output


def test_the_dispatchers_run_under_a_brokers_collector_settings(tmp_path: Path) -> None:
    """While the dispatchers run, the pre-built messages are frozen out of the collector's
    scans and the thresholds are a broker's: a full collection walking the benchmark's own
    objects stops the dispatcher for as long as it never stops in a broker. Each rate
    reports the collections it saw; the settings are restored after the run."""
    seen: list[tuple[tuple[int, ...], int]] = []
    cfg = DispatchBenchConfig(messages=400, queues=4, fanout=2, lmqs=8, rates=(200, 400),
                              seconds=0.2, warmup=0.1, repeat=1, gil=False,
                              directory=str(tmp_path / "data"))
    before = gc.get_threshold()
    result = run_dispatch_bench(
        cfg, lambda _line: seen.append((gc.get_threshold(), gc.get_freeze_count())))
    assert len(seen) == 6  # two backlog runs, two rates for each dispatcher
    for thresholds, frozen in seen:
        assert thresholds == THRESHOLDS
        assert frozen >= cfg.messages
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    for mode in MODES:
        for runs in result["sustained"]["runs"][mode].values():
            assert len(runs[0]["gc_collections"]) == 3 and runs[0]["gc_longest_ms"] >= 0
