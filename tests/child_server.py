"""A ``tidemq`` server command in a child process on loopback, for the tests that need
real processes: started with ``--set key=value`` settings and waited for (the line it
prints once it serves), killed with SIGKILL as a crash or stopped with SIGTERM, started
again with the same settings; what it printed is kept for failure messages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Self

from tidemq.net.ports import free_port, free_ports

__all__ = ["SMALL_SEGMENT", "ChildServer", "free_port", "free_ports"]

#: ``mappedFileSizeCommitLog`` for the brokers of tests that do not test segments: far
#: above what they send, without the default 1 GiB segment, which a tmpfs holds as memory
#: and allocates with about half a second of the kernel's CPU.
SMALL_SEGMENT = str(16 * 1024 * 1024)


class ChildServer:
    """``tidemq <command> <args> --set k=v ...``; :attr:`ready` is its serving line."""

    #: What the interpreter runs: the ``tidemq`` command line.
    program: tuple[str, ...] = ("-c", "from tidemq.cli.main import main; main()")

    def __init__(self, command: str, settings: dict[str, str], args: Sequence[str] = (),
                 *, ready: str, env: Mapping[str, str] | None = None) -> None:
        """``env``: variables set in the child's environment besides this process's."""
        self.command = command
        self.settings = settings
        self.args = tuple(args)
        self.env = dict(env or {})
        self.ready = ready
        self.proc: subprocess.Popen[str] | None = None
        self.returncode: int | None = None
        self.lines: list[str] = []
        self._printed = threading.Condition()
        self._ended = False
        self._drainer: threading.Thread | None = None

    def start(self, timeout: float = 60) -> Self:
        """Start the process and return once it serves."""
        assert self.proc is None
        sets = [a for key, value in self.settings.items() for a in ("--set", f"{key}={value}")]
        with self._printed:
            self.lines = []
            self._ended = False
        self.returncode = None
        self.proc = subprocess.Popen(
            [sys.executable, *self.program, self.command, *self.args, *sets],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ, "COLUMNS": "400", **self.env})
        self._drainer = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._drainer.start()
        if self.wait_for(self.ready, timeout) is None:  # it exited, or it is too slow
            ChildServer.kill9(self)  # however it ended: the log says why
            raise AssertionError(f"the {self.command} did not start:\n" + self.log())
        return self

    def wait_for(self, text: str, timeout: float = 30) -> str | None:
        """The first line printed since the start that contains ``text``, once it is
        printed; ``None`` when the process ended or ``timeout`` passed without it."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._printed:
            while True:
                for line in self.lines[seen:]:
                    if text in line:
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    return None
                self._printed.wait(left)

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._printed:
                self.lines.append(line)
                self._printed.notify_all()
        with self._printed:
            self._ended = True
            self._printed.notify_all()

    def log(self, last: int = 60) -> str:
        return "".join(self.lines[-last:])

    def kill9(self) -> int | None:
        """SIGKILL, as a crash: no shutdown hook, no checkpoint, no flush. Its exit status
        (``None``: it was not running)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        self._close(proc)
        return proc.returncode

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
        self.returncode = proc.returncode
        if self._drainer is not None:
            self._drainer.join(10)
        if proc.stdout is not None:
            proc.stdout.close()
