"""benchmarks/send_tail.py against a real broker process: every measured send is split
into its five steps on the two processes' shared clock, and the dispatch rounds and the
steps of the store's other threads the broker stamped are reported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "send_tail.py"


@pytest.mark.slow
def test_send_tail_splits_the_sends() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--duration", "0.5", "--warmup", "0.2"],
                         capture_output=True, text=True, timeout=180, check=True).stdout
    sends = re.search(r"^([\d,]+) sends: p50 ([\d.]+) ms, p99 ([\d.]+) ms", out, re.M)
    assert sends is not None, out
    assert int(sends[1].replace(",", "")) > 0
    assert 0 < float(sends[2]) <= float(sends[3])
    for part in ("build", "to broker", "broker", "to client", "finish"):
        row = re.search(rf"^{part} +([\d.]+) +([\d.]+)$", out, re.M)
        assert row is not None, (part, out)
        assert 0 <= float(row[1]) <= float(row[2])
    assert re.search(r"^dispatch rounds: [\d,]+, median [\d.]+ µs", out, re.M), out
    for thread in ("warmer", "housekeeper", "flusher"):
        assert re.search(rf"^  the {thread} thread: [\d,]+ steps", out, re.M), (thread, out)
    assert re.search(r"^  written while a dispatch round ran", out, re.M), out
