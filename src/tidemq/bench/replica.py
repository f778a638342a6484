"""A replica for a benchmark's broker: ``tidemq broker`` with ``brokerRole=SLAVE`` in a
subprocess, copying the benchmark's broker process over its HA port.

:func:`replica_settings` gives the broker process what it needs to be the group's
master (its role and a free HA port); :class:`ReplicaProcess` starts the replica in a
directory under the broker's, waits until the name server lists it (brokerId 1), and
stops it with SIGTERM. A start returns once the master counts the replica in sync, so
that a SYNC_MASTER's first sends are not answered SLAVE_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

from tidemq.bench.process import BenchError, free_ports
from tidemq.client import AdminClient, ClientConfig
from tidemq.errors import TideMQError

__all__ = ["REPLICA_MODES", "ReplicaProcess", "replica_settings"]

#: ``--replica`` values: the master's brokerRole.
REPLICA_MODES = {"async": "ASYNC_MASTER", "sync": "SYNC_MASTER"}
_BOOT = "from tidemq.cli.main import main; main()"


def replica_settings(mode: str, ha_port: int) -> tuple[str, ...]:
    """The broker process's extra settings to be the master of a ``mode`` group."""
    return (f"brokerRole={REPLICA_MODES[mode]}", f"haListenPort={ha_port}")


class ReplicaProcess:
    def __init__(self, data: Path, namesrv: str, ha_port: int, flush: str,
                 master: str = "", settings: tuple[str, ...] = ()) -> None:
        self.data = data
        #: The master's extra ``KEY=VALUE`` settings (``--broker-set``): a group's members
        #: share them (``mappedFileSizeCommitLog`` above all); the replica's own role,
        #: ports and directory come after them.
        self.settings = settings
        self.namesrv = namesrv
        #: The master's remoting address: the start waits until it counts this replica
        #: in sync.
        self.master = master
        self.ha_port = ha_port
        self.flush = flush
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data / "replica.log"

    async def start(self, timeout: float = 60.0) -> None:
        (port,) = free_ports(1)
        self.data.mkdir(parents=True, exist_ok=True)
        settings = {"brokerName": "broker-a", "brokerRole": "SLAVE", "brokerId": "1",
                    "listenPort": str(port), "namesrvAddr": self.namesrv,
                    "haMasterAddress": f"127.0.0.1:{self.ha_port}",
                    "storePathRootDir": str(self.data / "store"),
                    "flushDiskType": self.flush}
        args = [a for kv in self.settings for a in ("--set", kv)]
        args += [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, "broker", "--log-level", "WARNING", *args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        config = ClientConfig(namesrv_addr=(self.namesrv,), request_timeout=1.0)
        while loop.time() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"the replica exited with {self.proc.returncode}:\n"
                                 f"{self.log_path.read_text('utf-8', errors='replace')}")
            with contextlib.suppress(TideMQError):
                async with AdminClient(config=config) as admin:
                    if (any(b.broker_id == 1 for b in await admin.cluster_list())
                            and await self._in_sync(admin)):
                        return
            await asyncio.sleep(0.1)  # another process: nothing to wait on but its port
        await self.stop()
        raise BenchError(f"the replica did not register within {timeout:.0f} s")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def _in_sync(self, admin: AdminClient) -> bool:
        if not self.master:
            return True
        status = await admin.broker_status(self.master)
        return int(status.get("haInSyncReplicas", "0")) >= 1

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(60):
                await loop.run_in_executor(None, proc.wait)
        except TimeoutError:
            proc.kill()
            await loop.run_in_executor(None, proc.wait)
