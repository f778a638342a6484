"""A broker process whose next start can be prepared while the test waits on something
else: :meth:`WarmBroker.prepare` starts the interpreter and imports the broker's modules;
:meth:`WarmBroker.start` then lets that process go on into ``tidemq broker`` (reading its
settings, recovering its store, registering), as a fresh start does. A test that restarts a
killed broker prepares the restart before the kill, so the interpreter's start-up overlaps
the failover instead of following it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Self

from tests.child_server import ChildServer
from tests.crash.broker_process import BrokerProcess

__all__ = ["WarmBroker"]

#: What ``tidemq broker`` imports before it serves: the broker, the command line and what
#: the command line parser loads.
MODULES = ("tidemq.broker.app", "tidemq.cli.main", "tidemq.cli.commands.server", "uvloop")
#: The line a prepared process prints once it has imported.
PREPARED = "prepared to start"
#: Imports :data:`MODULES` (those there are), says so, waits for a line on stdin, then
#: runs the command line.
WARM = ("import contextlib, importlib, sys\n"
        f"for name in {MODULES!r}:\n"
        "    with contextlib.suppress(ImportError):\n"
        "        importlib.import_module(name)\n"
        f"print({PREPARED!r}, flush=True)\n"
        "sys.stdin.readline()\n"
        "from tidemq.cli.main import main\n"
        "main()\n")


class WarmBroker(BrokerProcess):
    """:class:`BrokerProcess`, with :meth:`prepare`; without it, the same."""

    def __init__(self, root: Path, namesrv: str, settings: dict[str, str]) -> None:
        super().__init__(root, namesrv, settings)
        self._prepared: subprocess.Popen[str] | None = None

    def prepare(self) -> None:
        """Start an interpreter for the next :meth:`start` (which may come while this
        broker still runs: the prepared process only imports until then)."""
        assert self._prepared is None
        sets = [a for key, value in self.settings.items() for a in ("--set", f"{key}={value}")]
        self._prepared = subprocess.Popen(
            [sys.executable, "-c", WARM, self.command, *self.args, *sets],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ, "COLUMNS": "400", **self.env})

    def start(self, timeout: float = 60) -> Self:
        """Start; a prepared process first finishes its imports (however long that takes
        on a busy machine), then has ``timeout`` seconds to serve, as a fresh one has."""
        proc, self._prepared = self._prepared, None
        if proc is None:
            return super().start(timeout)
        assert self.proc is None and proc.stdout is not None
        early: list[str] = []
        while line := proc.stdout.readline():  # nothing more once it ended
            if line.rstrip("\n") == PREPARED:
                break
            early.append(line)
        with self._printed:
            self.lines = early
            self._ended = False
        self.returncode = None
        self.proc = proc
        self._drainer = threading.Thread(target=self._drain, args=(proc,), daemon=True)
        self._drainer.start()
        assert proc.stdin is not None
        try:
            proc.stdin.write("go\n")
            proc.stdin.close()
        except BrokenPipeError:  # it ended while importing: its output says why
            pass
        if self.wait_for(self.ready, timeout) is None:
            ChildServer.kill9(self)
            raise AssertionError(f"the {self.command} did not start:\n" + self.log())
        return self

    def discard(self) -> None:
        """Kill a prepared process that was never started."""
        proc, self._prepared = self._prepared, None
        if proc is not None:
            proc.kill()
            proc.communicate(timeout=30)
