"""``tidemq cluster``: a broker group with automatic failover on one machine, in one
command -- three name servers with the controller embedded (Raft among them) and three
brokers of one broker name in controller mode: the first to start becomes master, the
others its replicas.

Each server is a child process (``tidemq namesrv`` / ``tidemq broker``) logging to
``<data>/logs/<name>.log``; the command prints every address and process id, and stops
them all on Ctrl+C or SIGTERM. Kill the master's process (``kill -9 <pid>``) to watch a
replica take over within seconds (``tidemq admin getSyncStateSet -a <controllers>``).
A child that dies is reported and not restarted: start this command again to bring it
back (the stores are kept in ``<data>``). ``--set key=value`` sets a key on every broker,
as ``tidemq broker --set`` does on one.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tidemq.bench.group import plan_group, start_child, stop_children
from tidemq.cli.commands.server import _overrides
from tidemq.net.bind import LOOPBACK

__all__ = ["cluster", "register"]

console = Console(stderr=True)

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
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Set a key on every broker: --set mappedFileSizeCommitLog=67108864 "
                      "(repeatable).")] = None,
) -> None:
    """Run 3 name servers with embedded controllers and a 3-broker group with automatic
    failover on this machine (loopback unless --host says otherwise)."""
    children = plan_group(data, host, [namesrv_port + i for i in range(3)],
                          [raft_port + i for i in range(3)],
                          [broker_port + 10 * i for i in range(3)],
                          broker_name=broker_name, sync=sync, broker_settings=_overrides(set_))
    logs = data / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        for child in children:
            if stopping.is_set():
                return
            start_child(child, logs)
        namesrvs = ";".join(c.address for c in children if c.command == "namesrv")
        lines = [f"  {c.name:<10} {c.address:<22} pid {c.proc.pid if c.proc else '-'}"
                 for c in children]
        console.print("[bold green]TideMQ cluster is running[/]\n" + "\n".join(lines) + "\n"
                      f"  logs       {escape(str(logs.resolve()))}\n"
                      f"  try: tidemq admin getSyncStateSet -a '{namesrvs}'\n"
                      f"       tidemq admin sendMessage -n '{namesrvs}' -t Hello -p hi\n"
                      "Press Ctrl+C to stop.", highlight=False,
                      soft_wrap=True)  # whole lines, to copy, whatever the width
        reported: set[str] = set()
        while not stopping.wait(0.5):
            for child in children:
                if (child.proc is not None and child.proc.poll() is not None
                        and child.name not in reported):
                    reported.add(child.name)
                    console.print(f"[yellow]{child.name} exited ({child.proc.returncode})[/]; "
                                  "the others go on. To bring it back, stop this command "
                                  "(Ctrl+C) and start it again: the stores in "
                                  f"{escape(str(data))} are kept", highlight=False,
                                  soft_wrap=True)
    except RuntimeError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        console.print("stopping ...")
        stop_children(children)
        console.print("stopped")


def register(app: typer.Typer) -> None:
    app.command("cluster")(cluster)
