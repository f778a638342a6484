"""benchmarks/rpc_floor.py end to end against a real broker process: both shapes are
measured, the request carrying a body costs the two processes more than the empty one
per request (it moves ~20 kB through both), and each shape's latency is reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rpc_floor.py"


@pytest.mark.slow
def test_rpc_floor_measures_both_shapes() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--duration", "0.5", "--warmup", "0.2", "--rounds", "1",
         "--in-flight", "8", "--body-bytes", "200000", "--json", "--uvloop"],
        capture_output=True, text=True, timeout=180, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result) == {"empty", "body"}
    for row in result.values():
        assert row["requests_per_s"] > 0
        assert row["client_us"] > 0 and row["total_us"] >= row["client_us"]
        assert 0 < row["p50_ms"] <= row["p99_ms"]
    assert result["body"]["total_us"] > result["empty"]["total_us"]
