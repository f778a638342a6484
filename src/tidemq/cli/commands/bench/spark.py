"""``tidemq bench spark``: the Spark source against the raw blocking client."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidemq.cli.commands.bench.measure import measure
from tidemq.cli.commands.bench.options import BrokerSet, DataDir, JsonOut, Namesrv, Queues
from tidemq.cli.commands.bench.render import Report, Table, say, show, verdicts

if TYPE_CHECKING:
    from tidemq.bench.spark import SparkBenchConfig

__all__ = ["report", "spark"]


def report(cfg: SparkBenchConfig, result: dict[str, Any]) -> Report:
    """A row per reader, then the verdicts."""
    out = Report(result)
    table = out.table(Table(
        f"tidemq bench spark ({cfg.messages:,} messages, {cfg.queues} queues, {cfg.master}, "
        f"pull batch {result['pull_batch']}, median of {cfg.repeat})",
        ("reader", "rows/s", "reader CPU us/row", "broker CPU us/row")))
    raw = f"raw BlockingPullConsumer x {result['raw']['workers']} processes"
    for name, res in ((raw, result["raw"]),
                      ("spark.read -> noop", result["spark"]["noop"]),
                      ("spark.read -> count()", result["spark"]["count"])):
        cpu = res["cpu_us_per_row"]
        reader = f"{cpu['client']:.2f}" if "client" in cpu else (
            f"{cpu['spark']:.2f} (JVM {cpu['jvm']:.2f})")
        table.add(name, f"{res['median_rows_per_s']:,.0f}", reader,
                  f"{cpu['broker']:.2f}" if "broker" in cpu else "-")
    out.lines(verdicts(result["verdicts"]))
    return out


def spark(
    messages: Annotated[int, typer.Option("--messages", min=1,
                                          help="Messages filled, then read.")] = 1_000_000,
    queues: Queues = 4,
    batch: Annotated[int, typer.Option("--batch", min=1,
                                       help="Messages per send_batch of the fill.")] = 1000,
    producers: Annotated[int, typer.Option("--producers", min=1,
                                           help="Threads filling the topic.")] = 4,
    pull_batch: Annotated[int | None, typer.Option(
        "--pull-batch", min=1, help="Messages per pull (default: the source's).")] = None,
    master: Annotated[str, typer.Option("--master", help="Spark master.")] = "local[2]",
    repeat: Annotated[int, typer.Option("--repeat", min=1,
                                        help="Timed runs per reader (medians quoted).")] = 3,
    namesrv: Namesrv = None, broker_set: BrokerSet = None, data_dir: DataDir = None,
    json_out: JsonOut = None,
) -> None:
    """The Spark source against the raw blocking client, one run: fill a topic, read it
    all with BlockingPullConsumer, then with spark.read (noop sink and count())."""
    from tidemq.bench.spark import SparkBenchConfig, run_spark_bench

    cfg = SparkBenchConfig(messages=messages, queues=queues, batch=batch,
                           producers=producers, pull_batch=pull_batch, master=master,
                           repeat=repeat, namesrv=namesrv,
                           broker_settings=tuple(broker_set or ()), data_dir=data_dir)

    def run() -> dict[str, Any]:
        cfg.check()
        return run_spark_bench(cfg, say)

    result = measure(run)
    result["argv"] = sys.argv[1:]
    show(report(cfg, result), json_out)
