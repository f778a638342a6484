"""``tidemq bench batchcq``: RIP-26 batch consume queues, produce and consume phases."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from tidemq.bench.batchcq import BatchCqBenchConfig, run_batchcq
from tidemq.cli.commands.bench.measure import measure, run_async
from tidemq.cli.commands.bench.options import BrokerSet, DataDir, JsonOut, Queues, Size, Warmup
from tidemq.cli.commands.bench.render import Report, Table, console, num, pct, show, threads

__all__ = ["batchcq", "report"]

_RATIOS = (("inner_over_outer", "inner / outer"),
           ("zstd_over_inner", "inner-zstd / inner"),
           ("columns_over_objects", "consume-columns / consume"),
           ("zstd_columns_over_objects", "consume-zstd-columns / consume-zstd"))


def report(result: dict[str, Any]) -> Report:
    """A row per phase, the ratios, then where the broker's threads and the heaviest
    functions spent their time."""
    cfg = result["config"]
    out = Report(result)
    table = out.table(Table(
        f"tidemq bench batchcq ({cfg['size']} B messages, batches of {cfg['batch']}, "
        f"{cfg['in_flight']} sends in flight)",
        ("phase", "messages/s", "messages", "client CPU", "broker CPU", "client ns/msg",
         "broker ns/msg")))
    for name, row in result["phases"].items():
        table.add(name, f"{row['msgs_per_s']:,.0f}", f"{row['msgs']:,}",
                  pct(row["client_cpu_pct"]), pct(row["broker_cpu_pct"]),
                  f"{row['client_ns_per_msg']:,.0f}", f"{row['broker_ns_per_msg']:,.0f}")
    ratios = result["ratios"]
    for key, label in _RATIOS:
        value = ratios.get(key)
        out.line(f"{label}: {'-' if value is None else f'{value:.2f}'}")
    for name, row in result["phases"].items():
        if not name.startswith("consume") and row.get("broker_threads"):
            per_page = row.get("log_bytes_per_msg")
            logged = f" ({per_page:,.0f} commit-log bytes/msg)" if per_page else ""
            out.line(f"{name} broker user {num(row.get('broker_user_ns_per_msg'))} sys "
                     f"{num(row.get('broker_sys_ns_per_msg'))} ns/msg{logged}: "
                     f"{threads(row['broker_threads'])}", soft_wrap=True)
        for side, top in row.get("top", {}).items():
            out.line(f"[bold]{name} {side}[/]: " + "; ".join(
                f"{escape(fn)} {share:.0%}" for fn, share in top[:5]), soft_wrap=True)
    return out


def _print_phase(row: dict[str, Any]) -> None:
    console.print(f"{row['phase']:>13}: {row['msgs_per_s']:>12,.0f} msg/s  "
                  f"CPU client {pct(row['client_cpu_pct'])} broker "
                  f"{pct(row['broker_cpu_pct'])}", soft_wrap=True)


def batchcq(
    size: Size = 128,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Messages per send_batch.")]
    = 100,
    queues: Queues = 8,
    in_flight: Annotated[int, typer.Option("--in-flight", min=1,
                                           help="Concurrent send_batch calls.")] = 32,
    duration: Annotated[float, typer.Option("--duration", min=0.1,
                                            help="Seconds measured per produce phase.")] = 5.0,
    warmup: Warmup = 1.0,
    pull_batch: Annotated[int, typer.Option("--pull-batch", min=1,
                                            help="Messages per pull (maxMsgNums).")] = 2000,
    broker_set: BrokerSet = None, data_dir: DataDir = None,
    profile_dir: Annotated[Path | None, typer.Option(
        "--profile-dir", help="py-spy every phase (broker and client); collapsed stacks "
                              "written here and the heaviest functions printed.")] = None,
    json_out: JsonOut = None,
) -> None:
    """RIP-26 in one run: inner-batch produce (plain and zstd), outer-batch produce,
    consume of both inner topics (poll, then poll_batches: columns); messages/s and the
    inner/outer ratio."""
    cfg = BatchCqBenchConfig(size=size, batch=batch, queues=queues, in_flight=in_flight,
                             duration=duration, warmup=warmup, pull_batch=pull_batch,
                             broker_settings=tuple(broker_set or ()), data_dir=data_dir,
                             profile_dir=str(profile_dir) if profile_dir else None)

    def run() -> dict[str, Any]:
        cfg.check()
        return run_async(run_batchcq(cfg, _print_phase))

    show(report(measure(run)), json_out)
