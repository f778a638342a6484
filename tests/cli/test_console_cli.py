"""``tidemq standalone`` with its console (a busy console port is a warning, not a failed
start) and ``tidemq console`` for a running cluster, as subprocesses; the console's user commands
in this process."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.child_server import ChildServer, free_ports
from tests.cli.runner import CliRunner
from typer.testing import Result

from tidemq.cli.main import app

BOOT = "from tidemq.cli.main import main; main()"
runner = CliRunner()


def start(args: list[str], ready: str) -> ChildServer:
    command, *rest = args
    return ChildServer(command, {}, rest, ready=ready).start(60)


def stop(server: ChildServer) -> None:
    server.stop()
    assert server.returncode == 0, server.log()


def test_standalone_serves_without_a_console_when_its_port_is_busy(tmp_path: Path) -> None:
    ns_port, broker_port, console_port = free_ports(3)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", console_port))
        busy.listen()
        server = start(["standalone", "--data", str(tmp_path), "--namesrv-port",
                        str(ns_port), "--broker-port", str(broker_port),
                        "--console-port", str(console_port), "--set", "haListenPort=0"],
                       "TideMQ standalone is running")
        try:
            assert server.wait_for(f"no web console on port {console_port}", 0), server.log()
            assert server.wait_for("  console      off", 30), server.log()
        finally:
            stop(server)


def test_console_command_serves_a_cluster(tmp_path: Path) -> None:
    ns_port, broker_port, console_port = free_ports(3)
    server = start(["standalone", "--data", str(tmp_path), "--namesrv-port", str(ns_port),
                       "--broker-port", str(broker_port), "--no-console",
                       "--set", "haListenPort=0"],
                      "TideMQ standalone is running")
    try:
        web = start(["console", "-n", f"127.0.0.1:{ns_port}", "--port", str(console_port),
                        "--log-format", "json"], "TideMQ console on")
        try:
            url = f"http://127.0.0.1:{console_port}/cluster"
            with urllib.request.urlopen(url, timeout=10) as resp:
                page = resp.read().decode()
            assert resp.status == 200 and "broker-a" in page and "RUNNING" in page
        finally:
            stop(web)
    finally:
        stop(server)


def run(args: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BOOT, *args], input=stdin, text=True,
                          capture_output=True, timeout=60, check=False)


def users(args: list[str], stdin: str = "") -> Result:
    """``tidemq console user ARGS`` in this process (typer's runner): the user commands
    only edit a file, so nothing about them needs a process of their own."""
    return runner.invoke(app, ["console", "user", *args], input=stdin)


def test_user_commands_write_the_users_file(tmp_path: Path) -> None:
    path = tmp_path / "users.yml"
    added = users(["add", "alice", "--role", "admin", "--users-file", str(path),
                   "--password-stdin"], "alice-pw\n")
    assert added.exit_code == 0, added.output
    assert "alice (admin)" in added.stderr
    assert "alice-pw" not in path.read_text() and "$scrypt$ln=15,r=8,p=1$" in path.read_text()
    bob = users(["add", "bob", "-f", str(path), "--password-stdin"], "bob-pass\n")
    assert bob.exit_code == 0
    listed = users(["list", "-f", str(path)])
    assert listed.stdout.splitlines() == ["alice\tadmin", "bob\tviewer"]
    bad_role = users(["add", "x", "--role", "root", "-f", str(path), "--password-stdin"],
                     "x\n")
    assert bad_role.exit_code != 0 and "admin or viewer" in bad_role.stderr
    empty = users(["passwd", "bob", "-f", str(path), "--password-stdin"], "\n")
    assert empty.exit_code != 0 and "must not be empty" in empty.stderr
    short = users(["passwd", "bob", "-f", str(path), "--password-stdin"], "b\n")
    assert short.exit_code != 0 and "too short (at least 8 characters)" in short.stderr
    assert "bob\tviewer" in users(["list", "-f", str(path)]).stdout
    assert users(["remove", "bob", "-f", str(path)]).exit_code == 0
    gone = users(["remove", "bob", "-f", str(path)])
    assert gone.exit_code == 1 and "no user named 'bob'" in gone.stderr


def test_console_with_users_asks_for_a_login(tmp_path: Path) -> None:
    path = tmp_path / "users.yml"
    assert users(["add", "alice", "--role", "admin", "-f", str(path), "--password-stdin"],
                 "alice-pw\n").exit_code == 0
    (port,) = free_ports(1)
    web = start(["console", "-n", "127.0.0.1:9", "--port", str(port),
                 "--users-file", str(path)], "TideMQ console on")
    try:
        assert "users log in" in web.log()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/cluster", timeout=10) as resp:
            assert "/login?next=" in resp.url and 'id="login-form"' in resp.read().decode()
    finally:
        stop(web)


def test_an_anonymous_console_beyond_loopback_does_not_start(tmp_path: Path) -> None:
    refused = run(["console", "-n", "127.0.0.1:9", "--host", "0.0.0.0", "--port", "0"])
    assert refused.returncode == 1 and "no users" in refused.stderr, refused.stderr
    assert "--allow-anonymous" in refused.stderr and "Traceback" not in refused.stderr
    (ns_port,) = free_ports(1)
    alone = run(["standalone", "--data", str(tmp_path), "--host", "0.0.0.0",
                 "--namesrv-port", str(ns_port), "--broker-port", "0"])
    assert alone.returncode == 1 and "no users" in alone.stderr, alone.stderr
    assert "standalone is running" not in alone.stderr


def test_standalone_passes_its_console_keys_to_the_console(tmp_path: Path) -> None:
    ns_port, console_port = free_ports(2)
    server = start(["standalone", "--data", str(tmp_path), "--namesrv-port", str(ns_port),
                    "--broker-port", "0", "--console-port", str(console_port),
                    "--set", "consoleAllowedHosts=console.example",
                    "--set", "consoleSessionTimeout=60"], "TideMQ standalone is running")
    try:
        assert "unknown configuration key" not in server.log(), server.log()

        def status(host: str) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", console_port, timeout=10)
            try:
                conn.request("GET", "/healthz", headers={"Host": f"{host}:{console_port}"})
                return conn.getresponse().status
            finally:
                conn.close()

        assert status("console.example") == 200
        assert status("rebind.example") == 421
    finally:
        stop(server)
