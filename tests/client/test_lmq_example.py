"""``examples/lmq_inboxes.py`` runs against its own in-process cluster and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "lmq_inboxes.py"


def test_lmq_inboxes_example_runs() -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "12/12 inboxes as expected" in proc.stdout
    assert "%LMQ%device-03 (ok):" in proc.stdout and "MISMATCH" not in proc.stdout
