"""mqadmin commands for what TideMQ does not have: each one, whatever flags it is given,
says why and what to use instead, on one ``error:`` line on stderr (``--json`` too), and
exits with status 1.

The table :data:`ABSENT` is the whole of it: command name -> (why, what instead).
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from tidemq.cli.commands.admin_common import console_err

__all__ = ["ABSENT", "register"]

_CONTAINER = ("RocketMQ's broker container (several brokers in one process) is not in "
              "TideMQ: each broker is a process of its own")
_ROCKSDB = ("TideMQ keeps topics, subscription groups and offsets in JSON files under the "
            "store directory's config/, and consume queues in files, not in RocksDB")
_COLD = ("TideMQ has no cold-data read flow control (coldDataFlowControlEnable): a pull "
         "reads from the mapped commit log whatever its age")
_POP = "TideMQ has no POP consumption: consumers pull the queues rebalancing gives them"

#: Command -> (why TideMQ lacks it, what to use instead).
ABSENT: dict[str, tuple[str, str]] = {
    "addBroker": (_CONTAINER, "start the broker with 'tidemq broker' and its properties "
                              "file; it registers with the name servers by itself"),
    "removeBroker": (_CONTAINER, "drain its sends with 'tidemq admin wipeWritePerm -b "
                                 "BROKER_NAME', then stop its process"),
    "checkRocksdbCqWriteProgress": (
        "TideMQ's consume queues are files only: there is no RocksDB copy to compare",
        "'tidemq store verify' checks every queue entry against the commit log (broker "
        "stopped); 'tidemq admin queryCq' shows a queue's entries"),
    "exportMetadataInRocksDB": (_ROCKSDB, "'tidemq admin exportMetadata', or the JSON "
                                          "files themselves"),
    "rocksDBConfigToJson": (_ROCKSDB, "the files are JSON already: config/topics.json, "
                                      "config/subscriptionGroup.json, "
                                      "config/consumerOffset.json"),
    "dumpCompactionLog": ("TideMQ has no compaction topics (cleanup.policy=COMPACTION), so "
                          "no compaction log",
                          "'tidemq store dump' prints records or one queue's entries"),
    "exportPopRecord": (_POP + ", so no POP records",
                        "'tidemq admin consumerProgress' shows each group's offsets"),
    "setConsumeMode": (_POP + ", and no consume mode to set",
                       "'tidemq admin consumerConnection' shows each consumer's consume "
                       "type; 'tidemq admin allocateMQ' how queues are shared"),
    "getColdDataFlowCtrInfo": (_COLD, "'tidemq admin brokerConsumeStats' shows the groups "
                                      "far behind"),
    "updateColdDataFlowCtrGroupConfig": (_COLD, "'tidemq admin updateBrokerConfig -k "
                                                "maxPullBytes' limits what one pull reads"),
    "removeColdDataFlowCtrGroupConfig": (_COLD, "there is no group setting to remove"),
    "setCommitLogReadAheadMode": (
        "TideMQ does not switch its commit log's read-ahead (madvise) while it runs",
        "the read-ahead of the store's disk is the operating system's setting"),
    "resetMasterFlushOffset": (
        "a TideMQ replica keeps no master flush offset: it resumes from the end of its own "
        "commit log, which its master checks (in controller mode it first truncates to the "
        "end its epochs agree on)",
        "'tidemq admin haStatus -b REPLICA' shows where it and its master are"),
}


def _refusal(name: str, why: str, instead: str) -> Callable[[typer.Context], None]:
    def command(ctx: typer.Context) -> None:
        console_err().print(f"[red]error:[/red] {name}: {why}. Instead: {instead}.",
                            markup=True)
        raise typer.Exit(1)

    command.__name__ = name
    command.__doc__ = f"Not in TideMQ. {why[0].upper()}{why[1:]}. Instead: {instead}."
    return command


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    for name, (why, instead) in ABSENT.items():
        app.command(name, context_settings={"allow_extra_args": True,
                                            "ignore_unknown_options": True},
                    )(_refusal(name, why, instead))
