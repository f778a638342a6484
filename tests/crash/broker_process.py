"""A ``tidemq broker`` in a child process on loopback, for crash tests: started, waited
for, killed with SIGKILL, started again on the same port and store directory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

READY = " serving on "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """One broker (``broker-a``) whose store lives under ``root``; ``settings`` are extra
    ``--set key=value`` pairs (flushDiskType, segment sizes ...)."""

    def __init__(self, root: Path, namesrv: str, settings: dict[str, str]) -> None:
        self.root = root
        self.port = free_port()
        self.settings = {"brokerName": "broker-a", "listenPort": str(self.port),
                         "namesrvAddr": namesrv, "storePathRootDir": str(root), **settings}
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._drainer: threading.Thread | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        """Start the process and return once it serves (its start-up line, printed after
        the store recovered and the port listens)."""
        assert self.proc is None
        args = [arg for key, value in self.settings.items() for arg in ("--set", f"{key}={value}")]
        self.lines = []
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tidemq.cli.main import main; main()", "broker", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "COLUMNS": "400"})
        self._drainer = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._drainer.start()
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.kill9()
            raise AssertionError("the broker did not start:\n" + self.log())

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)
            if READY in line:
                self._ready.set()
        self._ready.set()  # ended: start() sees the exit

    def log(self, last: int = 60) -> str:
        return "".join(self.lines[-last:])

    def kill9(self) -> None:
        """SIGKILL, as a crash: no shutdown hook, no checkpoint, no flush."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        self._close(proc)
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, self.log())

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
        if proc.stderr is not None:
            proc.stderr.close()
