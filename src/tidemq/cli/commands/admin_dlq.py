"""``tidemq admin`` dead-letter commands (:mod:`tidemq.client.dlq_admin`, what the
console's dead-letter pages use). mqadmin has none of these: it reads a DLQ as any topic
(``printMsg -t %DLQ%<group>``) and resends one message with ``queryMsgById -g -d``.

====================  =========================================================
command               what it does
====================  =========================================================
dlqList               every ``%DLQ%<group>`` a master holds or the name servers
                      list, with the messages it holds
dlqMessages           a page of one group's dead letters (``-g``), newest first
dlqResend             have online consumer ``-d`` of group ``-g`` consume the dead
                      letters ``-i`` (or all of them) again; nothing is committed
                      and they stay in the DLQ
====================  =========================================================
"""

from __future__ import annotations

import base64
import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    console_err,
    emit_json,
    print_columns,
    run_admin,
)
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.client.retry import DLQ_PREFIX
from tidemq.errors import TideMQError

if TYPE_CHECKING:
    from tidemq.client import AdminClient
    from tidemq.client.dlq_admin import DeadLetter

__all__ = ["register"]

Group = Annotated[str, typer.Option(
    "-g", "--consumerGroup", help="The consumer group whose DLQ (%DLQ%<group>) to read.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("dlqList")(dlq_list)
    app.command("dlqMessages")(dlq_messages)
    app.command("dlqResend")(dlq_resend)


def dlq_list(namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Every dead-letter queue with the messages it holds."""
    from tidemq.client import dlq_admin  # its message scans load numpy: not at --help
    counts = run_admin(namesrv, dlq_admin.dlq_counts)
    rows = [(g, DLQ_PREFIX + g, counts[g]) for g in sorted(counts)]
    if json_out:
        emit_json([{"group": g, "topic": t, "messages": n} for g, t, n in rows])
        return
    print_columns(["#Group", "#Topic", "#Messages"],
                  [(g, t, "-" if n is None else n) for g, t, n in rows])
    for g, _t, n in rows:
        if n is None:
            console_err().print(f"warning: the messages of {DLQ_PREFIX}{g} could not be "
                                "counted", markup=False)


def _time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ",
                                                                timespec="milliseconds")


def letter_json(d: DeadLetter) -> dict[str, Any]:
    """One dead letter: its body as UTF-8 text when it is that, else base64
    (``bodyEncoding`` says which)."""
    try:
        body, encoding = d.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(d.body).decode("ascii"), "base64"
    return {"msgId": d.msg_id, "uniqKey": d.uniq_key, "topic": d.topic,
            "reconsumeTimes": d.reconsume_times, "storeTimestamp": d.store_timestamp,
            "brokerName": d.broker_name, "queueId": d.queue_id, "queueOffset": d.queue_offset,
            "tags": d.tags, "keys": list(d.keys), "bodyEncoding": encoding, "body": body}


def dlq_messages(
    group: Group,
    page: Annotated[int, typer.Option("-p", "--page", min=1, help="Page number.")] = 1,
    size: Annotated[int, typer.Option(
        "-s", "--pageSize", min=1, max=1000, help="Messages a page.")] = 20,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """A page of a group's dead letters, newest first (by store time over its queues)."""
    from tidemq.client import dlq_admin
    found = run_admin(namesrv, lambda admin: dlq_admin.dead_letters(
        admin, group, skip=(page - 1) * size, limit=size))
    if json_out:
        emit_json({"group": group, "topic": DLQ_PREFIX + group, "total": found.total,
                   "page": page, "pageSize": size,
                   "messages": [letter_json(d) for d in found.letters]})
        return
    typer.echo(f"{found.total} messages in {DLQ_PREFIX}{group}; page {page}, "
               f"{len(found.letters)} shown")
    print_columns(["#MsgId", "#Topic", "#ReconsumeTimes", "#StoreTime", "#BrokerName",
                   "#QueueOffset", "#Keys"],
                  [(d.msg_id, d.topic or "-", d.reconsume_times, _time(d.store_timestamp),
                    d.broker_name, d.queue_offset, " ".join(d.keys) or "-")
                   for d in found.letters])


async def _resend(admin: AdminClient, group: str, client_id: str, ids: list[str]
                  ) -> tuple[int, list[tuple[str, str]]]:
    """Resend ``ids`` (empty: every dead letter of ``group``) one at a time: how many
    were tried, and each one the consumer did not take with why."""
    from tidemq.client import dlq_admin
    if not ids:
        ids = [d.msg_id async for d in dlq_admin.every_dead_letter(admin, group)]
    failures = []
    for msg_id in ids:
        try:
            why = dlq_admin.failed(await dlq_admin.resend(admin, group, client_id, msg_id))
        except TideMQError as exc:
            why = str(exc)
        if why is not None:
            failures.append((msg_id, why))
    return len(ids), failures


def dlq_resend(
    group: Group,
    client_id: Annotated[str, typer.Option(
        "-d", "--clientId", help="The online consumer of the group to consume them "
                                 "(consumerConnection lists the client ids).")],
    msg_ids: Annotated[str, typer.Option(
        "-i", "--msgId", help="The dead letters to resend, their ids as dlqMessages lists "
                              "them, comma separated.")] = "",
    all_letters: Annotated[bool, typer.Option(
        "--all", help="Resend every dead letter of the group instead.")] = False,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Have an online consumer of the group consume dead letters again (nothing is
    committed; they stay in the DLQ). Exits with 1 when it did not take one."""
    ids = [i.strip() for i in msg_ids.split(",") if i.strip()]
    if bool(ids) == all_letters:
        raise typer.BadParameter("give the dead letters to resend (-i) or --all, not both")
    tried, failures = run_admin(namesrv, lambda admin: _resend(admin, group, client_id, ids))
    if json_out:
        emit_json({"group": group, "clientId": client_id, "tried": tried,
                   "consumed": tried - len(failures),
                   "failures": [{"msgId": m, "why": w} for m, w in failures]})
    else:
        typer.echo(f"{tried} tried: {tried - len(failures)} consumed, "
                   f"{len(failures)} failed")
        for msg_id, why in failures:
            console_err().print(f"error: {msg_id}: {why}", markup=False)
    if failures:
        raise typer.Exit(1)
