"""``tidemq bench lmq``: RIP-28 light message queues at scale."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from tidemq.bench.lmq import LmqBenchConfig, run_lmq_bench, summary_rows
from tidemq.cli.commands.bench.measure import measure
from tidemq.cli.commands.bench.options import DataDir, JsonOut, Size
from tidemq.cli.commands.bench.render import Report, figures, say, show, verdicts
from tidemq.errors import TideMQError

__all__ = ["lmq", "report"]


def report(cfg: LmqBenchConfig, result: dict[str, Any]) -> Report:
    """The figures of every phase (plain text: an error quoted in one keeps its
    brackets), then the verdicts."""
    out = Report(result)
    out.table(figures(f"tidemq bench lmq ({cfg.lmqs:,} LMQs, fan-out {cfg.fanout})",
                      [(what, escape(value)) for what, value in summary_rows(result)]))
    out.lines(verdicts(result["verdicts"]))
    return out


def lmq(
    lmqs: Annotated[int, typer.Option("--lmqs", min=1, help="Distinct LMQs built.")]
    = 1_000_000,
    fanout: Annotated[int, typer.Option("--fanout", min=1, help="LMQs per message.")] = 10,
    size: Size = 100,
    pulls: Annotated[int, typer.Option("--pulls", min=1, help="Random-LMQ pulls timed.")]
    = 2000,
    wire_messages: Annotated[int, typer.Option(
        "--wire-messages", min=1, help="Fan-out sends over the wire.")] = 5000,
    compare_queues: Annotated[int, typer.Option(
        "--compare-queues", min=1,
        help="Queues of the file-per-queue comparison, fewer where the hard fd limit "
             "cannot hold two fds a file queue.")]
    = 20_000,
    compare_messages: Annotated[int, typer.Option(
        "--compare-messages", min=1, help="Messages of the comparison.")] = 20_000,
    segment_size: Annotated[int, typer.Option(
        "--segment-size", min=4096, help="mappedFileSizeCommitLog, bytes.")] = 1 << 30,
    skip_compare: Annotated[bool, typer.Option("--skip-compare",
                                               help="Leave out phase d.")] = False,
    data_dir: DataDir = None, json_out: JsonOut = None,
) -> None:
    """RIP-28 at scale in one run: a million LMQs (RSS, restart), fan-out dispatch,
    random-LMQ pull latency, and this store against file-per-queue consume queues at
    --compare-queues LMQs; where the hard fd limit cannot hold two fds a file queue, at
    as many as it can (and this store at the full count too)."""
    cfg = LmqBenchConfig(lmqs=lmqs, fanout=fanout, body_size=size, pulls=pulls,
                         wire_messages=wire_messages, compare_queues=compare_queues,
                         compare_messages=compare_messages, segment_size=segment_size,
                         skip_compare=skip_compare, directory=data_dir)

    def run() -> dict[str, Any]:
        cfg.check()
        return run_lmq_bench(cfg, say)

    result = measure(run, failures=(TideMQError, RuntimeError))
    result["argv"] = sys.argv[1:]
    show(report(cfg, result), json_out)
