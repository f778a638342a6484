"""``tidemq bench store``: a tiny run of every workload, in process."""

from __future__ import annotations

from pathlib import Path

from tidemq.bench.store import WORKLOADS, StoreBenchConfig, run_store_bench


def test_every_workload_reports_a_rate_and_cpu_per_message(tmp_path: Path) -> None:
    cfg = StoreBenchConfig(messages=3000, batch=50, queues=4, read_batch=100, appenders=4,
                           sync_seconds=0.3, segment_size=8 * 1024 * 1024,
                           directory=str(tmp_path), repeat=1)
    seen: list[str] = []
    results = run_store_bench(cfg, report=lambda name, run: seen.append(name))
    assert seen == list(WORKLOADS)
    for name, res in results.items():
        (run,) = res["runs"]
        key = "entries_per_s" if name == "dispatch" else "msgs_per_s"
        assert run[key] > 0 and res["median_" + key] == run[key]
        assert run["cpu_us"] > 0
    assert results["append"]["runs"][0]["messages"] == 3000
    assert results["read"]["runs"][0]["messages"] == 3000
    assert results["read"]["runs"][0]["passes"] == cfg.read_passes
    assert results["sync_flush"]["runs"][0]["acked"] > 0
