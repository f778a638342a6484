"""``tidemq bench migration``: a RIP-21 logical queue migrating under load."""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated, Any

import typer

from tidemq.bench.migration import MigrationBenchConfig, run_migration_bench
from tidemq.cli.commands.bench.measure import measure
from tidemq.cli.commands.bench.options import InFlight, JsonOut, Queues, Size
from tidemq.cli.commands.bench.render import Report, Table, met, show

__all__ = ["migration", "report"]

#: Seconds from the start of a migration to the first write on the new segment.
FIRST_WRITE_TARGET_S = 1.0


def report(cfg: MigrationBenchConfig, result: dict[str, Any]) -> Report:
    """Rates before, during and after the migration, its times and the verdict."""
    out = Report(result)
    med = result["median"]
    whens = ("before", "during", "after")
    out.table(Table(f"tidemq bench migration ({cfg.queues} logical queues, {cfg.in_flight} "
                    f"sends in flight, median of {cfg.repeat})", ("figure", *whens),
                    [(f"{kind} msgs/s", *(f"{med[f'{kind}_{w}']:,.0f}" for w in whens))
                     for kind in ("produce", "consume")]))
    out.line(f"migrate: {med['migrate_s'] * 1000:.1f} ms; first write on the new "
             f"segment: {med['first_write_s'] * 1000:.1f} ms after the start")
    out.line(f"first_write_s: {med['first_write_s']:.3g} (target {FIRST_WRITE_TARGET_S:g}) "
             f"{met(med['first_write_s'] <= FIRST_WRITE_TARGET_S)}")
    return out


def migration(
    queues: Queues = 4,
    warmup: Annotated[float, typer.Option(
        "--warmup", min=0.5, help="Seconds of load before the migration.")] = 3.0,
    after: Annotated[float, typer.Option(
        "--after", min=1.5, help="Seconds of load after it.")] = 3.0,
    in_flight: InFlight = 16, size: Size = 128,
    repeat: Annotated[int, typer.Option("--repeat", min=1,
                                        help="Runs (medians quoted).")] = 3,
    json_out: JsonOut = None,
) -> None:
    """A logical queue migrating under load (RIP-21), in-process three-broker cluster:
    migrate time, time to the first write on the new segment, msgs/s before/during/after."""
    cfg = MigrationBenchConfig(queues=queues, warmup=warmup, after=after, in_flight=in_flight,
                               body_size=size, repeat=repeat)
    result = measure(lambda: run_migration_bench(cfg))
    result["argv"] = sys.argv[1:]
    result["config"] = dataclasses.asdict(cfg)
    show(report(cfg, result), json_out)
