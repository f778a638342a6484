"""mqadmin's static-topic commands on TideMQ's logical queues.

An upstream static topic (RIP-21 as RocketMQ 5 ships it) and a TideMQ logical topic are
the same idea -- a fixed number of queues that do not belong to a broker, moved between
brokers without a rebalance -- kept in different mapping formats. The commands with
``-qn`` and ``-b``/``-c`` map onto the logical-queue operations; a mapping file (``-mf``)
is upstream's format, which TideMQ does not read.

======================  ==============================================================
command                 what it does
======================  ==============================================================
updateStaticTopic       create a logical topic of ``-qn`` queues on brokers ``-b`` or
                        clusters ``-c``; on an existing one, add queues up to ``-qn``
remappingStaticTopic    move every logical queue not on brokers ``-b`` (or clusters
                        ``-c``) onto them, round robin
======================  ==============================================================
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    Topic,
    console_out,
    emit_json,
    print_columns,
    run_admin,
)
from tidemq.client import AdminClient
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.client.logical_admin import LogicalQueueAdmin, writable
from tidemq.errors import TideMQError
from tidemq.formats.logical_mapping import TopicMapping

__all__ = ["register"]

#: queryLogicalQueueMapping's columns.
COLUMNS = ("#brokerName", "#MessageQueue", "#LogicalQueue(range)", "#QueueStatus")

Brokers = Annotated[str | None, typer.Option(
    "-b", "--brokers", help="Broker names, comma separated.")]
Clusters = Annotated[str | None, typer.Option(
    "-c", "--clusters", help="Clusters (all their masters), comma separated.")]
MapFile = Annotated[str | None, typer.Option(
    "-mf", "--mapFile", help="Upstream's mapping file: not read by TideMQ (see --help).")]
ForceReplace = Annotated[str | None, typer.Option(
    "-fr", "--forceReplace", help="Upstream's, with -mf only.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("updateStaticTopic")(update_static_topic)
    app.command("remappingStaticTopic")(remapping_static_topic)


def _no_map_file(map_file: str | None, force: str | None) -> None:
    if map_file is not None or force is not None:
        raise typer.BadParameter(
            "-mf/-fr take upstream's TopicQueueMappingDetail file, which TideMQ's logical "
            "queues do not use: push a TideMQ mapping (queryLogicalQueueMapping --json's "
            "shape) with updateLogicalQueueMapping -f FILE [--force]", param_hint="-mf")


async def _targets(admin: AdminClient, brokers: str | None, clusters: str | None
                   ) -> list[str]:
    """The broker names ``-b`` or ``-c`` give, each a master the name servers list."""
    if bool(brokers) == bool(clusters):
        raise typer.BadParameter("give -b (broker names) or -c (clusters), one of them")
    masters = await admin.masters()
    if brokers:
        names = sorted({b.strip() for b in brokers.split(",") if b.strip()})
        unknown = [n for n in names if n not in masters]
        if unknown:
            raise TideMQError(f"no master broker {', '.join(unknown)} (known: "
                              f"{', '.join(sorted(masters))})")
        return names
    found: set[str] = set()
    for cluster in (c.strip() for c in (clusters or "").split(",") if c.strip()):
        found.update((await admin.masters(cluster)).keys())
    if not found:
        raise TideMQError(f"no master broker in {clusters}")
    return sorted(found)


def _show(mapping: TopicMapping, said: str, json_out: bool) -> None:
    if json_out:
        emit_json({**mapping.to_json(), "total": mapping.total,
                   "writable": len(writable(mapping))})
        return
    out = console_out()
    out.print(escape(said))
    out.print(f"{mapping.topic} (epoch {mapping.epoch}, "
              f"{len(writable(mapping))}/{mapping.total} writable)", markup=False, soft_wrap=True)
    print_columns(COLUMNS, mapping.table())


async def _existing(lqa: LogicalQueueAdmin, admin: AdminClient, topic: str) -> bool:
    copies = await lqa.copies(topic, await admin.masters())
    return any(m is not None for m in copies.values())


def update_static_topic(
    topic: Topic,
    total: Annotated[int, typer.Option("-qn", "--totalQueueNum", min=1,
                                       help="The topic's number of queues.")],
    brokers: Brokers = None, clusters: Clusters = None,
    map_file: MapFile = None, force: ForceReplace = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Create a logical topic (TideMQ's static topic) of -qn queues spread over the
    brokers, or add queues to an existing one up to -qn (fewer is refused, as upstream:
    updateLogicalQueueNum seals queues)."""
    _no_map_file(map_file, force)

    async def update(admin: AdminClient) -> tuple[TopicMapping, str]:
        names = await _targets(admin, brokers, clusters)
        lqa = LogicalQueueAdmin(admin)
        if not await _existing(lqa, admin, topic):
            mapping = await lqa.create(topic, total, names)
            return mapping, (f"create static topic {topic} with {total} queues on "
                             f"{', '.join(names)} success.")
        mapping = await lqa.query(topic, repair=True)
        if total < mapping.total:
            raise TideMQError(f"{topic} has {mapping.total} queues: a static topic's queue "
                              f"number cannot decrease (updateLogicalQueueNum -q {total} "
                              "seals the highest ones instead)")
        if total == mapping.total and len(writable(mapping)) == total:
            return mapping, f"{topic} has {total} queues already: nothing changed."
        mapping = await lqa.resize(topic, total)
        return mapping, f"update static topic {topic} to {total} queues success."

    mapping, said = run_admin(namesrv, update)
    _show(mapping, said, json_out)


def remapping_static_topic(
    topic: Topic, brokers: Brokers = None, clusters: Clusters = None,
    map_file: MapFile = None, force: ForceReplace = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Move each writable logical queue whose writes are not on the brokers given onto
    them, round robin (migrateLogicalQueue for each; its data stays readable where it
    is). The old brokers must be alive: for a dead one use migrateLogicalQueue --force."""
    _no_map_file(map_file, force)

    async def remap(admin: AdminClient) -> tuple[TopicMapping, list[dict[str, Any]]]:
        names = await _targets(admin, brokers, clusters)
        lqa = LogicalQueueAdmin(admin)
        mapping = await lqa.query(topic, repair=True)
        moves: list[dict[str, Any]] = []
        turn = 0
        for lq in writable(mapping):
            leader = mapping.leader(lq)
            if leader is None or leader.broker in names:
                continue
            target = names[turn % len(names)]
            turn += 1
            mapping = await lqa.migrate(topic, lq, target)
            moves.append({"queue": lq, "from": leader.broker, "to": target})
        return mapping, moves

    mapping, moves = run_admin(namesrv, remap)
    if json_out:
        emit_json({"topic": topic, "moves": moves, "mapping": mapping.to_json()})
        return
    said = "; ".join(f"queue {m['queue']} {m['from']} -> {m['to']}" for m in moves)
    _show(mapping, f"remapping static topic {topic} success: {said or 'nothing to move'}.",
          False)
