"""benchmarks/dispatch_round.py: the dispatch thread's opcodes for rounds of one put."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dispatch_round.py"


def test_dispatch_round_counts_the_rounds() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--puts", "20", "--top", "100"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    total = re.search(r"^dispatch thread: ([\d,]+) opcodes a round of one put$", out, re.M)
    assert total is not None, out
    assert int(total[1].replace(",", "")) > 100  # a round is hundreds of steps, not none
    assert "consume_queue.py:" in out  # the round wrote the put's queue entry
