"""benchmarks/lmq_wire.py against a real broker process on a small store: each round's
CPU is read once dispatch has caught up with its sends, so the rate through dispatch is
never above the rate of the sends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "lmq_wire.py"


@pytest.mark.slow
def test_lmq_wire_rounds_wait_for_dispatch(tmp_path: Path) -> None:
    out = tmp_path / "rounds.json"
    subprocess.run([sys.executable, str(SCRIPT), "--lmqs", "2000", "--messages", "3000",
                    "--rounds", "1", "--modes", "raw", "batched", "--built",
                    str(tmp_path / "built"), "--json", str(out)],
                   capture_output=True, text=True, timeout=300, check=True)
    rows = json.loads(out.read_text())
    assert [row["mode"] for row in rows] == ["raw", "batched"]
    for row in rows:
        assert 0 < row["dispatched_msgs_per_s"] <= row["msgs_per_s"]
        assert row["cpu_us_per_msg"] > 0 and row["threads"]
