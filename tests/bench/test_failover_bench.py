"""``tidemq bench failover``: one short run through the CLI (real processes)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.runner import CliRunner

from tidemq.cli.main import app

runner = CliRunner()


def test_failover_bench_reports_the_election_and_the_first_acknowledgement(
        tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = runner.invoke(app, ["bench", "failover", "--repeat", "1", "--warmup", "20",
                                 "--lease-ms", "1500", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    (run,) = data["runs"]
    assert 0 < run["elected_s"] <= run["failover_s"] and run["attempts"] >= 1
    assert data["config"]["lease_ms"] == 1500
    assert "failover_s" in result.output and "first ack s" in result.output
