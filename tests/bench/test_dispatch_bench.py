"""``tidemq bench dispatch``: a tiny run of every part through the CLI."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest
from tests.cli.runner import CliRunner

from tidemq.bench.dispatch import MODES, DispatchBenchConfig, message_lags_ms, run_dispatch_bench
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


def test_every_message_put_gets_a_lag_finer_than_the_store_clock(tmp_path: Path) -> None:
    """Each message's lag runs from its put to the round that made it visible, on the
    monotonic clock: never zero (sampling the millisecond store clock read 0.0 ms at a
    low rate, where a round follows each put), one a message put."""
    cfg = DispatchBenchConfig(messages=200, queues=4, fanout=2, lmqs=8, rates=(300,),
                              seconds=0.3, warmup=0.1, repeat=1, gil=False,
                              directory=str(tmp_path / "data"))
    result = run_dispatch_bench(cfg)
    for mode in MODES:
        (run,) = result["sustained"]["runs"][mode]["300"]
        assert 0 < run["messages"] <= 300 * cfg.seconds + 1
        assert 0 < run["lag_p50_ms"] <= run["lag_p99_ms"] <= run["lag_max_ms"]
        assert run["lag_p50_ms"] != round(run["lag_p50_ms"])


def test_a_message_is_visible_at_the_first_round_past_its_number() -> None:
    put = np.array([100, 200, 300, 400], dtype=np.int64) * 1000
    # rounds: 11 records visible at 250 µs, 13 at 450 µs, 14 at 1000 µs
    records = np.array([11, 13, 14], dtype=np.int64)
    at = np.array([250, 450, 1000], dtype=np.int64) * 1000
    lags = message_lags_ms(put, 10, records, at)
    assert lags.tolist() == [0.15, 0.25, 0.15, 0.6]
    with pytest.raises(ValueError, match="message 14 was never visible"):
        message_lags_ms(np.append(put, 500_000), 10, records, at)


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
