"""``tidemq admin resendKeptCut``: send again the messages of a kept cut that the cluster
does not hold.

A kept cut (``truncated/<epoch>-<fromOffset>.log``, :mod:`tidemq.store.kept_cuts`) holds
the records an old master cut off its commit log when it came back as a replica. They
are read as a consumer reads them (bodies inflated, an inner batch's messages one by
one), a record at a time: once to check the file and size the table, then a window at a
time as they are sent, each outcome printed as it is decided, so a cut of any size takes
the memory of one window. Each message is looked up on its topic by its producer's id
(UNIQ_KEY, the key index): one found there was stored again (its producer retried) and
is not sent; any other is sent with its properties, UNIQ_KEY included, so a consumer that
deduplicates by message id still can. A message without a UNIQ_KEY cannot be looked up
and is sent, saying so.

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

import array
import asyncio
import contextlib
import dataclasses
import fcntl
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    console_err,
    run_admin,
)
from tidemq.cli.json_rows import JsonRows
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
_HEADERS = ("#Phys", "#Topic", "#QueueId", "#MsgId", "#Outcome")
#: Kept messages looked up before the first of them is sent (at most so many, and at
#: most so many bytes of bodies), and lookups at a time.
WINDOW = 256
WINDOW_BYTES = 16 * 1024 * 1024
LOOKUPS = 32
#: Messages between two progress lines of the first pass (:func:`_survey`).
CHECK_PROGRESS = 100_000

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
    a send failed or another run is sending the file, 2 when it is not a kept cut."""
    with _sending(file, dry_run):
        survey = _survey(file)
        rows = _Rows(survey, json_out)

        async def resend(admin: AdminClient) -> None:
            group = broker_name or await _group_of(admin, survey.hosts)
            await _resend(admin, group, file, survey, dry_run, rows)

        try:
            run_admin(namesrv, resend)
        except typer.Exit:
            rows.close(whole=False)
            raise
        rows.close()
    if rows.failed:
        raise typer.Exit(1)


@contextlib.contextmanager
def _sending(file: Path, dry_run: bool) -> Iterator[None]:
    """Hold the kept file's lock while its messages are sent (not for a dry run): two
    runs at once would each find a message missing and both send it. The lock is the
    operating system's (``flock``), given back when the process ends, however it ends."""
    if dry_run:
        yield
        return
    with file.open("rb") as held:
        try:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            console_err().print(f"error: {file}: another resendKeptCut is sending this cut; "
                                "run it again once that one has ended (it sends only what "
                                "is still missing)", markup=False)
            raise typer.Exit(1) from None
        yield


@dataclasses.dataclass(slots=True)
class _Survey:
    """What one pass over a kept file tells before anything is sent: that it holds whole
    records, how many messages, which addresses stored them, how wide the table's
    columns are, and which UNIQ_KEYs may be held more than once (by their hashes, eight
    bytes a message while the pass runs)."""

    messages: int = 0
    hosts: set[str] = dataclasses.field(default_factory=set)
    widths: list[int] = dataclasses.field(default_factory=lambda: [len(h) for h in _HEADERS])
    twice: frozenset[int] = frozenset()


def _survey(file: Path) -> _Survey:
    """One pass over the kept file (:class:`_Survey`); exit 2 naming what is wrong."""
    # the store's reader loads numpy: imported when the command runs, not at --help
    import numpy as np

    from tidemq.cli.commands.kept_view import kept_messages

    survey, hashes = _Survey(), array.array("q")
    widths = survey.widths
    try:
        for m in kept_messages(file):
            survey.messages += 1
            if not survey.messages % CHECK_PROGRESS:
                console_err().print(f"resendKeptCut: {survey.messages:,} messages checked",
                                    markup=False)
            survey.hosts.add(m.store_host)
            for i, cell in enumerate(_cells(m)[:-1]):
                widths[i] = max(widths[i], len(cell))
            if "UNIQ_KEY" in m.properties:
                hashes.append(hash(m.msg_id))
    except (TideMQError, OSError) as exc:
        console_err().print(f"error: {file}: not a kept cut: {exc}", markup=False)
        raise typer.Exit(2) from exc
    ordered = np.sort(np.frombuffer(hashes, dtype=np.int64))
    survey.twice = frozenset(ordered[1:][ordered[1:] == ordered[:-1]].tolist())
    return survey


def _cells(m: MessageExt, outcome: str = "") -> list[str]:
    """A message's row of the table, under :data:`_HEADERS`."""
    return [str(m.commit_log_offset), m.topic, str(m.queue_id), m.msg_id, outcome]


class _Rows:
    """The outcomes, written as they are decided (a cut may hold millions of messages):
    mqadmin's columns, as wide as :class:`_Survey` found them, or a JSON array."""

    def __init__(self, survey: _Survey, json_out: bool) -> None:
        self.widths = survey.widths
        self.json = JsonRows() if json_out else None
        self.count = 0
        self.failed = False

    def add(self, m: MessageExt, outcome: str, new_id: str) -> None:
        self.failed = self.failed or outcome.startswith(("failed", "not sent"))
        if self.json is not None:
            self.json.add({"phys": m.commit_log_offset, "topic": m.topic,
                           "queueId": m.queue_id, "msgId": m.msg_id, "keys": m.keys,
                           "outcome": outcome, "offsetMsgId": new_id})
        else:
            if not self.count:
                self._line(list(_HEADERS))
            self._line(_cells(m, outcome))
        self.count += 1

    def _line(self, cells: list[str]) -> None:
        sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(cells, self.widths, strict=True))
                         .rstrip() + "\n")

    def close(self, whole: bool = True) -> None:
        """End the JSON array (:meth:`JsonRows.close <tidemq.cli.json_rows.JsonRows.close>`)."""
        if self.json is not None:
            self.json.close(whole)
        sys.stdout.flush()


async def _group_of(admin: AdminClient, hosts: set[str]) -> str:
    """The broker group whose broker stored the records (by its address)."""
    groups = {b.address: b.broker_name for b in await admin.cluster_list()}
    found = {groups[h] for h in hosts if h in groups}
    if len(found) != 1 or any(h not in groups for h in hosts):
        raise NoBrokerGroup(sorted(hosts))
    return found.pop()


async def _resend(admin: AdminClient, group: str, file: Path, survey: _Survey,
                  dry_run: bool, rows: _Rows) -> None:
    """Each message looked up and, where the cluster lacks it, sent. The file is read
    again a window at a time (:func:`_windows`); a window's lookups run
    :data:`LOOKUPS` at a time, then its sends go one by one in log order, so each queue's
    order holds. Progress goes to stderr once the run has more than one window."""
    from tidemq.cli.commands.kept_view import kept_messages
    from tidemq.client import Producer  # the other commands send nothing

    failed: set[tuple[str, int]] = set()  # queues a send failed on: nothing more goes
    sent_ids: set[str] = set()  # UNIQ_KEYs of survey.twice sent by this run
    gate = asyncio.Semaphore(LOOKUPS)

    async def look(m: MessageExt) -> tuple[str, str] | None:
        async with gate:
            return await _lookup(admin, m)

    total, done, sent = survey.messages, 0, 0
    async with Producer("TOOLS_PRODUCER", instance=admin.instance) as producer:
        for window in _windows(kept_messages(file)):
            looked = await asyncio.gather(*(look(m) for m in window))
            for m, settled in zip(window, looked, strict=True):
                again = "UNIQ_KEY" in m.properties and hash(m.msg_id) in survey.twice
                if settled is not None:
                    outcome, new_id = settled
                elif again and m.msg_id in sent_ids:
                    outcome, new_id = _TWICE[dry_run], ""
                else:
                    outcome, new_id = await _send(producer, group, m, dry_run, failed)
                    if outcome.startswith("failed"):
                        failed.add((m.topic, m.queue_id))
                    if outcome.startswith(("sent", "would send")):
                        sent += 1
                        if again:
                            sent_ids.add(m.msg_id)
                rows.add(m, outcome, new_id)
            done += len(window)
            if done < total or len(window) < done:  # the run has more than one window
                verb = "to send" if dry_run else "sent"
                console_err().print(f"resendKeptCut: {done:,} of {total:,} messages "
                                    f"looked up, {sent:,} {verb}", markup=False)


def _windows(messages: Iterator[MessageExt]) -> Iterator[list[MessageExt]]:
    """The messages in windows of :data:`WINDOW` messages or :data:`WINDOW_BYTES` bytes of
    bodies, whichever is reached first (a window holds at least one message)."""
    window: list[MessageExt] = []
    size = 0
    for m in messages:
        if window and (len(window) == WINDOW or size + len(m.body) > WINDOW_BYTES):
            yield window
            window, size = [], 0
        window.append(m)
        size += len(m.body)
    if window:
        yield window


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
