"""``python -m tidemq`` and ``python -m tidemq.cli.main`` run the ``tidemq`` command (the
second printed nothing and exited 0 before)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["tidemq", "tidemq.cli.main"])
def test_the_module_runs_the_command(module: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "admin", "--help"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "updateTopic" in done.stdout
