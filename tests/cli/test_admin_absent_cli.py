"""The mqadmin commands TideMQ does not have: each is listed, and, given mqadmin's flags,
says why and what to use instead and fails, rather than "No such command"."""

from __future__ import annotations

import pytest
from tests.cli.runner import CliRunner

from tidemq.cli.commands.admin_absent import ABSENT
from tidemq.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("name", sorted(ABSENT))
def test_an_absent_command_says_why_and_what_instead(name: str) -> None:
    result = runner.invoke(app, ["admin", name, "-b", "127.0.0.1:10911", "-c", "x",
                                 "--flag", "-n", "127.0.0.1:1", "--json"])
    assert result.exit_code == 1, result.output
    why, instead = ABSENT[name]
    line = " ".join(result.stderr.split())
    assert line == f"error: {name}: {why}. Instead: {instead}."
    assert result.stdout == ""


def test_absent_commands_are_listed_and_explained_by_help() -> None:
    listed = runner.invoke(app, ["admin", "--help"])
    assert listed.exit_code == 0
    assert "addBroker" in listed.stdout and "resetMasterFlushOffset" in listed.stdout
    helped = runner.invoke(app, ["admin", "dumpCompactionLog", "--help"])
    assert helped.exit_code == 0
    assert "Not in TideMQ" in " ".join(helped.stdout.split())
