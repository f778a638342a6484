"""``tidemq admin queryMsgTraceById``: a message's trace, with mqadmin's flags and table.

====================  =========================================================
command               what it does
====================  =========================================================
queryMsgTraceById     the trace of message ``-i`` recorded in trace topic ``-t``
                      (default ``RMQ_SYS_TRACE_TOPIC``): who sent it, when, how long
                      the send took and when the broker stored it; how its
                      transaction ended (a transactional message); then, per
                      consumer group, each delivery with its cost, status and
                      retry count
====================  =========================================================

The tables are mqadmin's (``%-10s %-20s %-20s %-20s %-10s %-10s``: type, group, client
host, time, cost, status) with two columns added at the end: ``#StoreTime`` for a send,
``#RetryTimes`` for a delivery. A delivery whose outcome was not recorded (yet) shows
``-`` as its cost and ``unknown`` as its status. A transaction's end is a row of type
``EndTrans``: producer group, client host, time, the state (``COMMIT_MESSAGE``,
``ROLLBACK_MESSAGE``, ``UNKNOW``) and whether it answered a broker's check-back.

A trace with a send and no delivery of a message stored a few seconds ago or less
(:func:`~tidemq.client.trace_view.consumes_may_lag`) ends with a note that its
consume records may not be indexed yet (``consumesMayLag`` in ``--json``): a
consumer sends its records a moment after consuming, and the broker indexes them a
moment after storing them.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    console_err,
    emit_json,
    run_admin,
)
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.client.trace_view import CONSUMES_MAY_LAG, MessageTrace, query_trace
from tidemq.codec.trace import DEFAULT_TRACE_TOPIC

__all__ = ["register"]

_ROW = "%-10s %-20s %-20s %-20s %-10s %-10s %s"


def register(app: typer.Typer) -> None:
    """Attach the command to the ``tidemq admin`` app."""
    app.command("queryMsgTraceById")(query_msg_trace_by_id)


def _time(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _status(success: bool | None) -> str:
    return "unknown" if success is None else ("success" if success else "failed")


def trace_json(trace: MessageTrace) -> dict[str, Any]:
    return {
        "msgId": trace.msg_id,
        "sends": [{"type": "Pub", "producerGroup": s.group, "clientHost": s.client_host,
                   "sendTime": s.send_ms, "costTime": s.cost_ms,
                   "status": _status(s.success), "topic": s.topic, "tags": s.tags,
                   "keys": s.keys, "storeHost": s.store_host,
                   "offsetMsgId": s.offset_msg_id, "storeTime": s.store_ms or None}
                  for s in trace.sends],
        "consumes": [{"type": "Sub", "consumerGroup": c.group, "clientHost": c.client_host,
                      "consumeTime": c.consume_ms, "costTime": c.cost_ms,
                      "status": _status(c.success), "retryTimes": c.retry_times}
                     for c in trace.consumes],
        "transactions": [{"type": "EndTransaction", "producerGroup": t.group,
                          "clientHost": t.client_host, "endTime": t.end_ms,
                          "transactionState": t.state, "fromTransactionCheck": t.from_check,
                          "transactionId": t.transaction_id, "storeHost": t.store_host}
                         for t in trace.transactions],
        "unreadable": trace.refused,
        "consumesMayLag": trace.consumes_may_lag,
    }


def _print(trace: MessageTrace) -> None:
    for s in trace.sends:
        typer.echo(_ROW % ("#Type", "#ProducerGroup", "#ClientHost", "#SendTime",
                           "#CostTimes", "#Status", "#StoreTime"))
        typer.echo((_ROW % ("Pub", s.group, s.client_host, _time(s.send_ms),
                            f"{s.cost_ms}ms", _status(s.success), _time(s.store_ms)))
                   .rstrip())
        typer.echo("")
    if trace.transactions:
        typer.echo(_ROW % ("#Type", "#ProducerGroup", "#ClientHost", "#EndTime",
                           "#State", "#FromCheck", ""))
        for t in trace.transactions:
            typer.echo((_ROW % ("EndTrans", t.group, t.client_host, _time(t.end_ms),
                                t.state, str(t.from_check).lower(), "")).rstrip())
        typer.echo("")
    groups: dict[str, list[Any]] = {}
    for c in trace.consumes:
        groups.setdefault(c.group, []).append(c)
    for consumes in groups.values():
        typer.echo(_ROW % ("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime",
                           "#CostTimes", "#Status", "#RetryTimes"))
        for c in consumes:
            cost = "-" if c.cost_ms is None else f"{c.cost_ms}ms"
            typer.echo(_ROW % ("Sub", c.group or "-", c.client_host, _time(c.consume_ms),
                               cost, _status(c.success), c.retry_times))
        typer.echo("")


def query_msg_trace_by_id(
    msg_id: Annotated[str, typer.Option("-i", "--msgId", help="Message id (UNIQ_KEY).")],
    trace_topic: Annotated[str, typer.Option(
        "-t", "--traceTopic", help="The message trace topic.")] = DEFAULT_TRACE_TOPIC,
    begin: Annotated[int, typer.Option(
        "-b", "--beginTimestamp", min=0, help="Begin timestamp (epoch ms).")] = 0,
    end: Annotated[int | None, typer.Option(
        "-e", "--endTimestamp", min=0, help="End timestamp (epoch ms; default: now).")] = None,
    max_num: Annotated[int, typer.Option(
        "-c", "--maxNum", "--num", min=1,
        help="Trace messages read at most (mqadmin's -c; -num in older releases).")] = 64,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """A message's trace: its send, and each group's deliveries."""
    msg_id = msg_id.strip()
    trace = run_admin(namesrv, lambda admin: query_trace(
        admin, msg_id, trace_topic=trace_topic, max_num=max_num, begin_ms=begin,
        end_ms=end))
    if json_out:
        emit_json(trace_json(trace))
        return
    if not trace.sends and not trace.consumes and not trace.transactions:
        console_err().print(f"error: no trace of message {msg_id} in {trace_topic}",
                            markup=False)
        raise typer.Exit(1)
    _print(trace)
    for why in trace.refused:
        console_err().print(f"warning: unreadable trace record: {why}", markup=False)
    if trace.consumes_may_lag:
        typer.echo(f"note: {CONSUMES_MAY_LAG}")
