"""``tidemq bench batchproto``: the batch protocol against one RPC per queue."""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated, Any

import typer

from tidemq.bench.batch_protocol import (
    TARGET_RPC_REDUCTION,
    TARGET_SPEEDUP,
    BatchProtoBenchConfig,
    run_batch_protocol_bench,
    target_met,
)
from tidemq.cli.commands.bench.measure import measure, run_async
from tidemq.cli.commands.bench.options import BrokerSet, DataDir, JsonFile
from tidemq.cli.commands.bench.render import Report, Table, console, met, num, show

__all__ = ["batchproto", "report"]


def report(cfg: BatchProtoBenchConfig, results: dict[str, Any]) -> Report:
    """A row per workload: both modes side by side and the verdict."""
    out = Report({"command": "batchproto", "argv": sys.argv[1:],
                  "config": dataclasses.asdict(cfg), "results": results})
    table = out.table(Table(
        f"tidemq bench batchproto (body {cfg.size} B, pull {cfg.pull_batch}/queue, "
        f"median of {cfg.repeat})",
        ("workload", "msg/s off", "msg/s on", "speedup", "RPC/s off", "RPC/s on",
         "RPC reduction", "CPU us/msg off", "CPU us/msg on", "target")))
    for name, res in results.items():
        off, on = res["off"], res["on"]
        table.add(name, num(off["msgs_per_s_median"]), num(on["msgs_per_s_median"]),
                  f"{res['speedup']:.2f}x", num(off["rpcs_per_s"], ",.1f"),
                  num(on["rpcs_per_s"], ",.1f"), f"{res['rpc_reduction']:,.1f}x",
                  num(off["cpu_us_per_msg"], ",.1f"), num(on["cpu_us_per_msg"], ",.1f"),
                  met(target_met(res), "not met"))
    out.line(f"target: >= {TARGET_SPEEDUP:g}x msg/s and >= {TARGET_RPC_REDUCTION:g}x "
             "fewer RPCs per message with the batch protocol")
    return out


def _print_mode(name: str, mode: str, row: dict[str, Any]) -> None:
    console.print(f"{name:>18} {mode:>3}: {row['msgs_per_s']:>10,.0f} msg/s "
                  f"{row['rpcs_per_s']:>9,.1f} RPC/s  {num(row['msgs_per_rpc'], ',.1f')} "
                  f"msg/RPC  CPU client {num(row['client_cpu_pct'])}% broker "
                  f"{num(row['broker_cpu_pct'])}%", soft_wrap=True)


def batchproto(
    consume_queues: Annotated[list[int] | None, typer.Option(
        "--consume-queues", min=1, help="Queue counts of the consume workloads "
                                        "(repeatable; default 64 and 256).")] = None,
    produce_queues: Annotated[int, typer.Option(
        "--produce-queues", min=1, help="Queues the producer spreads over.")] = 64,
    messages: Annotated[int, typer.Option(
        "--messages", min=1, help="Messages per consume workload (all its queues).")]
    = 128_000,
    size: Annotated[int, typer.Option("--size", min=1, help="Body bytes.")] = 64,
    pull_batch: Annotated[int, typer.Option(
        "--pull-batch", min=1, help="Messages per queue per pull.")] = 32,
    produce_seconds: Annotated[float, typer.Option(
        "--produce-seconds", min=0.1, help="Seconds each produce run lasts.")] = 3.0,
    rounds_in_flight: Annotated[int, typer.Option(
        "--rounds-in-flight", min=1, help="Produce rounds (one message per queue) at once.")]
    = 4,
    repeat: Annotated[int, typer.Option(
        "--repeat", min=1, help="Runs per mode (the median is quoted).")] = 3,
    columns: Annotated[bool, typer.Option(
        "--columns", help="Also read each consume workload with poll_batches "
                          "(consume-columns-N).")] = False,
    broker_set: BrokerSet = None, data_dir: DataDir = None, json_out: JsonFile = None,
) -> None:
    """The batch protocol (issue #5516) against one RPC per queue, in one run against one
    broker process: a consumer of 64 and 256 queues, a producer over 64 queues."""
    cfg = BatchProtoBenchConfig(
        consume_queues=tuple(consume_queues or (64, 256)), produce_queues=produce_queues,
        messages=messages, size=size, pull_batch=pull_batch, produce_seconds=produce_seconds,
        rounds_in_flight=rounds_in_flight, repeat=repeat, columns=columns,
        broker_settings=tuple(broker_set or ()), data_dir=data_dir)

    def run() -> dict[str, Any]:
        cfg.check()
        return run_async(run_batch_protocol_bench(cfg, _print_mode))

    show(report(cfg, measure(run)), json_out)
