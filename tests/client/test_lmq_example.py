"""``examples/lmq_inboxes.py`` runs against its own in-process cluster and exits 0."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from tidemq.testing import Cluster

EXAMPLE = Path(__file__).parents[2] / "examples" / "lmq_inboxes.py"


def test_lmq_inboxes_example_runs() -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "12/12 inboxes as expected" in proc.stdout
    assert "%LMQ%device-03 (ok):" in proc.stdout and "MISMATCH" not in proc.stdout


async def test_a_cluster_without_lmq_is_one_line_saying_so(tmp_path: Path) -> None:
    """Against a running cluster whose brokers have LMQ off, the example stops with the
    broker's refusal on one line, not a traceback."""
    async with Cluster(tmp_path, brokers=1) as cluster:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(EXAMPLE), "--namesrv", cluster.namesrv_addr,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 1, err
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert lines[0].startswith("error: MESSAGE_ILLEGAL(13)"), lines
    assert "enableLmq=true and enableMultiDispatch=true" in lines[0], lines
