"""What a ``tidemq`` process imports before it does anything: every server, every admin
call and every test that starts one pays for each module at start. A command loads what
it runs, not the packages beside it (pydantic, numpy, the whole client or codec)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tidemq.cli import admin_commands

#: Prints, at exit, which of these modules the run imported.
_REPORT = ("import atexit, sys; atexit.register(lambda: print('loaded:', *sorted("
           "m for m in {modules!r} if m in sys.modules), file=sys.stderr)); "
           "from tidemq.cli.main import main; main()")


def loaded(*args: str, modules: tuple[str, ...], code: int = 0) -> set[str]:
    done = subprocess.run([sys.executable, "-c", _REPORT.format(modules=modules), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == code, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("loaded:")]
    return set(line.split()[1:])


@pytest.mark.parametrize("command", ["broker", "namesrv", "controller", "standalone"])
def test_a_server_commands_help_loads_no_server(command: str) -> None:
    assert loaded(command, "--help", modules=(
        "pydantic", "numpy", "msgspec", "asyncio", "ssl", "tidemq.codec",
        "tidemq.net.server", "tidemq.client", "tidemq.store")) == set()


def test_admin_help_loads_no_pydantic_or_numpy() -> None:
    assert loaded("admin", "--help", modules=("pydantic", "numpy")) == set()


def test_an_admin_call_loads_no_producer_consumer_or_numpy() -> None:
    """Nothing listens on port 1: the call fails at once, after the whole start."""
    got = loaded("admin", "topicList", "-n", "127.0.0.1:1", code=1, modules=(
        "pydantic", "numpy", "tidemq.client.producer", "tidemq.client.consumer",
        "tidemq.client.push_consumer", "tidemq.client.pull"))
    assert got == set()


#: The modules besides ``tidemq.cli.commands.admin`` that hold admin commands.
ADMIN_MODULES = tuple(f"tidemq.cli.commands.{m}" for m in admin_commands.ADDED_BY)


@pytest.mark.parametrize(("command", "own"), [
    ("topicList", set()), ("getKvConfig", {"tidemq.cli.commands.kv"}),
    ("queryMsgTraceById", {"tidemq.cli.commands.admin_trace"})])
def test_an_admin_call_loads_the_module_of_its_command_only(command: str, own: set[str]
                                                             ) -> None:
    """``logical`` aside: the admin module creates logical topics with it."""
    got = loaded("admin", command, "--help", modules=ADMIN_MODULES)
    assert got - {"tidemq.cli.commands.logical"} == own


def server_loads(modules: str, watched: tuple[str, ...]) -> set[str]:
    """Which of ``watched`` importing what a server command imports loads."""
    code = (f"import sys, tidemq.cli.commands.server, {modules}; "
            f"print(*sorted(m for m in {watched!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    return set(done.stdout.split())


def test_a_name_server_loads_no_numpy_yaml_or_raft() -> None:
    """The name server decodes headers, never records; it reads YAML with an ACL file
    only, and runs Raft with an embedded controller only."""
    assert server_loads("tidemq.namesrv.app, tidemq.namesrv.config, tidemq.namesrv.controller",
                        ("numpy", "yaml", "pysyncobj", "cryptography")) == set()


def test_a_broker_loads_no_yaml_raft_client_or_console() -> None:
    assert server_loads("tidemq.broker.app, tidemq.broker.config", (
        "yaml", "pysyncobj", "tidemq.client", "tidemq.console", "pydantic")) == set()


def test_a_serving_name_server_loads_no_rich() -> None:
    """Its lines on stderr are plain text where no terminal shows styles: a start, the
    line that says it serves, and a clean stop, with rich's console never loaded."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _REPORT.format(modules=("rich", "rich.console")), "namesrv",
         "--set", "listenPort=0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    with proc, proc.stderr:
        try:
            lines = iter(proc.stderr.readline, "")
            serving = next((ln for ln in lines if "name server listening on" in ln), None)
            assert serving is not None and "[" not in serving
            proc.terminate()
            rest = list(lines)
        finally:
            proc.kill()
    assert "shutting down ...\n" in rest
    (report,) = [ln for ln in rest if ln.startswith("loaded:")]
    assert report.split()[1:] == []
