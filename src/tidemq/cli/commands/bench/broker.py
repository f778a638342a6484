"""``tidemq bench produce|consume|latency``: a broker process (or a running cluster)
loaded over the wire; a line per second, then a table of the run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from tidemq.bench.broker import BrokerBenchConfig, run_consume, run_latency, run_produce
from tidemq.cli.commands.bench.measure import measure, run_async
from tidemq.cli.commands.bench.options import (
    Acl,
    BrokerSet,
    DataDir,
    Duration,
    Flush,
    InFlight,
    JsonOut,
    Linger,
    MaxBatch,
    MaxBatchBytes,
    Namesrv,
    ProduceApi,
    Producers,
    Profile,
    Queues,
    Raw,
    Size,
    Tls,
    TopicOpt,
    Warmup,
)
from tidemq.cli.commands.bench.render import (
    Report,
    Table,
    console,
    figures,
    ms,
    num,
    pct,
    show,
    threads,
    us,
)

__all__ = ["consume", "latency", "produce", "report"]

#: Summary figures listed after the fixed ones, by the start of their key.
_EXTRA = ("prefill", "consumed", "sent", "skipped", "received", "complete", "shipped",
          "pull_", "pacer_")


Replica = Annotated[str | None, typer.Option(
    "--replica", help="async or sync: the broker process is an ASYNC_MASTER or a "
                      "SYNC_MASTER with one replica in a second process.")]


def _print_second(row: dict[str, Any]) -> None:
    extra = ""
    if "sent_per_s" in row:
        extra = f"  sent {row['sent_per_s']:,.0f}/s ack-p99 {ms(row['ack_p99_ms'])} ms"
    errors = f"  [red]errors {row['errors']}[/]" if row["errors"] else ""
    console.print(f"{row['t']:>6.1f}s {row['msgs_per_s']:>10,.0f} msg/s  "
                  f"p50 {ms(row['p50_ms'])} p99 {ms(row['p99_ms'])} "
                  f"p999 {ms(row['p999_ms'])} ms  "
                  f"CPU client {pct(row['client_cpu_pct'])} broker "
                  f"{pct(row['broker_cpu_pct'])}{extra}{errors}", soft_wrap=True)


def _summary(title: str, s: dict[str, Any]) -> Table:
    rows = [("messages/s (mean)", f"{s.get('msgs_per_s', 0):,.0f}"),
            ("messages/s (median second)", f"{s.get('median_msgs_per_s', 0):,.0f}"),
            ("latency p50 / p99 / p999 ms",
             f"{ms(s.get('p50_ms'))} / {ms(s.get('p99_ms'))} / {ms(s.get('p999_ms'))}"),
            ("client CPU", pct(s.get("client_cpu_pct"))),
            ("broker CPU", pct(s.get("broker_cpu_pct"))),
            ("CPU µs per message client / broker",
             f"{us(s.get('client_cpu_us_per_msg'))} / {us(s.get('broker_cpu_us_per_msg'))}"),
            ("errors", str(s.get("errors", 0)))]
    if s.get("broker_cpu"):  # a running cluster's broker: its process, or why none
        rows.insert(4, ("broker process", escape(str(s["broker_cpu"]))))
    if s.get("replica_cpu_us_per_msg") is not None:
        rows.insert(-1, ("replica CPU / µs per message",
                         f"{pct(s.get('replica_cpu_pct'))} / {us(s['replica_cpu_us_per_msg'])}"))
    if s.get("broker_user_us_per_msg") is not None:
        rows.insert(-1, ("broker CPU ns per message user / kernel",
                         f"{num(_ns(s['broker_user_us_per_msg']))} / "
                         f"{num(_ns(s.get('broker_sys_us_per_msg')))}"))
    if s.get("broker_disk_bytes_per_msg") is not None:
        rows.insert(-1, ("broker disk bytes written per message",
                         num(s["broker_disk_bytes_per_msg"])))
    rows += [(k.replace("_", " "), f"{v:,.0f}" if isinstance(v, float) else str(v))
             for k, v in s.items() if k.startswith(_EXTRA)]
    if isinstance(s.get("ack"), dict):
        ack = s["ack"]
        rows.append(("send ack p50 / p99 / p999 ms",
                     f"{ms(ack['p50_ms'])} / {ms(ack['p99_ms'])} / {ms(ack['p999_ms'])}"))
    lag = s.get("replication_lag")
    if isinstance(lag, dict) and lag.get("samples"):
        rows.append(("replication lag p50 / p99 / max ms",
                     f"{ms(lag['p50_ms'])} / {ms(lag['p99_ms'])} / {ms(lag['max_ms'])}"))
    if s.get("last_error"):
        rows.append(("last error", escape(str(s["last_error"]))))
    return figures(title, rows, header=False)


def _ns(us_per_msg: float | None) -> float | None:
    return None if us_per_msg is None else us_per_msg * 1000


def report(kind: str, cfg: BrokerBenchConfig, result: dict[str, Any]) -> Report:
    """The summary table of a run (and of its columns pass, if any), each followed by the
    broker's busiest threads when the broker process is ours."""
    out = Report(result)
    passes = [(f"tidemq bench {kind} (first {cfg.warmup:g} s left out)", result["summary"])]
    if "columns" in result:
        passes.append((f"tidemq bench {kind}, columns: poll_batches (same run)",
                       result["columns"]["summary"]))
    for title, summary in passes:
        out.table(_summary(title, summary))
        if summary.get("broker_threads"):
            out.line(f"broker threads: {threads(summary['broker_threads'])}", soft_wrap=True)
    return out


def _linger_note(cfg: BrokerBenchConfig) -> str:
    if cfg.linger_ms is None:
        return ""
    api = "produce() with callbacks, " if cfg.produce_api else ""
    return (f", auto-batched ({api}linger {cfg.linger_ms:g} ms, at most {cfg.max_batch} "
            f"messages and {cfg.max_batch_bytes:,} bytes per batch)")


def _security_note(cfg: BrokerBenchConfig) -> str:
    on = [name for name, flag in (("ACL", cfg.acl), ("TLS", cfg.tls),
                                  ("message trace", cfg.trace)) if flag]
    return f", with {' and '.join(on)}" if on else ""


def _broker_bench(kind: str, cfg: BrokerBenchConfig, json_out: Path | None) -> None:
    runner = {"produce": run_produce, "consume": run_consume, "latency": run_latency}[kind]
    target = cfg.namesrv or f"a new broker process ({cfg.flush})"
    if cfg.replica is not None and not cfg.namesrv:
        target += f" with one replica ({cfg.replica.upper()}_MASTER)"
    console.print(f"tidemq bench {kind}: {target}, topic {cfg.topic} x {cfg.queues} queues, "
                  f"{cfg.size} B bodies{', raw requests' if cfg.raw else ''}"
                  f"{_linger_note(cfg)}{_security_note(cfg)}", soft_wrap=True)

    def run() -> dict[str, Any]:
        cfg.check()
        return run_async(runner(cfg, _print_second))

    result = measure(run)
    result["argv"] = sys.argv[1:]
    show(report(kind, cfg, result), json_out)


def produce(
    namesrv: Namesrv = None, flush: Flush = "ASYNC_FLUSH", topic: TopicOpt = "BenchTopic",
    queues: Queues = 8, size: Size = 128,
    batch: Annotated[int, typer.Option("--batch", min=1,
                                       help="Messages per send (send_batch when > 1).")] = 1,
    producers: Producers = 1, in_flight: InFlight = 256, duration: Duration = 10.0,
    warmup: Warmup = 1.0, raw: Raw = False, linger_ms: Linger = None,
    produce_api: ProduceApi = False,
    max_batch: MaxBatch = 1024, max_batch_bytes: MaxBatchBytes = 32 * 1024,
    broker_set: BrokerSet = None,
    profile: Profile = None, data_dir: DataDir = None, json_out: JsonOut = None,
    acl: Acl = False, tls: Tls = False,
    replica: Replica = None,
    trace: Annotated[bool, typer.Option(
        "--trace", help="The producers record message trace (enable_msg_trace) to the "
                        "broker's trace topic: what trace costs.")] = False,
) -> None:
    """Send as fast as IN_FLIGHT concurrent sends allow; rate and per-send latency."""
    _broker_bench("produce", BrokerBenchConfig(
        namesrv=namesrv, flush=flush, topic=topic, queues=queues, size=size, batch=batch,
        producers=producers, in_flight=in_flight, duration=duration, warmup=warmup, raw=raw,
        linger_ms=linger_ms, produce_api=produce_api, max_batch=max_batch,
        max_batch_bytes=max_batch_bytes, broker_settings=tuple(broker_set or ()),
        profile=profile, data_dir=data_dir, acl=acl, tls=tls, replica=replica, trace=trace),
        json_out)


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
    acl: Acl = False, tls: Tls = False,
) -> None:
    """Pre-fill a topic, then read it back with PullConsumer.poll; messages/s."""
    _broker_bench("consume", BrokerBenchConfig(
        namesrv=namesrv, flush=flush, topic=topic, queues=queues, size=size,
        messages=messages, pull_batch=pull_batch, producers=producers, duration=duration,
        warmup=warmup, raw=raw, columns=columns, broker_settings=tuple(broker_set or ()),
        profile=profile, data_dir=data_dir, acl=acl, tls=tls), json_out)


def latency(
    namesrv: Namesrv = None, flush: Flush = "ASYNC_FLUSH", topic: TopicOpt = "BenchTopic",
    queues: Queues = 8, size: Size = 128,
    rate: Annotated[int, typer.Option("--rate", min=1, help="Messages sent per second.")]
    = 5000,
    in_flight: Annotated[int, typer.Option(
        "--in-flight", min=1, help="Sends outstanding at most (more are skipped).")] = 1024,
    batch: Annotated[int, typer.Option(
        "--batch", min=1, help="Messages per send: RATE/BATCH send_batch calls a second, "
                               "each message stamped with its batch's send time.")] = 1,
    pull_batch: Annotated[int, typer.Option("--pull-batch", min=1,
                                            help="Messages per pull at most.")] = 1000,
    duration: Duration = 10.0, warmup: Warmup = 1.0, linger_ms: Linger = None,
    max_batch: MaxBatch = 1024, max_batch_bytes: MaxBatchBytes = 32 * 1024,
    broker_set: BrokerSet = None,
    profile: Profile = None, data_dir: DataDir = None, json_out: JsonOut = None,
    acl: Acl = False, tls: Tls = False, replica: Replica = None,
    receive: Annotated[bool, typer.Option(
        "--receive/--no-receive", help="--no-receive: no consumer, only the paced sends "
                                       "(and, with --replica, the replica's lag).")] = True,
) -> None:
    """End-to-end latency at a fixed rate: send time in the body to receipt by a
    long-polling consumer; with --replica also how far the replica is behind, in time."""
    _broker_bench("latency", BrokerBenchConfig(
        namesrv=namesrv, flush=flush, topic=topic, queues=queues, size=size, rate=rate,
        batch=batch, in_flight=in_flight, pull_batch=pull_batch, duration=duration, warmup=warmup,
        linger_ms=linger_ms, max_batch=max_batch, max_batch_bytes=max_batch_bytes,
        broker_settings=tuple(broker_set or ()), profile=profile, data_dir=data_dir,
        acl=acl, tls=tls, replica=replica, receive=receive),
        json_out)
