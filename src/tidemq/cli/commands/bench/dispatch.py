"""``tidemq bench dispatch``: serial against concurrent consume-queue dispatch."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from tidemq.bench.dispatch import MODES, RATES, DispatchBenchConfig, run_dispatch_bench
from tidemq.cli.commands.bench.measure import measure
from tidemq.cli.commands.bench.options import DataDir, JsonOut, Queues, Size
from tidemq.cli.commands.bench.render import Report, Table, console, say, show

__all__ = ["dispatch", "report"]


def report(cfg: DispatchBenchConfig, result: dict[str, Any]) -> Report:
    """(a) the backlog drain rates, (b) the lag at each produce rate, the sweep and the
    GIL probe."""
    out = Report(result)
    backlog = result["backlog"]
    table = out.table(Table(
        f"(a) backlog of {cfg.messages:,} messages: drain rate, median of {cfg.repeat}",
        ("dispatcher", "msg/s", "LMQ entries/s", "msg per CPU-second")))
    for mode in MODES:
        rate = backlog[mode]["median_msgs_per_s"]
        table.add(mode, f"{rate:,.0f}", f"{rate * cfg.fanout:,.0f}",
                  f"{backlog[mode]['median_msgs_per_cpu_s']:,.0f}")
    table.add("concurrent / serial", f"{backlog['median_ratio']:.2f}x", "",
              f"{backlog['median_cpu_ratio']:.2f}x")
    sustained = result["sustained"]
    out.table(Table(f"(b) dispatch lag of every message, from its put to visible, "
                    f"{cfg.seconds:g} s per rate, median of {cfg.repeat} (ms)",
                    ("target msg/s", *(f"{mode} {what}" for mode in MODES
                                       for what in ("achieved", "lag p50 / p99"))),
                    [_lag_row(row) for row in sustained["table"]], left=0))
    best = sustained["max_sustained"]
    out.line(f"highest sustained rate (lag p99 <= {cfg.max_lag_ms:g} ms): "
             + ", ".join(f"{m} {best[m]:,.0f} msg/s" for m in MODES)
             + (f" ({best['concurrent'] / best['serial']:.2f}x)" if best["serial"] else ""))
    out.lines(f"sweep {row['knob']}={row['value']}: "
              f"{row['median_msgs_per_s']:,.0f} msg/s, {row['median_ratio']:.2f}x serial "
              f"({row['median_cpu_ratio']:.2f}x per CPU-second)"
              for row in result.get("sweep", []))
    if "gil" in result:
        out.table(Table("what releases the GIL: a spinning thread's progress during the "
                        "call over an idle window (1 released, 0.5 shared, 0 held)",
                        ("call", "ratio"),
                        [(name, f"{ratio:.2f}") for name, ratio in result["gil"].items()]))
    return out


def _lag_row(row: dict[str, Any]) -> list[str]:
    cells = [f"{row['rate']:,}"]
    for mode in MODES:
        m = row[mode]
        if m is None:
            cells += ["-", "-"]
            continue
        mark = "" if m["sustained_runs"] * 2 > m["runs"] else " [red]x[/]"
        cells += [f"{m['achieved_msgs_per_s']:,.0f}",
                  f"{m['lag_p50_ms']:.3f} / {m['lag_p99_ms']:.3f}{mark}"]
    return cells


def dispatch(
    messages: Annotated[int, typer.Option("--messages", min=1,
                                          help="Backlog size (part a).")] = 100_000,
    queues: Queues = 64,
    fanout: Annotated[int, typer.Option("--fanout", min=1, help="LMQs per message.")] = 10,
    lmqs: Annotated[int, typer.Option("--lmqs", min=1,
                                      help="LMQs the fan-out picks from.")] = 1000,
    size: Size = 128,
    rates: Annotated[str, typer.Option(
        "--rates", help="Produce rates of part b, msg/s, comma separated, increasing.")]
    = ",".join(map(str, RATES)),
    seconds: Annotated[float, typer.Option("--seconds", min=0.1,
                                           help="Seconds per rate.")] = 3.0,
    warmup: Annotated[float, typer.Option(
        "--warmup", min=0.0, help="Unmeasured seconds at the lowest rate first.")] = 1.0,
    max_lag_ms: Annotated[float, typer.Option(
        "--max-lag-ms", help="Lag p99 a sustained rate may reach.")] = 100.0,
    repeat: Annotated[int, typer.Option("--repeat", min=1,
                                        help="Runs per figure (medians quoted).")] = 3,
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, help="dispatchWorkers of the concurrent dispatcher.")] = None,
    ring_size: Annotated[int | None, typer.Option(
        "--ring-size", min=1, help="dispatchRingSize of the concurrent dispatcher.")] = None,
    round_records: Annotated[int | None, typer.Option(
        "--round-records", min=0, help="dispatchRoundRecords (0: unbounded).")] = None,
    sweep: Annotated[bool, typer.Option(
        "--sweep", help="Also time the backlog per workers / round / ring setting.")] = False,
    skip_gil: Annotated[bool, typer.Option("--skip-gil",
                                           help="Leave out the GIL probe.")] = False,
    data_dir: DataDir = None, json_out: JsonOut = None,
) -> None:
    """Serial vs concurrent consume-queue dispatch in one run (LMQ fan-out, keys indexed):
    backlog drain rate, and each message's dispatch lag p50/p99 at increasing produce rates."""
    try:
        rate_list = tuple(int(r) for r in rates.split(",") if r.strip())
    except ValueError:
        raise typer.BadParameter(f"--rates must be integers, got {rates!r}") from None
    if fanout > lmqs:
        raise typer.BadParameter("--fanout must not exceed --lmqs")
    cfg = DispatchBenchConfig(messages=messages, queues=queues, fanout=fanout, lmqs=lmqs,
                              body_size=size, rates=rate_list, seconds=seconds,
                              warmup=warmup, max_lag_ms=max_lag_ms, repeat=repeat, workers=workers,
                              ring_size=ring_size, round_records=round_records, sweep=sweep,
                              gil=not skip_gil, directory=data_dir)
    console.print(f"tidemq bench dispatch: {queues} queues, fan-out {fanout} of {lmqs} LMQs, "
                  f"keys indexed, {size} B bodies, median of {repeat}")
    result = measure(lambda: run_dispatch_bench(cfg, say))
    result["argv"] = sys.argv[1:]
    show(report(cfg, result), json_out)
