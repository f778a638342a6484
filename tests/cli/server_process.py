"""A ``tidemq namesrv``, ``tidemq broker`` or ``tidemq standalone`` in a child process on
loopback: started with ``--set key=value`` settings, waited for (its start-up line),
killed with SIGKILL or stopped with SIGTERM, and started again with the same settings."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

#: The log line each server writes once it serves.
READY = {"namesrv": "name server listening on ", "broker": " serving on ",
         "standalone": "TideMQ standalone is running"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, kind: str, settings: dict[str, str], *args: str,
                 console: bool = False) -> None:
        """``args``: more command-line arguments; a standalone's port (:attr:`port`) is
        its name server's; ``console``: a standalone serves its web console on
        :attr:`console_port`."""
        self.kind = kind
        self.port = free_port()
        self.console_port = free_port() if console else 0
        self.args = args
        if kind == "standalone":
            web = ("--console-port", str(self.console_port)) if console else ("--no-console",)
            self.args = ("--namesrv-port", str(self.port), "--broker-port", str(free_port()),
                         *web, *args)
            self.settings = dict(settings)
        else:
            self.settings = {"listenPort": str(self.port), **settings}
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._drainer: threading.Thread | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> ServerProcess:
        assert self.proc is None
        args = [a for k, v in self.settings.items() for a in ("--set", f"{k}={v}")]
        self.lines = []
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tidemq.cli.main import main; main()", self.kind,
             *self.args, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "400"})
        self._drainer = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._drainer.start()
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.kill9()
            raise AssertionError(f"the {self.kind} did not start:\n" + self.log())
        return self

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)
            if READY[self.kind] in line:
                self._ready.set()
        self._ready.set()  # ended: start() sees the exit

    def log(self, last: int = 60) -> str:
        return "".join(self.lines[-last:])

    def kill9(self) -> None:
        """SIGKILL, as a crash."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        self._close(proc)

    def stop(self) -> None:
        """SIGTERM, a clean shutdown."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._close(proc)

    def _close(self, proc: subprocess.Popen[str]) -> None:
        if self._drainer is not None:
            self._drainer.join(10)
        if proc.stdout is not None:
            proc.stdout.close()
