"""``tidemq pipeline run``: the spark-submit command line and environment it builds.

A stand-in ``spark-submit`` (``$SPARK_HOME/bin/spark-submit``) records what it was given;
the real one is exercised by the Spark tests' run of the example."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from tests.cli.runner import CliRunner

import tidemq
from tidemq.cli.main import app

runner = CliRunner()
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "orders_pipeline.py"
SRC = str(Path(tidemq.__file__).resolve().parent.parent)


@pytest.fixture
def recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    record = tmp_path / "record.json"
    fake = home / "bin" / "spark-submit"
    fake.write_text(f"#!{sys.executable}\n"
                    "import json, os, sys\n"
                    f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, "
                    f"open({str(record)!r}, 'w'))\n"
                    "sys.exit(3)\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("SPARK_HOME", str(home))
    for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "TIDEMQ_NAMESRV"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    return record


def test_local_master_by_default_with_the_job_environment(recorder: Path) -> None:
    result = runner.invoke(app, ["pipeline", "run", str(SCRIPT), "-n", "10.0.0.5:9876",
                                 "--", "--output", "/tmp/out", "--available-now"])
    assert result.exit_code == 3  # the job's exit status
    seen = json.loads(recorder.read_text())
    assert seen["argv"] == ["--master", "local[*]", str(SCRIPT), "--output", "/tmp/out",
                            "--available-now"]
    env = seen["env"]
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["TIDEMQ_NAMESRV"] == "10.0.0.5:9876"
    assert env["PYTHONPATH"].split(os.pathsep) == [SRC, "/elsewhere"]


def test_other_masters_and_settings_pass_through(recorder: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python3")  # the caller's choice wins
    result = runner.invoke(app, ["pipeline", "run", str(SCRIPT), "--master",
                                 "spark://head:7077", "--conf",
                                 "spark.executor.memory=2g", "--", "--output", "hdfs:///o"])
    assert result.exit_code == 3
    seen = json.loads(recorder.read_text())
    assert seen["argv"] == ["--master", "spark://head:7077", "--conf",
                            "spark.executor.memory=2g", str(SCRIPT), "--output", "hdfs:///o"]
    assert seen["env"]["PYSPARK_PYTHON"] == "/opt/python3"
    assert "SPARK_LOCAL_IP" not in seen["env"]  # only local masters are pinned to loopback


def test_dry_run_prints_and_runs_nothing(recorder: Path) -> None:
    result = runner.invoke(app, ["pipeline", "run", str(SCRIPT), "--dry-run"])
    assert result.exit_code == 0
    assert not recorder.exists()
    assert f"--master local[*] {SCRIPT}" in result.output
    assert "PYSPARK_PYTHON=" in result.output


def test_bad_conf_and_missing_script(recorder: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["pipeline", "run", str(SCRIPT), "--conf", "novalue"])
    assert result.exit_code != 0 and not recorder.exists()
    result = runner.invoke(app, ["pipeline", "run", str(tmp_path / "missing.py")])
    assert result.exit_code != 0 and not recorder.exists()
