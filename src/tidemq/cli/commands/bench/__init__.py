"""``tidemq bench``: throughput and latency workloads; each prints a table, optionally
JSON, through one renderer (:mod:`.render`)."""

from __future__ import annotations

import typer

from tidemq.cli.commands.bench import (
    batchcq,
    batchproto,
    broker,
    dispatch,
    failover,
    lmq,
    migration,
    push,
    spark,
    store,
)

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True,
                  help="Benchmarks: each prints its figures; docs/benchmarks.md has the "
                       "project's, with the commands that produced them.")

for _command in (store.store, broker.produce, broker.consume, broker.latency,
                 batchcq.batchcq, lmq.lmq, dispatch.dispatch, spark.spark,
                 migration.migration, batchproto.batchproto, push.push, failover.failover):
    app.command(_command.__name__)(_command)
