"""benchmarks/page_cost.py end to end: one line per round, with positive figures, and the
file it wrote is gone afterwards."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "page_cost.py"


def test_page_cost_reports_every_round(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--mib", "8", "--rounds", "2", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=True)
    rounds = re.findall(r"round (\d): populate +([\d.]+) us kernel/page, copy +([\d.]+) "
                        r"us user/page, +(\d+) MB/s", out.stdout)
    assert [r[0] for r in rounds] == ["1", "2"]
    assert all(int(r[3]) > 0 for r in rounds)
    assert list(tmp_path.iterdir()) == []
