"""benchmarks/acl_gate.py end to end: the producer's batch it signs passes the broker's
gate (a refusal would end the script with an error), and each timing is reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "acl_gate.py"


def test_acl_gate_times_sign_check_and_their_floor() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--batch", "10", "--body-bytes", "64", "--number", "20",
         "--rounds", "2", "--json"],
        capture_output=True, text=True, timeout=180, check=True)
    assert out.stderr == ""
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["request_bytes"] > 10 * 64
    assert result["sign_us"] > 0 and result["check_us"] > 0 and result["hmac_us"] > 0


def test_the_counting_mode_checks_quietly() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--count", "5"],
                         capture_output=True, text=True, timeout=180, check=True)
    assert (out.stdout, out.stderr) == ("", "")
