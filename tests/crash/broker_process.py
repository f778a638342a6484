"""A ``tidemq broker`` in a child process on loopback, for crash tests: started, waited
for, killed with SIGKILL, started again on the same port and store directory."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.child_server import ChildServer, free_port

from . import stop_at

__all__ = ["READY", "BrokerProcess", "free_port"]

READY = " serving on "


class BrokerProcess(ChildServer):
    """One broker (``broker-a``) whose store lives under ``root``; ``settings`` are extra
    ``--set key=value`` pairs (flushDiskType, segment sizes ...)."""

    def __init__(self, root: Path, namesrv: str, settings: dict[str, str]) -> None:
        self.root = root
        self.port = free_port()
        super().__init__("broker", {
            "brokerName": "broker-a", "listenPort": str(self.port), "namesrvAddr": namesrv,
            "haListenPort": "0",  # any free port: listenPort + 1 may be another's
            "storePathRootDir": str(root), **settings}, ready=READY)

    def stop_after(self, step: str | None) -> None:
        """From the next start on, stop for good once ``step`` has returned (``None``: run
        as usual); :mod:`stop_at` says how."""
        if step is None:
            self.program = ChildServer.program
            self.env.pop(stop_at.ENV, None)
        else:
            self.program = stop_at.PROGRAM
            self.env[stop_at.ENV] = step

    def stopped(self, timeout: float = 30) -> str:
        """Once the process stopped after its step: the step."""
        line = self.wait_for(stop_at.STOPPED, timeout)
        assert line is not None, "the step was not reached:\n" + self.log()
        return line.split(stop_at.STOPPED, 1)[1].strip()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill9(self) -> int | None:
        """SIGKILL, as a crash; the broker must not have exited by itself first."""
        status = super().kill9()
        assert status in (None, -signal.SIGKILL), (status, self.log())
        return status
