"""``tidemq bench batchcq``: a tiny run against a real broker process, and its helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard
from tests.cli.runner import CliRunner

from tidemq.bench.batchcq import PHASES, BatchCqBenchConfig, payloads, top_functions
from tidemq.cli.main import app

runner = CliRunner()


def test_payloads_are_compressible_and_sized() -> None:
    pool = payloads(BatchCqBenchConfig(size=128, batch=10), "T")
    bodies = [m.body for msgs in pool for m in msgs]
    assert {len(b) for b in bodies} == {128} and len(set(bodies)) == len(bodies)
    joined = b"".join(bodies)
    assert len(zstandard.ZstdCompressor().compress(joined)) < len(joined) // 3


@pytest.mark.parametrize(("change", "word"), [({"batch": 0}, "batch"),
                                              ({"batch": 40_000}, "32767"),
                                              ({"duration": 0}, "duration")])
def test_config_is_checked(change: dict[str, int], word: str) -> None:
    cfg = BatchCqBenchConfig(**change)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=word):
        cfg.check()


def test_top_functions_reads_collapsed_stacks(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text("main (a.py:1);f (a.py:5) 30\n"
                   "main (a.py:1);f (a.py:7) 10\n"
                   "main (a.py:1);g (b.py:2) 60\n"
                   "garbage\n")
    assert top_functions(str(raw)) == [("g (b.py)", 0.6), ("f (a.py)", 0.4)]
    assert top_functions(str(tmp_path / "missing.txt")) == []


@pytest.mark.slow
def test_one_run_measures_every_phase(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    result = runner.invoke(app, [
        "bench", "batchcq", "--batch", "20", "--queues", "2", "--in-flight", "4",
        "--duration", "0.5", "--warmup", "0.2", "--pull-batch", "200",
        "--broker-set", "mappedFileSizeCommitLog=16777216", "--data-dir", str(data_dir),
        "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert list(data["phases"]) == list(PHASES)
    for name, row in data["phases"].items():
        assert row["msgs"] > 0 and row["msgs_per_s"] > 0, (name, row)
        assert row["broker_ns_per_msg"] >= 0
    for phase in ("consume", "consume-columns", "consume-zstd", "consume-zstd-columns"):
        assert data["phases"][phase]["msgs"] == data["phases"][phase]["expected"], phase
    assert data["phases"]["consume-columns"]["body_bytes"] > 0
    produce = {name: data["phases"][name] for name in ("inner", "inner-zstd", "outer")}
    for name, row in produce.items():  # the commit log grew by at least the bodies
        assert row["log_bytes_per_msg"] > (128 if name != "inner-zstd" else 0), (name, row)
        assert "main" in {t["thread"] for t in row["broker_threads"]}, (name, row)
        assert row["broker_user_ns_per_msg"] > 0 and row["broker_sys_ns_per_msg"] >= 0
    # one record per batch against one per message; compressed bodies are smaller still
    assert (produce["inner-zstd"]["log_bytes_per_msg"] < produce["inner"]["log_bytes_per_msg"]
            < produce["outer"]["log_bytes_per_msg"])
    assert "inner broker user " in result.output
    assert data["ratios"]["columns_over_objects"] > 0
    assert data["ratios"]["inner_over_outer"] > 0
    assert "inner / outer" in result.output
    assert list(data_dir.iterdir()) == [], "the broker's data directory is left behind"
