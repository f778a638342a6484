"""Controllers in child processes on loopback (``tidemq controller``), for failover tests:
started, waited for, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from tests.crash.broker_process import free_port

READY = " listening on "


class ControllerProcess:
    """``tidemq controller``, or with ``command="namesrv"`` a name server with the
    controller embedded."""

    def __init__(self, self_id: str, peers: str, port: int, settings: dict[str, str],
                 command: str = "controller") -> None:
        self.self_id = self_id
        self.command = command
        self.port = port
        self.settings = {"controllerRaftPeers": peers, "controllerRaftSelfId": self_id,
                         "listenPort": str(port), **settings}
        if command == "namesrv":
            self.settings["enableControllerInNamesrv"] = "true"
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._drainer: threading.Thread | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        assert self.proc is None
        args = [a for key, value in self.settings.items() for a in ("--set", f"{key}={value}")]
        self.lines = []
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tidemq.cli.main import main; main()", self.command,
             *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "400"})
        self._drainer = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._drainer.start()
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.kill9()
            raise AssertionError("the controller did not start:\n" + self.log())

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)
            if READY in line:
                self._ready.set()
        self._ready.set()

    def log(self, last: int = 60) -> str:
        return "".join(self.lines[-last:])

    def kill9(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        if self._drainer is not None:
            self._drainer.join(10)
        if proc.stderr is not None:
            proc.stderr.close()


def controller_trio(settings: dict[str, str] | None = None,
                    command: str = "controller") -> list[ControllerProcess]:
    """Three controllers (not started) that know each other; ``command="namesrv"``: three
    name servers with the controller embedded."""
    raft = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{port}" for i, port in enumerate(raft))
    return [ControllerProcess(f"n{i}", peers, free_port(), settings or {}, command)
            for i in range(3)]
