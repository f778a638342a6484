"""``tidemq admin resendKeptCut``: send again the messages of a kept cut that the cluster
does not hold.

A kept cut (``truncated/<epoch>-<fromOffset>.log``, :mod:`tidemq.store.kept_cuts`) holds
the records an old master cut off its commit log when it came back as a replica. They
are read as a consumer reads them (bodies inflated, an inner batch's messages one by
one). Each message is looked up on its topic by its producer's id (UNIQ_KEY, the key
index): one found there was stored again (its producer retried) and is not sent; any
other is sent with its properties, UNIQ_KEY included, so a consumer that deduplicates by
message id still can. A message without a UNIQ_KEY cannot be looked up and is sent,
saying so.

Each message goes back to the queue it was cut from -- the same queue id of the same
broker group (``--brokerName``, else the group whose broker address stored the
records) -- in the order the log held them, so a queue's order holds. The lookups run
ahead of the sends, a window at a time; a message whose UNIQ_KEY an earlier one of the
cut has (its producer retried before the cut) is sent once. Once a send to a queue
fails, the later messages of that queue are not sent. Records of system topics
(delayed and timer messages waiting in their system topic, transaction half messages,
trace records) are not sent, and are listed as skipped: their delivery belongs to the
broker's delay, timer and transaction-check services.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
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
from tidemq.client.validation import NOT_ALLOWED_SEND_TOPICS
from tidemq.errors import TideMQError
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.record import pack_host

if TYPE_CHECKING:
    from tidemq.client import AdminClient
    from tidemq.types import MessageExt

__all__ = ["register"]

#: Topics whose records wait for a broker service (or hold its bookkeeping), not for
#: consumers: a producer may not send to them, and trace records are not resent.
_SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {"RMQ_SYS_TRACE_TOPIC", "OFFSET_MOVED_EVENT"}
#: Properties the broker added when it stored or served the record, not the producer's.
_BROKER_PROPERTIES = frozenset({"MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME",
                                "REAL_TOPIC", "REAL_QID", "INNER_NUM", "INNER_BASE"})
_UNLOOKED = " (no UNIQ_KEY: not looked up)"
#: A kept message whose UNIQ_KEY an earlier one of the cut has (its producer retried
#: before the cut), by dry run or not.
_TWICE = {False: "already sent: an earlier copy in the cut was sent",
          True: "would not send: an earlier copy in the cut would be sent"}
#: Kept messages looked up before the first of them is sent, and lookups at a time.
WINDOW = 256
LOOKUPS = 32

KeptFile = Annotated[Path, typer.Option(
    "-f", "--file", help="A kept cut: <store>/truncated/<epoch>-<fromOffset>.log "
                         "('tidemq store cuts' lists them).",
    exists=True, dir_okay=False, resolve_path=True)]
BrokerName = Annotated[str | None, typer.Option(
    "-b", "--brokerName", help="The broker group the cut came from (default: the group of "
                               "the broker address that stored the records).")]


class NoBrokerGroup(TideMQError):
    """The kept records' store address is no broker of the cluster."""

    def __init__(self, hosts: list[str]) -> None:
        super().__init__(f"no broker of the cluster has the address that stored these "
                         f"records ({', '.join(hosts)}); name the broker group they came "
                         "from with --brokerName")
        self.hosts = hosts


def register(app: typer.Typer) -> None:
    """Attach the command to the ``tidemq admin`` app."""
    app.command("resendKeptCut")(resend_kept_cut)


def resend_kept_cut(
    file: KeptFile,
    broker_name: BrokerName = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Look every message up and say what would be sent; send none.")]
    = False,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """Send the messages of a kept cut that the cluster does not hold (each looked up by
    its message id first) to the queues they were cut from, in order; exits with 1 when
    a send failed, 2 when the file is not a kept cut."""
    messages = _read(file)

    async def resend(admin: AdminClient) -> list[dict[str, Any]]:
        group = broker_name or await _group_of(admin, messages)
        return await _resend(admin, group, messages, dry_run)

    rows = run_admin(namesrv, resend)
    if json_out:
        emit_json(rows)
    else:
        print_columns(["#Phys", "#Topic", "#QueueId", "#MsgId", "#Outcome"],
                      [[r["phys"], r["topic"], r["queueId"], r["msgId"], r["outcome"]]
                       for r in rows])
    if any(r["outcome"].startswith(("failed", "not sent")) for r in rows):
        raise typer.Exit(1)


def _read(file: Path) -> list[MessageExt]:
    """The kept file's messages as a consumer reads them; exit 2 naming what is wrong."""
    # the store's reader loads numpy: imported when the command runs, not at --help
    from tidemq.cli.commands.kept_view import kept_view

    try:
        return kept_view(file)
    except (TideMQError, OSError) as exc:
        console_err().print(f"error: {file}: not a kept cut: {exc}", markup=False)
        raise typer.Exit(2) from exc


async def _group_of(admin: AdminClient, messages: list[MessageExt]) -> str:
    """The broker group whose broker stored the records (by its address)."""
    hosts = sorted({m.store_host for m in messages})
    groups = {b.address: b.broker_name for b in await admin.cluster_list()}
    found = {groups[h] for h in hosts if h in groups}
    if len(found) != 1 or any(h not in groups for h in hosts):
        raise NoBrokerGroup(hosts)
    return found.pop()


async def _resend(admin: AdminClient, group: str, messages: list[MessageExt],
                  dry_run: bool) -> list[dict[str, Any]]:
    """Each message looked up and, where the cluster lacks it, sent. The lookups of a
    window of :data:`WINDOW` messages run :data:`LOOKUPS` at a time; the window's sends
    then go one by one in log order, so each queue's order holds. Progress goes to
    stderr once the run has more than one window."""
    from tidemq.client import Producer  # the other commands send nothing

    rows = []
    failed: set[tuple[str, int]] = set()  # queues a send failed on: nothing more goes
    sent_ids: set[str] = set()  # UNIQ_KEYs sent by this run: a later copy is not sent
    gate = asyncio.Semaphore(LOOKUPS)

    async def look(m: MessageExt) -> tuple[str, str] | None:
        async with gate:
            return await _lookup(admin, m)

    total, sent = len(messages), 0
    async with Producer("TOOLS_PRODUCER", instance=admin.instance) as producer:
        for first in range(0, total, WINDOW):
            window = messages[first:first + WINDOW]
            looked = await asyncio.gather(*(look(m) for m in window))
            for m, settled in zip(window, looked, strict=True):
                keyed = "UNIQ_KEY" in m.properties
                if settled is not None:
                    outcome, new_id = settled
                elif keyed and m.msg_id in sent_ids:
                    outcome, new_id = _TWICE[dry_run], ""
                else:
                    outcome, new_id = await _send(producer, group, m, dry_run, failed)
                    if outcome.startswith("failed"):
                        failed.add((m.topic, m.queue_id))
                    if outcome.startswith(("sent", "would send")):
                        sent += 1
                        if keyed:
                            sent_ids.add(m.msg_id)
                rows.append({"phys": m.commit_log_offset, "topic": m.topic,
                             "queueId": m.queue_id, "msgId": m.msg_id, "keys": m.keys,
                             "outcome": outcome, "offsetMsgId": new_id})
            if total > WINDOW:
                done = "to send" if dry_run else "sent"
                console_err().print(f"resendKeptCut: {first + len(window):,} of {total:,} "
                                    f"messages looked up, {sent:,} {done}", markup=False)
    return rows


async def _lookup(admin: AdminClient, m: MessageExt) -> tuple[str, str] | None:
    """The outcome of a kept message that is not to be sent (a system topic's record,
    one the cluster holds, one that could not be looked up) and its offset id there;
    ``None`` when it is to be sent."""
    props = m.properties
    if m.topic in _SYSTEM_TOPICS:
        real = props.get("REAL_TOPIC")
        return (f"skipped: stored in system topic {m.topic}"
                + (f" for {real}" if real else "")
                + "; see 'tidemq store cuts --messages --json'"), ""
    if "UNIQ_KEY" not in props:
        return None
    try:
        found = await admin.query_messages_by_key(m.topic, m.msg_id, unique=True)
    except TideMQError as exc:
        return f"failed: could not look it up: {exc}", ""
    if found:
        return "already stored", encode_offset_msg_id(pack_host(found[0].store_host),
                                                      found[0].commit_log_offset)
    return None


async def _send(producer: Any, group: str, m: MessageExt, dry_run: bool,
                failed: set[tuple[str, int]]) -> tuple[str, str]:
    """A kept message the cluster lacks, sent to its queue (unless an earlier one of the
    queue failed): its outcome and its new offset id (or "")."""
    from tidemq.client import Message
    from tidemq.types import MessageQueue

    note = "" if "UNIQ_KEY" in m.properties else _UNLOOKED
    if (m.topic, m.queue_id) in failed:
        return f"not sent: an earlier message of queue {m.queue_id} failed", ""
    if dry_run:
        return "would send" + note, ""
    queue = MessageQueue(m.topic, group, m.queue_id)
    sent = {k: v for k, v in m.properties.items() if k not in _BROKER_PROPERTIES}
    try:
        result = await producer.send(Message(m.topic, m.body, sent, m.flag), queue=queue)
    except TideMQError as exc:
        return f"failed: {exc}", ""
    return f"sent: {result.status.value}{note}", str(result.offset_msg_id)
