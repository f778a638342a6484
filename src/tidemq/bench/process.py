"""The broker process a benchmark loads: ``tidemq standalone`` in a subprocess.

:class:`BrokerProcess` picks free loopback ports, makes a temporary data directory, starts
``tidemq standalone`` (name server and broker in one process) with the chosen
``flushDiskType`` and extra settings, and waits until the broker has registered with its
name server. :meth:`~BrokerProcess.stop` sends SIGTERM (a clean shutdown) and removes the
directory. With ``profile`` the broker runs under ``py-spy record`` (every thread); the
profile is written when the broker exits.

CPU use of any process is read from ``/proc/<pid>/stat`` (:func:`process_cpu_seconds`),
the bytes it caused to be written to disk from ``/proc/<pid>/io``
(:func:`process_write_bytes`: counted when a page-cache page is dirtied, so a page
dirtied, written back and dirtied again counts twice),
and thread by thread from ``/proc/<pid>/task`` (:func:`thread_cpu_seconds`): the broker's
threads carry their names for the kernel (:class:`tidemq.store.threads.NamedThread`).
:func:`thread_cpu_split` turns two such readings into what the benchmarks report: CPU per
message of each thread and of all of them, user and kernel time apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidemq.client import AdminClient, ClientConfig
from tidemq.errors import TideMQError
from tidemq.net.ports import free_ports

__all__ = ["MAIN_THREAD", "BenchError", "BrokerProcess", "ThreadCpu", "free_ports",
           "process_cpu_seconds", "process_write_bytes", "thread_cpu_seconds",
           "thread_cpu_split"]

#: How the subprocess runs the CLI (``tidemq.cli.main`` has no ``__main__`` guard).
_BOOT = "from tidemq.cli.main import main; main()"
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: How :func:`thread_cpu_seconds` names a process's first thread (a broker's event loop).
MAIN_THREAD = "main"


class BenchError(TideMQError):
    """A benchmark could not run: the broker did not start, the topic got no route..."""


def _stat_cpu(path: str) -> tuple[str, float, float] | None:
    """``(comm, user, system)`` CPU seconds from a ``/proc`` ``stat`` file (a process's or
    one thread's), or ``None`` when it cannot be read (gone, another OS)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    name_part, _, rest = raw.rpartition(b")")  # comm may itself hold ")"
    fields = rest.split()
    try:
        user, system = int(fields[11]) / _CLK_TCK, int(fields[12]) / _CLK_TCK  # utime, stime
    except (IndexError, ValueError):
        return None
    return name_part.split(b"(", 1)[-1].decode("utf-8", "replace"), user, system


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads), or ``None``."""
    stat = _stat_cpu(f"/proc/{pid}/stat")
    return None if stat is None else stat[1] + stat[2]


def process_write_bytes(pid: int) -> int | None:
    """``write_bytes`` of ``/proc/<pid>/io``: bytes process ``pid`` caused to be written to
    storage (``None`` when it cannot be read: gone, another OS, no I/O accounting)."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            for line in f:
                if line.startswith(b"write_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def thread_cpu_seconds(pid: int) -> dict[str, tuple[float, float]]:
    """``{thread name: (user, system) CPU seconds}`` of process ``pid``'s live threads,
    threads of one name summed; the first thread is :data:`MAIN_THREAD`. Empty when
    ``/proc`` cannot tell (another OS, the process gone)."""
    out: dict[str, tuple[float, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        stat = _stat_cpu(f"/proc/{pid}/task/{tid}/stat")
        if stat is None:
            continue  # the thread ended meanwhile
        comm, user, system = stat
        name = MAIN_THREAD if tid == str(pid) else comm
        u0, s0 = out.get(name, (0.0, 0.0))
        out[name] = (u0 + user, s0 + system)
    return out


ThreadCpu = dict[str, tuple[float, float]]
#: Threads below this share of a core over the window are left out of the rows (their time
#: still counts in the totals).
_QUIET = 0.005


def thread_cpu_split(before: ThreadCpu, after: ThreadCpu, seconds: float,
                     msgs: int) -> dict[str, Any]:
    """The CPU a process's threads used between two :func:`thread_cpu_seconds` readings
    ``seconds`` apart, in which ``msgs`` messages were done: ``user_ns_per_msg`` and
    ``sys_ns_per_msg`` of all threads (kernel time is reported beside user time, not in
    it: on this kind of machine it is mostly the price of new page-cache pages), and
    ``threads``, one row per thread busier than half a percent of a core, busiest first:
    ``thread``, ``cpu_pct`` and ``sys_pct`` (100 is one core), ``ns_per_msg`` (user +
    kernel), ``user_ns_per_msg``, ``sys_ns_per_msg``. A thread that ended in between is
    not counted."""
    per_msg = 1e9 / max(msgs, 1)
    rows: list[dict[str, Any]] = []
    total_user = total_sys = 0.0
    for thread, (user, system) in after.items():
        u0, s0 = before.get(thread, (0.0, 0.0))
        du, ds = max(user - u0, 0.0), max(system - s0, 0.0)
        total_user += du
        total_sys += ds
        if seconds > 0 and (du + ds) / seconds >= _QUIET:
            rows.append({"thread": thread, "cpu_pct": 100 * (du + ds) / seconds,
                         "sys_pct": 100 * ds / seconds, "ns_per_msg": (du + ds) * per_msg,
                         "user_ns_per_msg": du * per_msg, "sys_ns_per_msg": ds * per_msg})
    rows.sort(key=lambda t: -float(t["cpu_pct"]))
    return {"threads": rows, "user_ns_per_msg": total_user * per_msg,
            "sys_ns_per_msg": total_sys * per_msg}


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


class BrokerProcess:
    """See the module docstring. ``pid`` is the broker's (not py-spy's) once started."""

    def __init__(self, *, flush: str = "ASYNC_FLUSH", settings: Sequence[str] = (),
                 data_dir: str | None = None, profile: str | None = None,
                 native: bool = False) -> None:
        self.flush = flush
        self.settings = tuple(settings)
        self.profile = profile
        #: Whether the profile samples native frames too (``py-spy record --native``).
        self.native = native
        self.data = Path(tempfile.mkdtemp(prefix="tidemq-bench-", dir=data_dir))
        self.log_path = self.data / "broker.log"
        self.namesrv_addr = ""
        self.broker_addr = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0

    def command(self, namesrv_port: int, broker_port: int) -> list[str]:
        cmd = [sys.executable, "-c", _BOOT, "standalone", "--data", str(self.data / "data"),
               "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port),
               "--log-level", "WARNING", "--no-console", "--set", f"flushDiskType={self.flush}"]
        if not any(item.startswith("haListenPort=") for item in self.settings):
            cmd += ["--set", "haListenPort=0"]  # any free port: listenPort + 1 may be taken
        for item in self.settings:
            cmd += ["--set", item]
        if self.profile:
            spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            if not Path(spy).exists():
                raise BenchError("--profile needs py-spy: pip install py-spy")
            fmt = "raw" if self.profile.endswith(".txt") else "flamegraph"
            cmd = [spy, "record", "--rate", "250", "--threads", "--format", fmt,
                   *(["--native"] if self.native else []), "-o", self.profile, "--", *cmd]
        return cmd

    async def start(self, timeout: float = 60.0) -> str:
        """Start the broker and wait until it registered; returns the name-server address."""
        ns_port, broker_port = free_ports(2)
        self.namesrv_addr = f"127.0.0.1:{ns_port}"
        self.broker_addr = f"127.0.0.1:{broker_port}"
        try:
            cmd = self.command(ns_port, broker_port)
        except BenchError:
            shutil.rmtree(self.data, ignore_errors=True)
            raise
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        try:
            await self._wait_ready(timeout)
        except BaseException:
            await self.stop()
            raise
        return self.namesrv_addr

    async def _wait_ready(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        config = ClientConfig(namesrv_addr=(self.namesrv_addr,), request_timeout=1.0)
        last = "nothing answered"
        while loop.time() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise BenchError(f"the broker process exited with {self.proc.returncode}:\n"
                                 f"{self.log_tail()}")
            try:
                async with AdminClient(config=config) as admin:
                    if any(b.broker_id == 0 for b in await admin.cluster_list()):
                        self.pid = self._broker_pid()
                        return
            except TideMQError as exc:
                last = str(exc)
            await asyncio.sleep(0.1)  # another process: nothing to wait on but its port
        raise BenchError(f"the broker did not register within {timeout:.0f} s ({last}):\n"
                         f"{self.log_tail()}")

    def _broker_pid(self) -> int:
        assert self.proc is not None
        if not self.profile:
            return self.proc.pid
        kids = _children(self.proc.pid)
        return kids[0] if kids else self.proc.pid

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    async def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM to the broker (py-spy then writes its profile), SIGKILL after
        ``timeout``; the data directory is removed."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid or proc.pid, signal.SIGTERM)
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(timeout):
                    await loop.run_in_executor(None, proc.wait)
            except TimeoutError:
                proc.kill()
                await loop.run_in_executor(None, proc.wait)
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: shutil.rmtree(self.data, ignore_errors=True))
