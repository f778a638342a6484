"""benchmarks/dispatch_cost.py and benchmarks/dispatch_rounds.py: one round applied each
way, and a paced run's rounds, through the scripts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_dispatch_cost_applies_a_round_each_way() -> None:
    for way in ("serial", "columns", "prepare", "put"):
        out = subprocess.run([sys.executable, str(BENCHMARKS / "dispatch_cost.py"), "--way",
                              way, "--per-round", "32", "--rounds", "2"],
                             capture_output=True, text=True, timeout=300, check=True).stdout
        got = re.search(rf"^{way}: rounds of 32 puts, ([\d.]+) CPU µs a record", out, re.M)
        assert got is not None and float(got[1]) > 0, out


def test_dispatch_rounds_records_the_rounds_of_a_paced_run() -> None:
    out = subprocess.run([sys.executable, str(BENCHMARKS / "dispatch_rounds.py"), "--rates",
                          "500", "--seconds", "0.5", "--set", "dispatch_round_records=64"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    for mode, kind in (("serial", "serial"), ("concurrent", "inline")):
        block = out.split(f"{mode} at 500/s:", 1)[1]
        rounds = re.search(rf"^  {kind} +(\d+) rounds", block, re.M)
        assert rounds is not None and int(rounds[1]) > 0, out
        assert "wake-ups" in block and "CPU µs a message by thread" in block, out
