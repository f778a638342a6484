"""A ``tidemq`` run builds the app of the command it names only: every top-level
command is in ``COMMANDS``, a command's own app runs it as the full app does, and a
server process does not import the modules of other commands."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from tidemq.cli import admin_commands
from tidemq.cli.main import COMMANDS, build_app

#: Prints, at exit, which of these modules the run imported.
_REPORT = ("import atexit, sys; atexit.register(lambda: print('loaded:', *sorted("
           "m for m in {modules!r} if m in sys.modules), file=sys.stderr)); "
           "from tidemq.cli.main import main; main()")


def names(app: typer.Typer) -> set[str]:
    return set(get_command(app).commands)  # type: ignore[attr-defined]


def test_every_command_of_the_full_app_has_an_entry() -> None:
    assert names(build_app()) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_is_in_its_own_app(command: str) -> None:
    assert command in names(build_app(command))


def group_names(app: typer.Typer, group: str) -> set[str]:
    return set(get_command(app).commands[group].commands)  # type: ignore[attr-defined]


def test_a_group_command_run_builds_that_command_only() -> None:
    assert group_names(build_app("admin", "topicList"), "admin") == {"topicList"}
    assert names(build_app("broker")) == {"broker"}
    (admin,) = build_app("admin", "topicList").registered_groups
    assert admin.typer_instance is not None
    (topic_list,) = admin.typer_instance.registered_commands
    assert topic_list.callback is not None  # its annotations evaluated once, for typer
    assert not any(isinstance(a, str) for a in topic_list.callback.__annotations__.values())
    every = group_names(build_app("admin"), "admin")
    assert len(every) > 60 and group_names(build_app("admin", "noSuchCommand"), "admin") == every


def registered_by(module: str) -> list[str]:
    """The commands ``module`` registers on an app of its own, in order."""
    app = typer.Typer()
    importlib.import_module(f"tidemq.cli.commands.{module}").register(app)
    assert not app.registered_groups
    return [c.name or "" for c in app.registered_commands]


@pytest.mark.parametrize("module", admin_commands.ADDED_BY)
def test_the_admin_table_names_what_each_module_registers(module: str) -> None:
    assert registered_by(module) == list(admin_commands.MODULES[module])


def test_the_admin_table_names_the_admin_modules_own_commands_and_every_module() -> None:
    from tidemq.cli.commands import admin

    assert [c.name for c in admin.app.registered_commands] == list(
        admin_commands.MODULES[admin_commands.HOME])
    modules = {p.stem for p in Path(admin.__file__).parent.glob("*.py")
               if re.search(r"to the ``tidemq admin`` app", p.read_text())}
    assert modules == set(admin_commands.ADDED_BY)


def test_the_full_admin_app_has_every_command_of_the_table_in_its_order() -> None:
    (admin,) = build_app("admin").registered_groups
    assert admin.typer_instance is not None
    listed = [c.name for c in admin.typer_instance.registered_commands]
    assert listed == [name for names in admin_commands.MODULES.values() for name in names]


@pytest.mark.parametrize("command", ["topicList", "getKvConfig", "migrateLogicalQueue"])
def test_an_admin_command_run_builds_that_command_only(command: str) -> None:
    assert group_names(build_app("admin", command), "admin") == {command}


@pytest.mark.parametrize("args", [
    ["admin", "topicList", "--help"], ["admin", "getKvConfig", "--help"],
    ["admin", "createUser", "-u"], ["admin", "topicLst"], ["admin", "clusterList", "-x"],
    ["broker", "--help"], ["bench", "produce", "--help"], ["console", "user", "--help"]])
def test_a_command_built_alone_runs_as_in_the_full_app(args: list[str]) -> None:
    """Its help, and the errors of a wrong name or flag (with the names near it)."""
    runner = CliRunner()
    alone = runner.invoke(build_app(args[0], args[1]), args, env={"COLUMNS": "120"})
    full = runner.invoke(build_app(), args, env={"COLUMNS": "120"})
    assert (alone.exit_code, alone.output) == (full.exit_code, full.output)


def loaded(*args: str, modules: tuple[str, ...]) -> tuple[str, set[str]]:
    done = subprocess.run([sys.executable, "-c", _REPORT.format(modules=modules), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("loaded:")]
    return done.stdout, set(line.split()[1:])


def test_a_name_server_run_loads_no_broker_bench_or_console() -> None:
    out, got = loaded("namesrv", "--help", modules=(
        "tidemq.broker.app", "tidemq.bench", "tidemq.console", "tidemq.cli.commands.admin",
        "tidemq.cli.commands.server"))
    assert "Usage:" in out
    assert got == {"tidemq.cli.commands.server"}  # its own command's module only


def test_a_single_command_module_still_takes_the_command_name() -> None:
    out, got = loaded("cluster", "--help", modules=("tidemq.cli.commands.admin",))
    assert "Usage:" in out and "cluster" in out
    assert got == set()


def test_a_broker_run_loads_no_name_server_controller_bench_or_console() -> None:
    out, got = loaded("broker", "--help", modules=(
        "tidemq.namesrv.app", "tidemq.namesrv.controller", "pysyncobj", "tidemq.bench",
        "tidemq.console", "tidemq.cli.commands.server"))
    assert "Usage:" in out
    assert got == {"tidemq.cli.commands.server"}
