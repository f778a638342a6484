"""``tidemq bench``: throughput and latency workloads; prints a table, optionally JSON."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tidemq.bench.batch_protocol import (
    TARGET_RPC_REDUCTION,
    TARGET_SPEEDUP,
    BatchProtoBenchConfig,
    run_batch_protocol_bench,
    target_met,
)
from tidemq.bench.batchcq import BatchCqBenchConfig, run_batchcq
from tidemq.bench.broker import BrokerBenchConfig, run_consume, run_latency, run_produce
from tidemq.bench.dispatch import MODES, DispatchBenchConfig, run_dispatch_bench
from tidemq.bench.lmq import LmqBenchConfig, run_lmq_bench, summary_rows
from tidemq.bench.migration import MigrationBenchConfig, run_migration_bench
from tidemq.bench.store import WORKLOADS, StoreBenchConfig, run_store_bench
from tidemq.errors import TideMQError

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


# ---------------------------------------------------------------------- broker workloads

Namesrv = Annotated[str | None, typer.Option(
    "-n", "--namesrv", help="Load a running cluster instead of starting a broker process.")]
Flush = Annotated[str, typer.Option(
    "--flush", help="flushDiskType of the broker process: ASYNC_FLUSH or SYNC_FLUSH.")]
TopicOpt = Annotated[str, typer.Option("--topic", help="Topic (created if needed).")]
Queues = Annotated[int, typer.Option("--queues", min=1, help="Queues of the topic.")]
Size = Annotated[int, typer.Option("--size", min=1, help="Body bytes.")]
Producers = Annotated[int, typer.Option(
    "--producers", "--connections", min=1, help="Producers, each with its own connection.")]
InFlight = Annotated[int, typer.Option("--in-flight", min=1, help="Concurrent sends.")]
Duration = Annotated[float, typer.Option("--duration", min=0.1, help="Seconds measured.")]
Warmup = Annotated[float, typer.Option(
    "--warmup", min=0.0, help="First seconds left out of the summary.")]
BrokerSet = Annotated[list[str] | None, typer.Option(
    "--broker-set", help="Extra broker setting KEY=VALUE (repeatable).")]
Profile = Annotated[str | None, typer.Option(
    "--profile", help="Run the broker under py-spy; flame graph (.svg) or collapsed "
                      "stacks (.txt) written here.")]
DataDir = Annotated[str | None, typer.Option(
    "--data-dir", help="Parent of the broker's temporary data directory.")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="Write results as JSON here.")]
Raw = Annotated[bool, typer.Option(
    "--raw", help="Pre-built requests, no per-message client work: the broker's figures.")]

Linger = Annotated[float | None, typer.Option(
    "--linger-ms", min=0.0,
    help="Send each message through an AutoBatchProducer lingering this long (one future "
         "per message; batches of one queue shipped as send_batch).")]
MaxBatch = Annotated[int, typer.Option(
    "--max-batch", min=1, help="With --linger-ms: messages per batch at most.")]
MaxBatchBytes = Annotated[int, typer.Option(
    "--max-batch-bytes", min=1, help="With --linger-ms: bytes per batch at most.")]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _print_second(row: dict[str, Any]) -> None:
    extra = ""
    if "sent_per_s" in row:
        extra = f"  sent {row['sent_per_s']:,.0f}/s ack-p99 {_ms(row['ack_p99_ms'])} ms"
    errors = f"  [red]errors {row['errors']}[/]" if row["errors"] else ""
    console.print(f"{row['t']:>6.1f}s {row['msgs_per_s']:>10,.0f} msg/s  "
                  f"p50 {_ms(row['p50_ms'])} p99 {_ms(row['p99_ms'])} "
                  f"p999 {_ms(row['p999_ms'])} ms  "
                  f"CPU client {_pct(row['client_cpu_pct'])} broker "
                  f"{_pct(row['broker_cpu_pct'])}{extra}{errors}", soft_wrap=True)


def _print_summary(title: str, result: dict[str, Any]) -> None:
    s = result["summary"]
    table = Table(title=title, show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("messages/s (mean)", f"{s.get('msgs_per_s', 0):,.0f}"),
            ("messages/s (median second)", f"{s.get('median_msgs_per_s', 0):,.0f}"),
            ("latency p50 / p99 / p999 ms",
             f"{_ms(s.get('p50_ms'))} / {_ms(s.get('p99_ms'))} / {_ms(s.get('p999_ms'))}"),
            ("client CPU", _pct(s.get("client_cpu_pct"))),
            ("broker CPU", _pct(s.get("broker_cpu_pct"))),
            ("CPU µs per message client / broker",
             f"{_us(s.get('client_cpu_us_per_msg'))} / {_us(s.get('broker_cpu_us_per_msg'))}"),
            ("errors", str(s.get("errors", 0)))]
    rows += [(k.replace("_", " "), f"{v:,.0f}" if isinstance(v, float) else str(v))
             for k, v in s.items() if k.startswith(("prefill", "consumed", "sent", "skipped",
                                                     "received", "complete"))]
    if isinstance(s.get("ack"), dict):
        ack = s["ack"]
        rows.append(("send ack p50 / p99 / p999 ms",
                     f"{_ms(ack['p50_ms'])} / {_ms(ack['p99_ms'])} / {_ms(ack['p999_ms'])}"))
    if s.get("last_error"):
        rows.append(("last error", str(s["last_error"])))
    for figure, value in rows:
        table.add_row(figure, value)
    console.print(table)


def _linger_note(cfg: BrokerBenchConfig) -> str:
    if cfg.linger_ms is None:
        return ""
    return (f", auto-batched (linger {cfg.linger_ms:g} ms, at most {cfg.max_batch} messages "
            f"and {cfg.max_batch_bytes:,} bytes per batch)")


def _broker_bench(kind: str, cfg: BrokerBenchConfig, json_out: Path | None) -> None:
    runner = {"produce": run_produce, "consume": run_consume, "latency": run_latency}[kind]
    target = cfg.namesrv or f"a new broker process ({cfg.flush})"
    console.print(f"tidemq bench {kind}: {target}, topic {cfg.topic} x {cfg.queues} queues, "
                  f"{cfg.size} B bodies{', raw requests' if cfg.raw else ''}"
                  f"{_linger_note(cfg)}", soft_wrap=True)
    try:
        cfg.check()
        result = _run_async(runner(cfg, _print_second))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except TideMQError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    result["argv"] = sys.argv[1:]
    _print_summary(f"tidemq bench {kind} (first {cfg.warmup:g} s left out)", result)
    if "columns" in result:
        _print_summary(f"tidemq bench {kind}, columns: poll_batches (same run)",
                       result["columns"])
    _write_json(json_out, result)


def _run_async(coro: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """Run on uvloop when it is installed (as the servers do)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


@app.command("produce")
def produce(
    namesrv: Namesrv = None, flush: Flush = "ASYNC_FLUSH", topic: TopicOpt = "BenchTopic",
    queues: Queues = 8, size: Size = 128,
    batch: Annotated[int, typer.Option("--batch", min=1,
                                       help="Messages per send (send_batch when > 1).")] = 1,
    producers: Producers = 1, in_flight: InFlight = 256, duration: Duration = 10.0,
    warmup: Warmup = 1.0, raw: Raw = False, linger_ms: Linger = None,
    max_batch: MaxBatch = 1024, max_batch_bytes: MaxBatchBytes = 32 * 1024,
    broker_set: BrokerSet = None,
    profile: Profile = None, data_dir: DataDir = None, json_out: JsonOut = None,
) -> None:
    """Send as fast as IN_FLIGHT concurrent sends allow; rate and per-send latency."""
    _broker_bench("produce", BrokerBenchConfig(
        namesrv=namesrv, flush=flush, topic=topic, queues=queues, size=size, batch=batch,
        producers=producers, in_flight=in_flight, duration=duration, warmup=warmup, raw=raw,
        linger_ms=linger_ms, max_batch=max_batch, max_batch_bytes=max_batch_bytes,
        broker_settings=tuple(broker_set or ()), profile=profile, data_dir=data_dir),
        json_out)


@app.command("consume")
def consume(
    namesrv: Namesrv = None, flush: Flush = "ASYNC_FLUSH", topic: TopicOpt = "BenchTopic",
    queues: Queues = 8, size: Size = 128,
    messages: Annotated[int, typer.Option("--messages", min=1,
                                          help="Messages pre-filled, then read.")] = 1_000_000,
    pull_batch: Annotated[int, typer.Option("--pull-batch", min=1,
                                            help="Messages per pull (maxMsgNums).")] = 1000,
    producers: Producers = 1, duration: Annotated[float, typer.Option(
        "--duration", min=0.1, help="At most this many seconds of reading.")] = 60.0,
    warmup: Warmup = 0.0, raw: Raw = False,
    columns: Annotated[bool, typer.Option(
        "--columns", help="Then read the same messages again with poll_batches (columns, "
                          "every body taken): a second row of the same run.")] = False,
    broker_set: BrokerSet = None,
    profile: Profile = None, data_dir: DataDir = None, json_out: JsonOut = None,
) -> None:
    """Pre-fill a topic, then read it back with PullConsumer.poll; messages/s."""
    _broker_bench("consume", BrokerBenchConfig(
        namesrv=namesrv, flush=flush, topic=topic, queues=queues, size=size,
        messages=messages, pull_batch=pull_batch, producers=producers, duration=duration,
        warmup=warmup, raw=raw, columns=columns, broker_settings=tuple(broker_set or ()),
        profile=profile, data_dir=data_dir), json_out)


@app.command("latency")
def latency(
    namesrv: Namesrv = None, flush: Flush = "ASYNC_FLUSH", topic: TopicOpt = "BenchTopic",
    queues: Queues = 8, size: Size = 128,
    rate: Annotated[int, typer.Option("--rate", min=1, help="Messages sent per second.")]
    = 5000,
    in_flight: Annotated[int, typer.Option(
        "--in-flight", min=1, help="Sends outstanding at most (more are skipped).")] = 1024,
    pull_batch: Annotated[int, typer.Option("--pull-batch", min=1,
                                            help="Messages per pull at most.")] = 1000,
    duration: Duration = 10.0, warmup: Warmup = 1.0, linger_ms: Linger = None,
    max_batch: MaxBatch = 1024, max_batch_bytes: MaxBatchBytes = 32 * 1024,
    broker_set: BrokerSet = None,
    profile: Profile = None, data_dir: DataDir = None, json_out: JsonOut = None,
) -> None:
    """End-to-end latency at a fixed rate: send time in the body to receipt by a
    long-polling consumer."""
    _broker_bench("latency", BrokerBenchConfig(
        namesrv=namesrv, flush=flush, topic=topic, queues=queues, size=size, rate=rate,
        in_flight=in_flight, pull_batch=pull_batch, duration=duration, warmup=warmup,
        linger_ms=linger_ms, max_batch=max_batch, max_batch_bytes=max_batch_bytes,
        broker_settings=tuple(broker_set or ()), profile=profile, data_dir=data_dir),
        json_out)


# ---------------------------------------------------------------------- RIP-26


def _print_batchcq(result: dict[str, Any]) -> None:
    cfg = result["config"]
    table = Table(title=f"tidemq bench batchcq ({cfg['size']} B messages, batches of "
                        f"{cfg['batch']}, {cfg['in_flight']} sends in flight)")
    for col in ("phase", "messages/s", "messages", "client CPU", "broker CPU",
                "client ns/msg", "broker ns/msg"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for name, row in result["phases"].items():
        table.add_row(name, f"{row['msgs_per_s']:,.0f}", f"{row['msgs']:,}",
                      _pct(row["client_cpu_pct"]), _pct(row["broker_cpu_pct"]),
                      f"{row['client_ns_per_msg']:,.0f}", f"{row['broker_ns_per_msg']:,.0f}")
    console.print(table)
    ratios = result["ratios"]
    for key, label in (("inner_over_outer", "inner / outer"),
                       ("zstd_over_inner", "inner-zstd / inner"),
                       ("columns_over_objects", "consume-columns / consume"),
                       ("zstd_columns_over_objects", "consume-zstd-columns / consume-zstd")):
        value = ratios.get(key)
        console.print(f"{label}: {'-' if value is None else f'{value:.2f}'}")
    for name, row in result["phases"].items():
        if not name.startswith("consume") and row.get("broker_threads"):
            per_page = row.get("log_bytes_per_msg")
            logged = f" ({per_page:,.0f} commit-log bytes/msg)" if per_page else ""
            console.print(f"{name} broker threads{logged}: " + "; ".join(
                f"{t['thread']} {t['cpu_pct']:.0f}% (sys {t['sys_pct']:.0f}%) "
                f"{t['ns_per_msg']:,.0f} ns/msg" for t in row["broker_threads"][:5]),
                soft_wrap=True)
        for side, top in row.get("top", {}).items():
            console.print(f"[bold]{name} {side}[/]: " + "; ".join(
                f"{escape(fn)} {share:.0%}" for fn, share in top[:5]), soft_wrap=True)


@app.command("batchcq")
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

    def report(row: dict[str, Any]) -> None:
        console.print(f"{row['phase']:>13}: {row['msgs_per_s']:>12,.0f} msg/s  "
                      f"CPU client {_pct(row['client_cpu_pct'])} broker "
                      f"{_pct(row['broker_cpu_pct'])}", soft_wrap=True)

    try:
        cfg.check()
        result = _run_async(run_batchcq(cfg, report))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except TideMQError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    _print_batchcq(result)
    _write_json(json_out, result)


# ---------------------------------------------------------------------- RIP-28


@app.command("lmq")
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
        "--compare-queues", min=1, help="Queues of the file-per-queue comparison.")]
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
    random-LMQ pull latency, and file-per-queue consume queues at 20,000 LMQs."""
    cfg = LmqBenchConfig(lmqs=lmqs, fanout=fanout, body_size=size, pulls=pulls,
                         wire_messages=wire_messages, compare_queues=compare_queues,
                         compare_messages=compare_messages, segment_size=segment_size,
                         skip_compare=skip_compare, directory=data_dir)
    try:
        cfg.check()
        result = run_lmq_bench(cfg, lambda line: console.print(escape(line), soft_wrap=True))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except (TideMQError, RuntimeError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    result["argv"] = sys.argv[1:]
    table = Table(title=f"tidemq bench lmq ({lmqs:,} LMQs, fan-out {fanout})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for what, value in summary_rows(result):
        table.add_row(what, value)
    console.print(table)
    for key, v in result["verdicts"].items():
        mark = "[green]met[/]" if v["met"] else "[red]NOT met[/]"
        console.print(f"{key}: {v['value']:,.3g} (target {v['target']:,}) {mark}")
    _write_json(json_out, result)


# ---------------------------------------------------------------------- concurrent dispatch


@app.command("dispatch")
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
    = "2000,4000,8000,12000,16000,20000,25000,30000,35000,40000",
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
    backlog drain rate, and dispatch lag p50/p99 at increasing produce rates."""
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
    result = run_dispatch_bench(cfg, lambda line: console.print(escape(line), soft_wrap=True))
    result["argv"] = sys.argv[1:]
    _print_dispatch(result, cfg)
    _write_json(json_out, result)


def _print_dispatch(result: dict[str, Any], cfg: DispatchBenchConfig) -> None:
    backlog = result["backlog"]
    table = Table(title=f"(a) backlog of {cfg.messages:,} messages: drain rate, median of "
                        f"{cfg.repeat}")
    table.add_column("dispatcher")
    table.add_column("msg/s", justify="right")
    table.add_column("LMQ entries/s", justify="right")
    table.add_column("msg per CPU-second", justify="right")
    for mode in MODES:
        rate = backlog[mode]["median_msgs_per_s"]
        table.add_row(mode, f"{rate:,.0f}", f"{rate * cfg.fanout:,.0f}",
                      f"{backlog[mode]['median_msgs_per_cpu_s']:,.0f}")
    table.add_row("concurrent / serial", f"{backlog['median_ratio']:.2f}x", "",
                  f"{backlog['median_cpu_ratio']:.2f}x")
    console.print(table)
    sustained = result["sustained"]
    table = Table(title=f"(b) dispatch lag sampled every 10 ms, {cfg.seconds:g} s per rate, "
                        f"median of {cfg.repeat} (ms)")
    table.add_column("target msg/s", justify="right")
    for mode in MODES:
        table.add_column(f"{mode} achieved", justify="right")
        table.add_column(f"{mode} lag p50 / p99", justify="right")
    for row in sustained["table"]:
        cells = [f"{row['rate']:,}"]
        for mode in MODES:
            m = row[mode]
            if m is None:
                cells += ["-", "-"]
                continue
            mark = "" if m["sustained_runs"] * 2 > m["runs"] else " [red]x[/]"
            cells += [f"{m['achieved_msgs_per_s']:,.0f}",
                      f"{m['lag_p50_ms']:.1f} / {m['lag_p99_ms']:.1f}{mark}"]
        table.add_row(*cells)
    console.print(table)
    best = sustained["max_sustained"]
    console.print(f"highest sustained rate (lag p99 <= {cfg.max_lag_ms:g} ms): "
                  + ", ".join(f"{m} {best[m]:,.0f} msg/s" for m in MODES)
                  + (f" ({best['concurrent'] / best['serial']:.2f}x)" if best["serial"]
                     else ""))
    for row in result.get("sweep", []):
        console.print(f"sweep {row['knob']}={row['value']}: "
                      f"{row['median_msgs_per_s']:,.0f} msg/s, {row['median_ratio']:.2f}x serial "
                      f"({row['median_cpu_ratio']:.2f}x per CPU-second)")
    if "gil" in result:
        table = Table(title="what releases the GIL: a spinning thread's progress during the "
                            "call over an idle window (1 released, 0.5 shared, 0 held)")
        table.add_column("call")
        table.add_column("ratio", justify="right")
        for name, ratio in result["gil"].items():
            table.add_row(name, f"{ratio:.2f}")
        console.print(table)


# ---------------------------------------------------------------------- Spark source


@app.command("spark")
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
    try:
        cfg.check()
        result = run_spark_bench(cfg, lambda line: console.print(escape(line), soft_wrap=True))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except TideMQError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    result["argv"] = sys.argv[1:]
    table = Table(title=f"tidemq bench spark ({messages:,} messages, {queues} queues, "
                        f"{master}, pull batch {result['pull_batch']}, median of {repeat})")
    for col in ("reader", "rows/s", "reader CPU us/row", "broker CPU us/row"):
        table.add_column(col, justify="left" if col == "reader" else "right")
    rows = [("raw BlockingPullConsumer", result["raw"]),
            ("spark.read -> noop", result["spark"]["noop"]),
            ("spark.read -> count()", result["spark"]["count"])]
    for name, res in rows:
        cpu = res["cpu_us_per_row"]
        reader = f"{cpu['client']:.2f}" if "client" in cpu else (
            f"{cpu['spark']:.2f} (JVM {cpu['jvm']:.2f})")
        table.add_row(name, f"{res['median_rows_per_s']:,.0f}", reader,
                      f"{cpu['broker']:.2f}" if "broker" in cpu else "-")
    console.print(table)
    for key, v in result["verdicts"].items():
        mark = "[green]met[/]" if v["met"] else "[red]NOT met[/]"
        console.print(f"{key}: {v['value']:,.3g} (target {v['target']:,}) {mark}")
    _write_json(json_out, result)


# ---------------------------------------------------------------------- RIP-21


@app.command("migration")
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
    try:
        result = run_migration_bench(cfg)
    except TideMQError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    result["argv"] = sys.argv[1:]
    result["config"] = dataclasses.asdict(cfg)
    med = result["median"]
    table = Table(title=f"tidemq bench migration ({queues} logical queues, {in_flight} sends "
                        f"in flight, median of {repeat})")
    for col in ("figure", "before", "during", "after"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for kind in ("produce", "consume"):
        table.add_row(f"{kind} msgs/s", *(f"{med[f'{kind}_{w}']:,.0f}"
                                          for w in ("before", "during", "after")))
    console.print(table)
    console.print(f"migrate: {med['migrate_s'] * 1000:.1f} ms; first write on the new "
                  f"segment: {med['first_write_s'] * 1000:.1f} ms after the start")
    met = med["first_write_s"] <= 1.0
    mark = "[green]met[/]" if met else "[red]NOT met[/]"
    console.print(f"first_write_s: {med['first_write_s']:.3g} (target 1) {mark}")
    _write_json(json_out, result)


# ---------------------------------------------------------------------- batch protocol


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)


@app.command("batchproto")
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
    broker_set: Annotated[list[str] | None, typer.Option(
        "--broker-set", help="Extra broker setting KEY=VALUE (repeatable).")] = None,
    data_dir: Annotated[str | None, typer.Option(
        "--data-dir", help="Parent of the broker's temporary data directory.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")]
    = None,
) -> None:
    """The batch protocol (issue #5516) against one RPC per queue, in one run against one
    broker process: a consumer of 64 and 256 queues, a producer over 64 queues."""
    cfg = BatchProtoBenchConfig(
        consume_queues=tuple(consume_queues or (64, 256)), produce_queues=produce_queues,
        messages=messages, size=size, pull_batch=pull_batch, produce_seconds=produce_seconds,
        rounds_in_flight=rounds_in_flight, repeat=repeat, columns=columns,
        broker_settings=tuple(broker_set or ()), data_dir=data_dir)

    def report(name: str, mode: str, row: dict[str, Any]) -> None:
        console.print(f"{name:>18} {mode:>3}: {row['msgs_per_s']:>10,.0f} msg/s "
                      f"{row['rpcs_per_s']:>9,.1f} RPC/s  {_num(row['msgs_per_rpc'], ',.1f')} "
                      f"msg/RPC  CPU client {_num(row['client_cpu_pct'])}% broker "
                      f"{_num(row['broker_cpu_pct'])}%", soft_wrap=True)

    try:
        cfg.check()
        results = _run_async(run_batch_protocol_bench(cfg, report))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except TideMQError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    table = Table(title=f"tidemq bench batchproto (body {size} B, pull {pull_batch}/queue, "
                        f"median of {repeat})")
    for column in ("workload", "msg/s off", "msg/s on", "speedup", "RPC/s off", "RPC/s on",
                   "RPC reduction", "CPU us/msg off", "CPU us/msg on", "target"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for name, res in results.items():
        off, on = res["off"], res["on"]
        verdict = "[green]met[/]" if target_met(res) else "[red]not met[/]"
        table.add_row(name, _num(off["msgs_per_s_median"]), _num(on["msgs_per_s_median"]),
                      f"{res['speedup']:.2f}x", _num(off["rpcs_per_s"], ",.1f"),
                      _num(on["rpcs_per_s"], ",.1f"), f"{res['rpc_reduction']:,.1f}x",
                      _num(off["cpu_us_per_msg"], ",.1f"), _num(on["cpu_us_per_msg"], ",.1f"),
                      verdict)
    console.print(table)
    console.print(f"target: >= {TARGET_SPEEDUP:g}x msg/s and >= {TARGET_RPC_REDUCTION:g}x "
                  "fewer RPCs per message with the batch protocol")
    _write_json(json_out, {"command": "batchproto", "argv": sys.argv[1:],
                           "config": dataclasses.asdict(cfg), "results": results})


@app.command("push")
def push(
    messages: Annotated[int, typer.Option(help="Messages pre-filled and consumed.")] = 200_000,
    queues: Annotated[int, typer.Option(help="Queues of the topic.")] = 8,
    batch: Annotated[int, typer.Option(help="Messages per listener call.")] = 32,
    pull_batch: Annotated[int, typer.Option(help="Messages per pull request.")] = 1000,
    repeat: Annotated[int, typer.Option(help="Runs (the median is quoted).")] = 3,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
) -> None:
    """Push-consumer throughput (trivial listener) and the rebalance time of a 4th member."""
    from tidemq.bench.push import PushBenchConfig, run_push_bench

    cfg = PushBenchConfig(messages=messages, queues=queues, batch=batch, pull_batch=pull_batch,
                          repeat=repeat)
    result = run_push_bench(cfg)
    table = Table(title=f"tidemq bench push ({messages:,} x 128 B, median of {repeat})")
    for col in ("run", "msgs/s", "client CPU", "broker CPU", "rebalance (4th member)"):
        table.add_column(col, justify="right")
    for i, r in enumerate(result["runs"]):
        table.add_row(str(i + 1), f"{r['msgs_per_s']:,.0f}", f"{r['client_cpu_pct']:.0f}%",
                      f"{r['broker_cpu_pct']:.0f}%", f"{r['rebalance_s'] * 1000:.1f} ms")
    console.print(table)
    console.print(f"median: {result['median_msgs_per_s']:,.0f} msgs/s, rebalance "
                  f"{result['median_rebalance_s'] * 1000:.1f} ms")
    _write_json(json_out, {"command": "push", "config": dataclasses.asdict(cfg),
                           "results": result})
