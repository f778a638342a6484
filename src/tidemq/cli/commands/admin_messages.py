"""``tidemq admin`` message commands, with mqadmin's names, flags and output.

====================  =========================================================
command               what it does
====================  =========================================================
printMsg              every message of a topic stored between ``-b`` and ``-e``
                      (all by default), tag expression ``-s``
printMsgByQueue       the same for one queue (``-a`` broker name, ``-i`` queue id);
                      ``-f true`` counts messages by tag
queryMsgByUniqueKey   a message by its message id (UNIQ_KEY) in topic ``-t``; ``-a``
                      every message with that key (at most 32); ``-g GROUP -d CLIENT``
                      have that consumer consume it (:mod:`.admin_resend`)
====================  =========================================================
"""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Annotated, Any

import typer

from tidemq.cli.commands.admin import message_json, print_message
from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    Topic,
    console_err,
    console_out,
    emit_json,
    parse_bool,
    parse_time_ms,
    run_admin,
)
from tidemq.cli.commands.admin_resend import (
    ClientIdOpt,
    ConsumerGroupOpt,
    resend_to_consumer,
    wants_resend,
)
from tidemq.client import AdminClient, MessageExt, MessageQueue
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.client.errors import MessageNotFoundError

__all__ = ["register"]

Charset = Annotated[str, typer.Option(
    "-c", "--charsetName", help="Decode bodies with this charset.")]
SubExpr = Annotated[str, typer.Option(
    "-s", "--subExpression", help="Tag expression, e.g. 'TagA || TagB'.")]
Begin = Annotated[str | None, typer.Option(
    "-b", "--beginTimestamp", help="epoch ms or yyyy-MM-dd#HH:mm:ss:SSS (local).")]
End = Annotated[str | None, typer.Option(
    "-e", "--endTimestamp", help="epoch ms or yyyy-MM-dd#HH:mm:ss:SSS (local).")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("printMsg")(print_msg)
    app.command("printMsgByQueue")(print_msg_by_queue)
    app.command("queryMsgByUniqueKey")(query_msg_by_unique_key)


def _decode(body: bytes, charset: str) -> str:
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        raise typer.BadParameter(f"unknown charset {charset!r}", param_hint="-c") from None


def _time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ",
                                                                timespec="milliseconds")


def _describe(msg: MessageExt) -> str:
    return (f"MessageExt [brokerName={msg.broker_name}, queueId={msg.queue_id}, "
            f"queueOffset={msg.queue_offset}, commitLogOffset={msg.commit_log_offset}, "
            f"storeTimestamp={_time(msg.store_timestamp)}, tags={msg.tags or ''}, "
            f"keys={' '.join(msg.keys)}, reconsumeTimes={msg.reconsume_times}]")


def _mq(queue: MessageQueue) -> str:
    return (f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, "
            f"queueId={queue.queue_id}]")


def _msg_line(msg: MessageExt, charset: str, with_body: bool) -> str:
    body = _decode(msg.body, charset) if with_body else "NOT PRINT BODY"
    return f"MSGID: {msg.uniq_key or msg.msg_id} {_describe(msg)} BODY: {body}"


def _window(begin: str | None, end: str | None) -> tuple[int | None, int | None]:
    begin_ms = parse_time_ms(begin, "-b") if begin is not None else None
    end_ms = parse_time_ms(end, "-e") if end is not None else None
    if begin_ms is not None and end_ms is not None and end_ms < begin_ms:
        raise typer.BadParameter("the end (-e) is before the begin (-b)")
    return begin_ms, end_ms


async def _read(admin: AdminClient, queues: list[MessageQueue], expression: str,
                begin_ms: int | None, end_ms: int | None
                ) -> list[tuple[MessageQueue, int, int, list[MessageExt]]]:
    from tidemq.client import message_scan as scan  # its pull reader loads numpy

    out = []
    for queue in sorted(queues, key=lambda q: (q.broker_name, q.queue_id)):
        start, end = await scan.queue_range(admin, queue, begin_ms, end_ms)
        msgs: list[MessageExt] = []
        async for batch in scan.scan_queue(admin, queue, start, end, expression):
            msgs.extend(batch)
        out.append((queue, start, end, msgs))
    return out


def print_msg(
    topic: Topic, charset: Charset = "UTF-8", expression: SubExpr = "*",
    begin: Begin = None, end: End = None,
    print_body: Annotated[str, typer.Option(
        "-d", "--printBody", help="true: print each body (the default).")] = "true",
    lmq_parent: Annotated[str | None, typer.Option(
        "-l", "--lmqParentTopic",
        help="-t is an LMQ: read it on the brokers of this topic (the one its messages "
             "were sent to).")] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Print the messages of every queue of a topic stored in a time window."""
    begin_ms, end_ms = _window(begin, end)
    with_body = parse_bool(print_body, "-d")

    async def read(admin: AdminClient) -> list[tuple[MessageQueue, int, int,
                                                     list[MessageExt]]]:
        if lmq_parent is None:
            route = await admin.instance.routes.get(topic, refresh=True)
            queues = list(route.subscribe_queues)
        else:  # an LMQ has no route of its own: queue 0 on each broker of its parent
            route = await admin.instance.routes.get(lmq_parent, refresh=True)
            queues = [MessageQueue(topic, name, 0) for name in sorted(route.brokers)]
        return await _read(admin, queues, expression, begin_ms, end_ms)

    found = run_admin(namesrv, read)
    if json_out:
        emit_json([message_json(m) for _, _, _, msgs in found for m in msgs])
        return
    out = console_out()
    for queue, start, stop, msgs in found:
        out.print(f"minOffset={start}, maxOffset={stop}, {_mq(queue)}", markup=False)
        for msg in msgs:
            out.print(_msg_line(msg, charset, with_body), markup=False, soft_wrap=True)
        out.print(f"{_mq(queue)} print msg finished. offset={stop}", markup=False)
    out.print("--------------------------------------------------------", markup=False)


def print_msg_by_queue(
    topic: Topic,
    broker: Annotated[str, typer.Option("-a", "--brokerName", help="Broker name.")],
    queue_id: Annotated[int, typer.Option("-i", "--queueId", min=0, help="Queue id.")],
    charset: Charset = "UTF-8", expression: SubExpr = "*",
    begin: Begin = None, end: End = None,
    print_msgs: Annotated[str, typer.Option(
        "-p", "--print", help="true: print each message.")] = "false",
    print_body: Annotated[str, typer.Option(
        "-d", "--printBody", help="true: with its body.")] = "false",
    count_tags: Annotated[str, typer.Option(
        "-f", "--calculate", help="true: count the messages by tag.")] = "false",
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Print, or count by tag, the messages of one queue stored in a time window."""
    begin_ms, end_ms = _window(begin, end)
    show, with_body = parse_bool(print_msgs, "-p"), parse_bool(print_body, "-d")
    by_tag = parse_bool(count_tags, "-f")
    queue = MessageQueue(topic, broker, queue_id)
    [(_, start, stop, msgs)] = run_admin(namesrv, lambda admin: _read(
        admin, [queue], expression, begin_ms, end_ms))
    tags = Counter(m.tags or "" for m in msgs)
    if json_out:
        doc: dict[str, Any] = {"topic": topic, "brokerName": broker, "queueId": queue_id,
                               "minOffset": start, "maxOffset": stop, "count": len(msgs)}
        if by_tag:
            doc["tags"] = dict(tags.most_common())
        if show:
            doc["messages"] = [message_json(m) for m in msgs]
        emit_json(doc)
        return
    out = console_out()
    if by_tag:
        for tag, count in tags.most_common():
            out.print(f"Tag: {tag:<30s} Count: {count}", markup=False)
    if show:
        for msg in msgs:
            out.print(_msg_line(msg, charset, with_body), markup=False, soft_wrap=True)


def query_msg_by_unique_key(
    msg_id: Annotated[str, typer.Option("-i", "--msgId", help="Message id (UNIQ_KEY).")],
    topic: Topic,
    show_all: Annotated[bool, typer.Option(
        "-a", "--showAll", help="Every message with this key (at most 32).")] = False,
    group: ConsumerGroupOpt = None, client_id: ClientIdOpt = None,
    cluster: Annotated[str | None, typer.Option(
        "-c", "--cluster", help="Only the brokers of this cluster.")] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """A message by its message id (the producer's UNIQ_KEY); with -g and -d, have that
    consumer consume it again."""
    if wants_resend(group, client_id):
        assert group is not None and client_id is not None
        resend_to_consumer(namesrv, group, client_id, topic, msg_id, json_out)
        return
    found = run_admin(namesrv, lambda admin: admin.query_messages_by_key(
        topic, msg_id, max_num=32, unique=True, cluster=cluster))
    if not found:
        console_err().print(f"error: {MessageNotFoundError(msg_id)} in topic {topic}",
                            markup=False)
        raise typer.Exit(1)
    msgs = found if show_all else found[:1]
    if json_out:
        emit_json([message_json(m) for m in msgs] if show_all else message_json(msgs[0]))
        return
    for msg in msgs:
        print_message(msg)
