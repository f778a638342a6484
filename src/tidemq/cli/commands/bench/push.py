"""``tidemq bench push``: push-consumer throughput and the rebalance time."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidemq.cli.commands.bench.measure import measure
from tidemq.cli.commands.bench.options import JsonFile
from tidemq.cli.commands.bench.render import Report, Table, show

if TYPE_CHECKING:
    from tidemq.bench.push import PushBenchConfig

__all__ = ["push", "report"]


def report(cfg: PushBenchConfig, result: dict[str, Any]) -> Report:
    """A row per run, then the medians."""
    out = Report({"command": "push", "config": dataclasses.asdict(cfg), "results": result})
    out.table(Table(f"tidemq bench push ({cfg.messages:,} x 128 B, median of {cfg.repeat})",
                    ("run", "msgs/s", "client CPU", "broker CPU", "rebalance (4th member)"),
                    [(str(i + 1), f"{r['msgs_per_s']:,.0f}", f"{r['client_cpu_pct']:.0f}%",
                      f"{r['broker_cpu_pct']:.0f}%", f"{r['rebalance_s'] * 1000:.1f} ms")
                     for i, r in enumerate(result["runs"])], left=0))
    out.line(f"median: {result['median_msgs_per_s']:,.0f} msgs/s, rebalance "
             f"{result['median_rebalance_s'] * 1000:.1f} ms")
    return out


def push(
    messages: Annotated[int, typer.Option(help="Messages pre-filled and consumed.")] = 200_000,
    queues: Annotated[int, typer.Option(help="Queues of the topic.")] = 8,
    batch: Annotated[int, typer.Option(help="Messages per listener call.")] = 32,
    pull_batch: Annotated[int, typer.Option(help="Messages per pull request.")] = 1000,
    repeat: Annotated[int, typer.Option(help="Runs (the median is quoted).")] = 3,
    json_out: JsonFile = None,
) -> None:
    """Push-consumer throughput (trivial listener) and the rebalance time of a 4th member."""
    from tidemq.bench.push import PushBenchConfig, run_push_bench

    cfg = PushBenchConfig(messages=messages, queues=queues, batch=batch, pull_batch=pull_batch,
                          repeat=repeat)
    show(report(cfg, measure(lambda: run_push_bench(cfg))), json_out)
