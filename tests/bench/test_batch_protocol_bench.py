"""``tidemq bench batchproto``: its config checks, and a tiny run against a real broker
process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.cli.runner import CliRunner

from tidemq.bench.batch_protocol import BatchProtoBenchConfig, target_met
from tidemq.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(("change", "word"), [({"messages": 0}, "messages"),
                                              ({"consume_queues": ()}, "consume_queues"),
                                              ({"produce_seconds": 0}, "produce_seconds")])
def test_config_is_checked(change: dict[str, Any], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        BatchProtoBenchConfig(**change).check()


def test_the_target_needs_both_ratios() -> None:
    assert target_met({"speedup": 3.0, "rpc_reduction": 10.0})
    assert not target_met({"speedup": 2.9, "rpc_reduction": 64.0})
    assert not target_met({"speedup": 5.0, "rpc_reduction": 9.0})


@pytest.mark.slow
def test_one_run_compares_both_modes_of_every_workload(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    result = runner.invoke(app, [
        "bench", "batchproto", "--consume-queues", "4", "--produce-queues", "4",
        "--messages", "400", "--produce-seconds", "0.3", "--repeat", "1",
        "--broker-set", "mappedFileSizeCommitLog=16777216", "--data-dir", str(data_dir),
        "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert list(data["results"]) == ["consume-4", "consume-raw-4", "produce-4",
                                     "produce-raw-4"]
    for name, res in data["results"].items():
        off, on = res["off"], res["on"]
        assert off["msgs"] > 0 and on["msgs"] > 0, name
        assert on["rpcs"] < off["rpcs"], (name, on["rpcs"], off["rpcs"])
        assert res["rpc_reduction"] > 1
    assert data["results"]["consume-4"]["on"]["msgs"] == 400


@pytest.mark.slow
def test_columns_adds_a_consume_workload(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = runner.invoke(app, [
        "bench", "batchproto", "--consume-queues", "4", "--produce-queues", "4",
        "--messages", "400", "--produce-seconds", "0.3", "--repeat", "1", "--columns",
        "--broker-set", "mappedFileSizeCommitLog=16777216", "--data-dir", str(tmp_path),
        "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert list(data["results"])[:3] == ["consume-4", "consume-columns-4", "consume-raw-4"]
    assert data["results"]["consume-columns-4"]["on"]["msgs"] == 400
