"""benchmarks/replica_receive.py end to end: a replica copies the whole log, and the
calls counted per message are those of a receive path, not zero and not per byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "replica_receive.py"


@pytest.mark.slow
def test_replica_receive_counts_calls_per_message(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--batches", "30", "--frame", "65536",
                          "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["messages"] == 3000
    assert 0 < result["python_calls_per_msg"] < 5 and result["c_calls_per_msg"] > 0
    assert result["cpu_us_per_msg"] > 0
    assert list(tmp_path.iterdir()) == []  # the stores are removed
    assert "Traceback" not in out.stderr, out.stderr  # the copies end cleanly
