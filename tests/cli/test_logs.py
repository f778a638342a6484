"""``--log-format json``: one JSON object per line, extra fields and tracebacks kept; the
rotating file gets the same lines."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemq.cli.logs import JsonFormatter, setup_logging


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_fields_extras_and_tracebacks(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    log_file = tmp_path / "logs" / "tidemq.log"
    setup_logging("INFO", log_file, log_format="json")
    log = logging.getLogger("tidemq.test")
    log.info("broker %s up", "broker-a", extra={"port": 10911, "addr": object()})
    log.debug("not shown")
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("it failed")
    lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["message"] for r in records] == ["broker broker-a up", "it failed"]
    first = records[0]
    assert first["level"] == "INFO" and first["logger"] == "tidemq.test"
    assert first["port"] == 10911 and first["addr"].startswith("<object")
    assert first["ts"].endswith("+00:00") and "T" in first["ts"]
    assert "ValueError: bad" in records[1]["exc"]
    in_file = log_file.read_text("utf-8").splitlines()
    assert [json.loads(line)["message"] for line in in_file] == [
        "broker broker-a up", "it failed"]


def test_text_format_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO")
    logging.getLogger("tidemq.test").warning("plain %d", 1)
    err = capsys.readouterr().err
    assert "WARNING tidemq.test: plain 1" in err and not err.startswith("{")


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        setup_logging("INFO", log_format="yaml")


def test_formatter_alone() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "hi %s", ("there",), None)
    assert json.loads(JsonFormatter().format(record))["message"] == "hi there"


@pytest.mark.parametrize("command", ["namesrv", "broker", "standalone", "console"])
@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--log-level", "LOUD", "log level must be one of DEBUG, INFO, WARNING, ERROR, "
                            "CRITICAL, not 'LOUD'"),
    ("--log-format", "xml", "log format must be one of text, json, not 'xml'"),
    ("--log-file", "{file}/x.log", "cannot write {file}/x.log"),
])
def test_a_bad_logging_option_is_a_usage_error_naming_it(
        command: str, flag: str, value: str, says: str, tmp_path: Path) -> None:
    """Before any server starts: exit status 2 and the option that is wrong, never a
    traceback (a log file under a regular file cannot be created)."""
    from tests.cli.runner import CliRunner

    from tidemq.cli.main import app

    file = tmp_path / "a-file"
    file.write_text("")
    result = CliRunner().invoke(app, [command, flag, value.format(file=file)],
                                env={"COLUMNS": "400"})
    shown = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {flag}: {says.format(file=file)}" in shown, shown
