"""``tidemq bench store``: the store alone, in one process."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from tidemq.bench.store import WORKLOADS, StoreBenchConfig, run_store_bench
from tidemq.cli.commands.bench.measure import measure
from tidemq.cli.commands.bench.options import JsonFile
from tidemq.cli.commands.bench.render import Report, Table, console, show

__all__ = ["report", "store"]


def report(cfg: StoreBenchConfig, results: dict[str, Any]) -> Report:
    """The median rate of every workload."""
    out = Report({"command": "store", "config": dataclasses.asdict(cfg), "results": results})
    table = out.table(Table(f"tidemq bench store (body {cfg.body_size} B, median of "
                            f"{cfg.repeat})", ("workload", "median rate /s")))
    for name, res in results.items():
        rate = next(v for k, v in res.items() if k.startswith("median_"))
        table.add(name, f"{rate:,.0f}")
    return out


def _print_run(name: str, run: dict[str, Any]) -> None:
    rate = run.get("msgs_per_s", run.get("entries_per_s", 0.0))
    extra = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in run.items() if k not in ("msgs_per_s", "entries_per_s"))
    console.print(f"{name:>13}: {rate:>12,.0f} /s   ({extra})")


def store(
    messages: Annotated[int, typer.Option(help="Messages per workload run.")] = 1_000_000,
    body_size: Annotated[int, typer.Option(help="Body bytes.")] = 128,
    batch: Annotated[int, typer.Option(help="Messages per put_batch call.")] = 100,
    queues: Annotated[int, typer.Option(help="Queues written round robin.")] = 8,
    appenders: Annotated[int, typer.Option(help="Threads in the SYNC_FLUSH workload.")] = 64,
    sync_seconds: Annotated[float, typer.Option(help="Duration of the SYNC_FLUSH run.")] = 3.0,
    repeat: Annotated[int, typer.Option(help="Runs per workload (the median is quoted).")] = 3,
    workload: Annotated[list[str] | None, typer.Option(
        help=f"Workloads to run: {', '.join(WORKLOADS)} (default all).")] = None,
    directory: Annotated[str | None, typer.Option(help="Where to create stores.")] = None,
    json_out: JsonFile = None,
) -> None:
    """The store alone, one process: appends, batched appends, dispatch, reads, SYNC_FLUSH."""
    for name in workload or []:
        if name not in WORKLOADS:
            raise typer.BadParameter(f"unknown workload {name!r}; choose from {list(WORKLOADS)}")
    cfg = StoreBenchConfig(body_size=body_size, messages=messages, batch=batch, queues=queues,
                           appenders=appenders, sync_seconds=sync_seconds, repeat=repeat,
                           directory=directory)
    show(report(cfg, measure(lambda: run_store_bench(cfg, workload, _print_run))), json_out)
