"""``tidemq admin`` offset commands, with mqadmin's names, flags and columns.

======================  =========================================================
command                 what it does
======================  =========================================================
resetOffsetByTime       move a group's offsets of a topic to a time (``-s``) or an offset
                        (``-q``/``-o``); online consumers follow
skipAccumulatedMessage  move a group's offsets of a topic to the end
cloneGroupOffset        give a group (``-d``) the offsets another (``-s``) committed
======================  =========================================================
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    Topic,
    console_out,
    emit_json,
    parse_bool,
    parse_time_ms,
    print_columns,
    run_admin,
)
from tidemq.cli.markup import counted
from tidemq.client import group_admin as ga
from tidemq.client.config import DEFAULT_NAMESRV

__all__ = ["register"]



def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("resetOffsetByTime")(reset_offset_by_time)
    app.command("skipAccumulatedMessage")(skip_accumulated)
    app.command("cloneGroupOffset")(clone_group_offset)


def _print_reset(rows: list[ga.ResetRow], json_out: bool, **extra: Any) -> None:
    if json_out:
        emit_json({**extra, "offsets": [{"brokerName": r.broker_name, "queueId": r.queue_id,
                                         "offset": r.offset} for r in rows]})
        return
    print_columns(("#brokerName", "#queueId", "#offset"),
                  ((r.broker_name, r.queue_id, r.offset) for r in rows))


def reset_offset_by_time(
    group: Annotated[str, typer.Option("-g", "--group", help="Consumer group.")],
    topic: Topic,
    timestamp: Annotated[str | None, typer.Option(
        "-s", "--timestamp", help="now, epoch ms, or yyyy-MM-dd#HH:mm:ss:SSS (local).")]
    = None,
    force: Annotated[str, typer.Option(
        "-f", "--force", help="true: also move forward; false: only move back.")] = "true",
    broker: Annotated[str | None, typer.Option(
        "-b", "--broker", help="This broker address only.")] = None,
    queue: Annotated[int | None, typer.Option("-q", "--queue", min=0, help="Queue id.")]
    = None,
    offset: Annotated[int | None, typer.Option(
        "-o", "--offset", min=0, help="Reset queue -q to this offset (needs -b and -q).")]
    = None,
    cluster: Annotated[str | None, typer.Option(
        "-c", "--cluster", help="Only the topic's brokers in this cluster.")] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Move a group's offsets of a topic to the first message stored at or after a time
    (or queue -q to offset -o); online consumers drop what they hold and follow."""
    if offset is not None and (queue is None or broker is None):
        raise typer.BadParameter("-o needs -b (broker address) and -q (queue id)")
    if timestamp is None and offset is None:
        raise typer.BadParameter("give -s (timestamp) or -o (offset)", param_hint="-s")
    when = parse_time_ms(timestamp, "-s") if timestamp is not None else 0
    forced = parse_bool(force, "-f")
    rows = run_admin(namesrv, lambda admin: ga.reset_offset(
        admin, group, topic, when, force=forced, broker_addr=broker, cluster=cluster,
        queue_id=-1 if queue is None else queue, offset=offset))
    _print_reset(rows, json_out, group=group, topic=topic, timestamp=when)


def skip_accumulated(
    group: Annotated[str, typer.Option("-g", "--group", help="Consumer group.")],
    topic: Topic,
    force: Annotated[str, typer.Option(
        "-f", "--force", help="true: also move forward (the default).")] = "true",
    cluster: Annotated[str | None, typer.Option("-c", "--cluster", help="Cluster name.")]
    = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Move a group's offsets of a topic to the end: what was not consumed is skipped."""
    forced = parse_bool(force, "-f")
    rows = run_admin(namesrv, lambda admin: ga.reset_offset(admin, group, topic, -1,
                                                            force=forced, cluster=cluster))
    _print_reset(rows, json_out, group=group, topic=topic, timestamp=-1)


def clone_group_offset(
    src: Annotated[str, typer.Option("-s", "--srcGroup", help="Source consumer group.")],
    dest: Annotated[str, typer.Option("-d", "--destGroup", help="Destination group.")],
    topic: Topic,
    offline: Annotated[str, typer.Option(
        "-o", "--offline", help="true: the source group or the topic is offline; clone "
                                "even if the online group does not subscribe to it.")]
    = "false",
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Give a group the offsets another group committed on a topic's queues."""
    anyway = parse_bool(offline, "-o")
    rows = run_admin(namesrv, lambda admin: ga.clone_group_offset(admin, src, dest, topic,
                                                                  offline=anyway))
    if json_out:
        _print_reset(rows, True, srcGroup=src, destGroup=dest, topic=topic)
        return
    console_out().print(f"clone group offset success. srcGroup[{src}], "
                        f"destGroup=[{dest}], topic[{topic}], "
                        f"{counted(len(rows), 'queue')}", markup=False)
