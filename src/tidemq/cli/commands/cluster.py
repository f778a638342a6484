"""``tidemq cluster``: a broker group with automatic failover on one machine, in one
command -- three name servers with the controller embedded (Raft among them) and three
brokers of one broker name in controller mode: the first to start becomes master, the
others its replicas.

Each server is a child process (``tidemq namesrv`` / ``tidemq broker``) logging to
``<data>/logs/<name>.log``; the command prints every address and process id, and stops
them all on Ctrl+C or SIGTERM. Kill the master's process (``kill -9 <pid>``) to watch a
replica take over within seconds (``tidemq admin getSyncStateSet -a <controllers>``).
A child that dies is reported and not restarted: start this command again to bring it
back (the stores are kept in ``<data>``).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Annotated

import typer
from rich.console import Console

from tidemq.net.bind import LOOPBACK, local_host

__all__ = ["Child", "cluster", "plan_cluster", "register"]

console = Console(stderr=True)

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

    def args(self) -> list[str]:
        sets = [a for key, value in self.settings.items() for a in ("--set", f"{key}={value}")]
        return [sys.executable, "-c", "from tidemq.cli.main import main; main()", self.command,
                *sets]


def plan_cluster(data: Path, host: str, namesrv_port: int, raft_port: int, broker_port: int,
                 broker_name: str, sync: bool) -> list[Child]:
    """The six servers, in start order (name servers first), with their settings."""
    local = local_host(host)
    namesrvs = [f"{local}:{namesrv_port + i}" for i in range(3)]
    peers = ";".join(f"n{i}-{local}:{raft_port + i}" for i in range(3))
    children = [
        Child(f"namesrv-{i}", "namesrv", {
            "listenPort": str(namesrv_port + i), "bindAddress": host,
            "enableControllerInNamesrv": "true", "controllerRaftPeers": peers,
            "controllerRaftSelfId": f"n{i}",
            "controllerStorePath": str(data / f"controller-{i}")}, namesrvs[i])
        for i in range(3)]
    for i in range(3):
        port = broker_port + 10 * i
        children.append(Child(f"broker-{i + 1}", "broker", {
            "brokerName": broker_name, "brokerId": str(i + 1), "listenPort": str(port),
            "bindAddress": host, "namesrvAddr": ";".join(namesrvs),
            "enableControllerMode": "true", "controllerAddr": ";".join(namesrvs),
            "brokerRole": "SYNC_MASTER" if sync else "ASYNC_MASTER",
            "storePathRootDir": str(data / f"broker-{i + 1}")}, f"{local}:{port}"))
    return children


def _start(child: Child, logs: Path) -> None:
    """Start ``child`` and return once its log says it serves."""
    log_path = logs / f"{child.name}.log"
    log_file: IO[bytes] = log_path.open("ab")
    ready = threading.Event()
    proc = subprocess.Popen(child.args(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
                            start_new_session=True)
    child.proc = proc

    def copy() -> None:  # the child's log to its file, watching for the ready line
        assert proc.stderr is not None
        for line in proc.stderr:
            log_file.write(line)
            log_file.flush()
            if READY[child.command].encode() in line:
                ready.set()
        ready.set()
        log_file.close()

    threading.Thread(target=copy, name=f"log-{child.name}", daemon=True).start()
    if not ready.wait(START_TIMEOUT) or proc.poll() is not None:
        raise RuntimeError(f"{child.name} did not start; see {log_path}")


def _stop(children: list[Child]) -> None:
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


def cluster(
    data: Annotated[Path, typer.Option(help="Data directory (stores, controller logs, "
                                            "server logs).")] = Path("./cluster"),
    host: Annotated[str, typer.Option(help="Address every server listens on.")] = LOOPBACK,
    namesrv_port: Annotated[int, typer.Option(
        help="First name-server port (three: this and the next two).")] = 9876,
    raft_port: Annotated[int, typer.Option(
        help="First controller Raft port (three).")] = 9880,
    broker_port: Annotated[int, typer.Option(
        help="First broker port (three, 10 apart; each broker's HA port is its port + 1).")
    ] = 10911,
    broker_name: Annotated[str, typer.Option(help="The broker group's name.")] = "broker-a",
    sync: Annotated[bool, typer.Option(
        "--sync/--async", help="SYNC_MASTER (a send waits for a replica) or ASYNC_MASTER.")
    ] = True,
) -> None:
    """Run 3 name servers with embedded controllers and a 3-broker group with automatic
    failover on this machine (loopback unless --host says otherwise)."""
    children = plan_cluster(data, host, namesrv_port, raft_port, broker_port, broker_name,
                            sync)
    logs = data / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        for child in children:
            if stopping.is_set():
                return
            _start(child, logs)
        namesrvs = ";".join(c.address for c in children if c.command == "namesrv")
        lines = [f"  {c.name:<10} {c.address:<22} pid {c.proc.pid if c.proc else '-'}"
                 for c in children]
        console.print("[bold green]TideMQ cluster is running[/]\n" + "\n".join(lines) + "\n"
                      f"  logs       {logs.resolve()}\n"
                      f"  try: tidemq admin getSyncStateSet -a '{namesrvs}'\n"
                      f"       tidemq admin sendMessage -n '{namesrvs}' -t Hello -p hi\n"
                      "Press Ctrl+C to stop.", highlight=False)
        reported: set[str] = set()
        while not stopping.wait(0.5):
            for child in children:
                if (child.proc is not None and child.proc.poll() is not None
                        and child.name not in reported):
                    reported.add(child.name)
                    console.print(f"[yellow]{child.name} exited ({child.proc.returncode})[/]; "
                                  "the others go on", highlight=False)
    except RuntimeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    finally:
        console.print("stopping ...")
        _stop(children)
        console.print("stopped")


def register(app: typer.Typer) -> None:
    app.command("cluster")(cluster)
