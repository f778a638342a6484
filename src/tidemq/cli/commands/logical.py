"""``tidemq admin``: the logical-queue commands (RIP-21), under the proposal's names.

Same conventions as :mod:`tidemq.cli.commands.admin` (``-n/--namesrv``, ``--json``, one
``error: ...`` line and exit 1 on failure). See docs/logical-queues.md.

=============================  ===========================================================
command                        what it does
=============================  ===========================================================
updateTopic --logical-queue N  create a logical topic: N logical queues spread over the
                               masters (``-c`` one cluster's, ``-b`` a list of brokers);
                               implemented here, reached through ``updateTopic``
updateLogicalQueueMapping      push a mapping (JSON file) to every master; ``--force``
                               lets it replace a newer epoch
deleteLogicalQueueMapping      drop a topic's mapping from every master
queryLogicalQueueMapping       the newest mapping: ``brokerName | MessageQueue |
                               LogicalQueue(range) | QueueStatus``; read-only (a copy
                               found behind is shown merged, not repaired)
updateLogicalQueueNum          N writable logical queues: add or re-open below N, seal
                               (decrease) at and above N
migrateLogicalQueue            move one logical queue's writes to broker ``-b``, printing
                               each step; re-running it resumes an interrupted migration
                               and brings every broker's copy to the same mapping;
                               ``--force`` cuts out an old leader that stays unreachable
=============================  ===========================================================
"""

from __future__ import annotations

import json
from pathlib import Path
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

__all__ = ["create_logical_topic", "register"]

COLUMNS = ("#brokerName", "#MessageQueue", "#LogicalQueue(range)", "#QueueStatus")

Cluster = Annotated[str | None, typer.Option(
    "-c", "--cluster", help="Only this cluster's masters (default: every cluster's).")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("updateLogicalQueueMapping")(update_mapping)
    app.command("deleteLogicalQueueMapping")(delete_mapping)
    app.command("queryLogicalQueueMapping")(query_mapping)
    app.command("updateLogicalQueueNum")(update_num)
    app.command("migrateLogicalQueue")(migrate)


def _print_mapping(mapping: TopicMapping) -> None:
    console_out().print(f"{mapping.topic} (epoch {mapping.epoch}, "
                        f"{len(writable(mapping))}/{mapping.total} writable)", markup=False,
                        soft_wrap=True)
    print_columns(COLUMNS, mapping.table())


def _summary(mapping: TopicMapping) -> dict[str, Any]:
    return {**mapping.to_json(), "total": mapping.total, "writable": len(writable(mapping))}


async def _resolve_brokers(admin: AdminClient, cluster: str | None,
                           brokers: str | None) -> list[str] | None:
    """Broker names from ``-b`` (names or addresses, comma separated); ``None``: all."""
    if not brokers:
        return None
    masters = await admin.masters(cluster)
    by_addr = {addr: name for name, addr in masters.items()}
    names = []
    for item in (b.strip() for b in brokers.split(",")):
        if not item:
            continue
        name = item if item in masters else by_addr.get(item)
        if name is None:
            raise TideMQError(f"no master broker {item!r} (known: {sorted(masters)})")
        names.append(name)
    return names


def create_logical_topic(namesrv: str, topic: str, total: int, *, cluster: str | None,
                         brokers: str | None, json_out: bool) -> None:
    """``updateTopic --logical-queue N``: a mapping of N logical queues, LQ i on the i-th
    broker (round robin), pushed to every master; the name servers then route the topic
    as N queues under the placeholder broker ``__logical__``."""

    async def create(admin: AdminClient) -> TopicMapping:
        lqa = LogicalQueueAdmin(admin, cluster)
        return await lqa.create(topic, total, await _resolve_brokers(admin, cluster, brokers))

    mapping = run_admin(namesrv, create)
    if json_out:
        emit_json(_summary(mapping))
        return
    out = console_out()
    out.print(f"create logical topic {escape(topic)} with {total} logical queues on "
              f"{', '.join(sorted(mapping.brokers()))} success.")
    _print_mapping(mapping)


def _load_mapping(path: Path, topic: str) -> TopicMapping:
    try:
        mapping = TopicMapping.from_json(json.loads(path.read_text("utf-8")))
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}",
                                 param_hint="-f") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise typer.BadParameter(f"{path} is not a logical-queue mapping: {exc!r}",
                                 param_hint="-f") from None
    if mapping.topic != topic:
        raise typer.BadParameter(f"{path} maps topic {mapping.topic!r}, not {topic!r}",
                                 param_hint="-f")
    return mapping


def update_mapping(
    topic: Topic,
    file: Annotated[Path, typer.Option(
        "-f", "--file", help="Mapping JSON, as queryLogicalQueueMapping --json prints it.")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Cluster = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Accept it even over a newer epoch (repairs).")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Push a logical-queue mapping to every master (UpdateLogicalQueueMapping)."""
    mapping = _load_mapping(file, topic)

    async def update(admin: AdminClient) -> None:
        await LogicalQueueAdmin(admin, cluster).update(mapping, force=force)

    run_admin(namesrv, update)
    if json_out:
        emit_json(_summary(mapping))
        return
    console_out().print(f"update logical queue mapping of {escape(topic)} (epoch {mapping.epoch}) "
                 "success.")
    _print_mapping(mapping)


def delete_mapping(topic: Topic, namesrv: Namesrv = DEFAULT_NAMESRV, cluster: Cluster = None,
                   json_out: JsonFlag = False) -> None:
    """Drop a topic's logical-queue mapping from every master (DeleteLogicalQueueMapping)."""
    run_admin(namesrv, lambda admin: LogicalQueueAdmin(admin, cluster).delete(topic))
    if json_out:
        emit_json({"topic": topic, "deleted": True})
        return
    console_out().print(f"delete logical queue mapping of {escape(topic)} success.")


def query_mapping(topic: Topic, namesrv: Namesrv = DEFAULT_NAMESRV, cluster: Cluster = None,
                  json_out: JsonFlag = False) -> None:
    """The newest mapping the masters hold, one row per segment (QueryLogicalQueueMapping).
    Read-only: a master whose copy is behind is not updated."""
    mapping = run_admin(namesrv, lambda admin: LogicalQueueAdmin(admin, cluster).query(topic))
    if json_out:
        emit_json(mapping.to_json())
        return
    _print_mapping(mapping)


def update_num(
    topic: Topic,
    queues: Annotated[int, typer.Option("-q", "--queue-num", min=1,
                                        help="Writable logical queues wanted.")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Cluster = None,
    json_out: JsonFlag = False,
) -> None:
    """Change the number of writable logical queues (UpdateLogicalQueueNum). Fewer: the
    highest ones are sealed -- still readable, no more sends. More: sealed ones below the
    number are re-opened first, then new ones are added."""
    mapping = run_admin(namesrv, lambda admin: LogicalQueueAdmin(admin, cluster).resize(
        topic, queues))
    if json_out:
        emit_json(_summary(mapping))
        return
    console_out().print(f"{escape(topic)} now has {len(writable(mapping))} writable logical queues "
                 f"of {mapping.total}.")
    _print_mapping(mapping)


def migrate(
    topic: Topic,
    queue: Annotated[int, typer.Option("-q", "--queue", min=0, help="Logical queue id.")],
    broker: Annotated[str, typer.Option("-b", "--broker", help="Target broker name.")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Cluster = None,
    json_out: JsonFlag = False,
    force: Annotated[bool, typer.Option(
        "--force", help="If the queue's current broker cannot be reached, cut the queue "
        "without it at the highest offset the other brokers know it reached: messages it "
        "acknowledged past that point are left out of the queue. Only for a broker that "
        "is dead, not merely cut off.")] = False,
    wait: Annotated[float, typer.Option(
        "--wait", min=0, help="With --force: seconds to keep trying the current broker "
        "before cutting.")] = 10.0,
    margin: Annotated[int, typer.Option(
        "--margin", min=0, help="With --force: cut this many offsets past the known end, "
        "so that messages the dead broker acknowledged unseen stay in the queue (up to "
        "the margin) and no logical offset is given twice; the unused offsets are a gap "
        "readers step over.")] = 0,
) -> None:
    """Move a logical queue's writes to another broker (MigrateLogicalQueue): planned,
    sealed, committed. Only the mapping moves; re-running resumes where it stopped."""
    steps: list[dict[str, Any]] = []
    out = console_out()

    def on_step(name: str, now: bool, mapping: TopicMapping) -> None:
        text = _step_text(name, now, mapping, queue)
        steps.append({"step": name, "done": "now" if now else "already",
                      "epoch": mapping.epoch,
                      "segments": [s.to_json() for s in mapping.queues[queue]]})
        if not json_out:
            out.print(f"{name:>9}: {'' if now else '(already) '}{escape(text)}")

    missed: dict[str, str] = {}

    async def go(admin: AdminClient) -> TopicMapping:
        lqa = LogicalQueueAdmin(admin, cluster)
        try:
            return await lqa.migrate(topic, queue, broker, on_step, force=force, wait=wait,
                                     margin=margin)
        finally:
            missed.update(lqa.missed)

    mapping = run_admin(namesrv, go)
    if json_out:
        emit_json({"topic": topic, "queue": queue, "broker": broker, "steps": steps,
                   "mapping": mapping.to_json(), "notReached": sorted(missed)})
        return
    for name, why in sorted(missed.items()):
        out.print(f"[yellow]warning:[/] {escape(name)} was not reached ({escape(why)}); it "
                  "takes the mapping from the other brokers when it is back")
    if not any(s["done"] == "now" for s in steps):
        out.print(f"logical queue {queue} of {escape(topic)} is already on {escape(broker)}.")
    _print_mapping(mapping)


def _step_text(name: str, now: bool, mapping: TopicMapping, lq: int) -> str:
    if name == "synced":
        return f"brokers holding older copies brought to epoch {mapping.epoch}"
    segs = mapping.queues[lq]
    new = segs[-1]
    where = f"MessageQueue({mapping.topic}, {new.broker}, {new.queue_id})"
    if name == "planned":
        if now:
            return f"LogicalQueue({lq}) gets {where} as PENDING (epoch {mapping.epoch})"
        return f"LogicalQueue({lq}) already targets {where}"
    if name == "sealed":
        old = next((s for s in reversed(segs[:-1]) if s.logical_end >= 0), None)
        if old is None:
            return f"LogicalQueue({lq}) has no segment to seal"
        cut = f" (forced cut: {old.broker} unreachable)" if old.forced else ""
        return (f"MessageQueue({mapping.topic}, {old.broker}, {old.queue_id}) {old.state.value}"
                f" at logical end {old.logical_end}{cut}")
    return f"LogicalQueue({lq}) continues at {new.logical_start} on {where} (epoch {mapping.epoch})"
