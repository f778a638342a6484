"""A broker group with automatic failover as child processes on one machine: three name
servers with the controller embedded (Raft among them) and three brokers of one broker
name in controller mode. ``tidemq cluster`` runs one for people; ``tidemq bench
failover`` runs one per measurement.

:func:`plan_group` lays out the six servers and their settings; :func:`start_child`
starts one (its log copied to a file) and returns once it serves; :func:`stop_children`
stops them with SIGTERM, brokers first.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from tidemq.net.bind import local_host

__all__ = ["START_TIMEOUT", "Child", "plan_group", "start_child", "stop_children"]

#: Seconds a server may take to say it serves.
START_TIMEOUT = 60.0
READY = {"namesrv": "listening on", "broker": "serving on"}


@dataclasses.dataclass(slots=True)
class Child:
    name: str
    command: str  # "namesrv" or "broker"
    settings: dict[str, str]
    address: str
    proc: subprocess.Popen[bytes] | None = None
    copier: threading.Thread | None = None

    def args(self) -> list[str]:
        sets = [a for key, value in self.settings.items() for a in ("--set", f"{key}={value}")]
        return [sys.executable, "-c", "from tidemq.cli.main import main; main()", self.command,
                *sets]


def plan_group(data: Path, host: str, namesrv_ports: list[int], raft_ports: list[int],
               broker_ports: list[int], *, broker_name: str = "broker-a", sync: bool = True,
               ha_ports: list[int] | None = None, broker_settings: dict[str, str] | None = None,
               namesrv_settings: dict[str, str] | None = None) -> list[Child]:
    """The six servers, in start order (name servers first), with their settings; three
    ports of each kind. Without ``ha_ports`` a broker's HA port is its port + 1."""
    local = local_host(host)
    namesrvs = [f"{local}:{port}" for port in namesrv_ports]
    peers = ";".join(f"n{i}-{local}:{port}" for i, port in enumerate(raft_ports))
    children = [
        Child(f"namesrv-{i}", "namesrv", {
            "listenPort": str(port), "bindAddress": host,
            "enableControllerInNamesrv": "true", "controllerRaftPeers": peers,
            "controllerRaftSelfId": f"n{i}",
            "controllerStorePath": str(data / f"controller-{i}"),
            **(namesrv_settings or {})}, namesrvs[i])
        for i, port in enumerate(namesrv_ports)]
    for i, port in enumerate(broker_ports):
        settings = {
            "brokerName": broker_name, "brokerId": str(i + 1), "listenPort": str(port),
            "bindAddress": host, "namesrvAddr": ";".join(namesrvs),
            "enableControllerMode": "true", "controllerAddr": ";".join(namesrvs),
            "brokerRole": "SYNC_MASTER" if sync else "ASYNC_MASTER",
            "storePathRootDir": str(data / f"broker-{i + 1}"), **(broker_settings or {})}
        if ha_ports is not None:
            settings["haListenPort"] = str(ha_ports[i])
        children.append(Child(f"broker-{i + 1}", "broker", settings, f"{local}:{port}"))
    return children


def start_child(child: Child, logs: Path) -> None:
    """Start ``child`` and return once its log says it serves (``RuntimeError`` if it
    does not within :data:`START_TIMEOUT`)."""
    log_path = logs / f"{child.name}.log"
    log_file: IO[bytes] = log_path.open("ab")
    ready = threading.Event()  # the ready line was seen, or the log ended
    served: list[bool] = [False]
    last: list[bytes] = [b""]  # the child's last non-empty log line
    proc = subprocess.Popen(child.args(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
                            start_new_session=True)
    child.proc = proc

    def copy() -> None:  # the child's log to its file, watching for the ready line
        assert proc.stderr is not None
        for line in proc.stderr:
            log_file.write(line)
            log_file.flush()
            if line.strip():
                last[0] = line.strip()
            if READY[child.command].encode() in line:
                served[0] = True
                ready.set()
        ready.set()
        log_file.close()
        proc.stderr.close()

    child.copier = threading.Thread(target=copy, name=f"log-{child.name}", daemon=True)
    child.copier.start()
    # a child whose log ended without the ready line exited (it may not be reaped yet)
    if not ready.wait(START_TIMEOUT) or not served[0] or proc.poll() is not None:
        child.copier.join(1.0)  # an exited child's last lines are still being copied
        said = last[0].decode(errors="replace")
        raise RuntimeError(f"{child.name} did not start" + (f": {said}" if said else "")
                           + f"; see {log_path}")


def stop_children(children: list[Child]) -> None:
    for child in reversed(children):  # brokers first: they unregister from name servers
        if child.proc is not None and child.proc.poll() is None:
            child.proc.terminate()
    for child in reversed(children):
        if child.proc is None:
            continue
        try:
            child.proc.wait(30)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait(10)
        if child.copier is not None:
            child.copier.join(10)  # the log is complete and the pipe closed
