"""``tidemq bench failover``: kill -9 of a SYNC master to the first acknowledged send."""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated, Any

import typer

from tidemq.bench.failover import FailoverBenchConfig, run_failover_bench
from tidemq.cli.commands.bench.measure import measure
from tidemq.cli.commands.bench.options import JsonOut
from tidemq.cli.commands.bench.render import Report, Table, met, show

__all__ = ["failover", "report"]

#: Seconds from the kill to the first acknowledged send on the new master.
FAILOVER_TARGET_S = 5.0


def report(cfg: FailoverBenchConfig, result: dict[str, Any]) -> Report:
    out = Report(result)
    runs = result["runs"]
    out.table(Table(f"tidemq bench failover ({cfg.repeat} runs, SYNC_MASTER, 2 replicas)",
                    ("run", "elected s", "first ack s", "attempts"),
                    [(str(i + 1), f"{r['elected_s']:.2f}", f"{r['failover_s']:.2f}",
                      str(r["attempts"])) for i, r in enumerate(runs)]))
    med = result["median"]
    out.line(f"failover_s: {med['failover_s']:.3g} median (target {FAILOVER_TARGET_S:g}) "
             f"{met(med['failover_s'] <= FAILOVER_TARGET_S)}")
    return out


def failover(
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs (median quoted).")] = 3,
    warmup: Annotated[int, typer.Option("--warmup", min=1,
                                        help="Acknowledged sends before the kill.")] = 200,
    lease_ms: Annotated[int | None, typer.Option(
        "--lease-ms", help="The brokers' controllerHeartBeatTimeoutMills, with their "
                           "heartbeats every sixth of it (default: the brokers' defaults).")
    ] = None,
    json_out: JsonOut = None,
) -> None:
    """kill -9 of a SYNC master (3 controllers, 1 master, 2 replicas as processes) to the
    first acknowledged send on the new master."""
    cfg = FailoverBenchConfig(repeat=repeat, warmup=warmup, lease_ms=lease_ms)
    result = measure(lambda: run_failover_bench(cfg))
    result["argv"] = sys.argv[1:]
    result["config"] = dataclasses.asdict(cfg)
    show(report(cfg, result), json_out)
