"""Command-line options shared by several ``tidemq bench`` commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
ProduceApi = Annotated[bool, typer.Option(
    "--produce", help="With --linger-ms: AutoBatchProducer.produce, one call per message "
                      "and a delivery callback, no future; IN_FLIGHT messages outstanding.")]
MaxBatch = Annotated[int, typer.Option(
    "--max-batch", min=1, help="With --linger-ms: messages per batch at most.")]
MaxBatchBytes = Annotated[int, typer.Option(
    "--max-batch-bytes", min=1, help="With --linger-ms: bytes per batch at most.")]
JsonFile = Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")]
Acl = Annotated[bool, typer.Option(
    "--acl", help="The broker process checks an ACL (aclEnable) and the clients sign every "
                  "request: what the ACL costs.")]
Tls = Annotated[bool, typer.Option(
    "--tls", help="The broker process and its name server take TLS connections only "
                  "(tls.server.mode=enforcing, a throwaway CA made with openssl) and the "
                  "clients use TLS: what TLS costs.")]
