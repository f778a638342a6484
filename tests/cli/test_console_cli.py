"""``tidemq standalone`` with its console (a busy console port is a warning, not a failed
start) and ``tidemq console`` for a running cluster, as subprocesses."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

BOOT = "from tidemq.cli.main import main; main()"


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start(args: list[str], ready: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-c", BOOT, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # until the banner; the process prints it once it serves
        lines.append(line)
        if ready in line:
            return proc, lines
    proc.wait(10)
    raise AssertionError("".join(lines))


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        assert proc.wait(20) == 0
    finally:
        if proc.stderr is not None:
            proc.stderr.close()


def test_standalone_serves_without_a_console_when_its_port_is_busy(tmp_path: Path) -> None:
    ns_port, broker_port, console_port = free_ports(3)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", console_port))
        busy.listen()
        proc, lines = start(["standalone", "--data", str(tmp_path), "--namesrv-port",
                             str(ns_port), "--broker-port", str(broker_port),
                             "--console-port", str(console_port)],
                            "TideMQ standalone is running")
        try:
            more = [proc.stderr.readline() for _ in range(3)] if proc.stderr else []
            text = "".join(lines + more)
            assert f"no web console on port {console_port}" in text
            assert "console      off" in text
        finally:
            stop(proc)


def test_console_command_serves_a_cluster(tmp_path: Path) -> None:
    ns_port, broker_port, console_port = free_ports(3)
    server, _ = start(["standalone", "--data", str(tmp_path), "--namesrv-port", str(ns_port),
                       "--broker-port", str(broker_port), "--no-console"],
                      "TideMQ standalone is running")
    try:
        web, _ = start(["console", "-n", f"127.0.0.1:{ns_port}", "--port", str(console_port),
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
