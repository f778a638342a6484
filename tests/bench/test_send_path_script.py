"""benchmarks/send_path.py end to end: both paths measured; the script itself fails unless
the broker stored every message it was fed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "send_path.py"


def test_send_path_measures_both_paths() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--requests", "48", "--rounds", "2", "--batch", "20",
         "--json"],
        capture_output=True, text=True, timeout=180, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["batch"] == 20
    for mode in ("outer", "inner"):
        r = result[mode]
        assert len(r["rounds_wall_us"]) == 2
        assert r["wall_us"] > 0
        assert abs(r["ideal_msgs_per_s"] - 20 / r["wall_us"] * 1e6) < 1
        if result["perf"]:
            assert r["instructions"] > 1000 and r["cycles"] > 1000
