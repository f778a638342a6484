"""``tidemq bench``: throughput and latency workloads; prints a table, optionally JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tidemq.bench.store import WORKLOADS, StoreBenchConfig, run_store_bench

app = typer.Typer(no_args_is_help=True, help="Benchmarks (results go to docs/benchmarks.md).")
console = Console()


def _write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2))
        console.print(f"JSON written to {path}")


@app.command("store")
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
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
) -> None:
    """The store alone, one process: appends, batched appends, dispatch, reads, SYNC_FLUSH."""
    for name in workload or []:
        if name not in WORKLOADS:
            raise typer.BadParameter(f"unknown workload {name!r}; choose from {list(WORKLOADS)}")
    cfg = StoreBenchConfig(body_size=body_size, messages=messages, batch=batch, queues=queues,
                           appenders=appenders, sync_seconds=sync_seconds, repeat=repeat,
                           directory=directory)

    def report(name: str, run: dict[str, Any]) -> None:
        rate = run.get("msgs_per_s", run.get("entries_per_s", 0.0))
        extra = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in run.items() if k not in ("msgs_per_s", "entries_per_s"))
        console.print(f"{name:>13}: {rate:>12,.0f} /s   ({extra})")

    results = run_store_bench(cfg, workload, report)
    table = Table(title=f"tidemq bench store (body {body_size} B, median of {repeat})")
    table.add_column("workload")
    table.add_column("median rate /s", justify="right")
    for name, res in results.items():
        rate = next(v for k, v in res.items() if k.startswith("median_"))
        table.add_row(name, f"{rate:,.0f}")
    console.print(table)
    _write_json(json_out, {"command": "store", "config": vars(cfg) if hasattr(cfg, "__dict__")
                           else {f: getattr(cfg, f) for f in cfg.__slots__},
                           "results": results})
