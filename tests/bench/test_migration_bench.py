"""``tidemq bench migration``: one short run through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.runner import CliRunner

from tidemq.cli.main import app

runner = CliRunner()


def test_migration_bench_reports_the_dip_and_the_first_write(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = runner.invoke(app, [
        "bench", "migration", "--queues", "2", "--warmup", "0.5", "--after", "1.5",
        "--in-flight", "4", "--repeat", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    med = data["median"]
    assert 0 < med["migrate_s"] < 5 and med["first_write_s"] >= 0
    assert med["produce_before"] > 0 and med["produce_after"] > 0
    assert data["config"]["queues"] == 2 and len(data["runs"]) == 1
    assert "first_write_s" in result.output and "produce msgs/s" in result.output
