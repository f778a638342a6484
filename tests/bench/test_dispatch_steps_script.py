"""benchmarks/dispatch_steps.py: a round's bytecodes, wake-ups and CPU per dispatcher."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dispatch_steps.py"


def test_dispatch_steps_counts_both_dispatchers() -> None:
    """Both dispatchers' threads are reported, and a concurrent round of one put runs
    about the serial one's bytecodes (not the pipeline's bookkeeping on top)."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--per-round", "1", "--rounds", "40",
                          "--warm", "200"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    opcodes = {}
    for mode in ("serial", "concurrent"):
        block = out.split(f"{mode}: rounds of 1 put(s), a round:\n", 1)[1]
        line = re.search(r"^  tidemq-dispatch +([\d,]+) opcodes +[\d.]+ wake-ups +[\d,]+ µs CPU$",
                         block, re.M)
        assert line is not None, out
        opcodes[mode] = int(line[1].replace(",", ""))
    assert "tidemq-commit" in out
    assert opcodes["serial"] > 100, out  # a round is hundreds of steps, not none
    assert opcodes["concurrent"] <= 1.15 * opcodes["serial"], opcodes


def test_dispatch_steps_lists_the_costliest_functions() -> None:
    """``--top`` names each function with its thread, and the threads' totals remain."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--per-round", "4", "--rounds", "5",
                          "--warm", "100", "--modes", "concurrent", "--top", "5"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    listed = re.findall(r"^ +[\d,]+  (tidemq-\S+) (\S+\.py:\S+)$", out, re.M)
    assert 1 <= len(listed) <= 5, out
    assert re.search(r"^  tidemq-dispatch +[\d,]+ opcodes", out, re.M), out
