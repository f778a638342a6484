"""``tidemq admin``: mqadmin-style administration of a running cluster.

Command names and short flags follow RocketMQ's ``mqadmin`` (``docs/admin.md`` lists
every command). This module holds the topic, cluster and lookup commands below; the
group commands are in :mod:`tidemq.cli.commands.admin_groups`,
:mod:`~tidemq.cli.commands.admin_offsets` and
:mod:`~tidemq.cli.commands.admin_subgroups`, configuration and permissions in
:mod:`~tidemq.cli.commands.admin_config`, message printing in
:mod:`~tidemq.cli.commands.admin_messages`, traffic, probes and housekeeping in
:mod:`~tidemq.cli.commands.admin_cluster`. Every command takes
``-n/--namesrv`` (default: ``$TIDEMQ_NAMESRV``, ``$NAMESRV_ADDR``, else ``127.0.0.1:9876``)
and ``--json`` (one JSON document on stdout for scripts; humans get tables). A failure
-- no route, an unknown cluster, a refused connection, a broker's error answer -- prints one
``error: ...`` line on stderr and exits with 1; bad flags exit with 2.

====================  =========================================================
command               what it does
====================  =========================================================
updateTopic           create or update a topic on every master of ``-c`` (default:
                      of every cluster) or on broker ``-b``; ``--logical-queue N``
                      makes a logical topic (the logical-queue commands are in
                      :mod:`tidemq.cli.commands.logical`)
deleteTopic           delete a topic from the masters and the name servers
topicList             every topic the name servers know
topicRoute            a topic's route (queue and broker data)
topicStatus           min/max offset and last store time of every queue
clusterList           every broker of every cluster, with its role, TPS and replication lag
brokerStatus          a broker's runtime figures (GET_BROKER_RUNTIME_INFO), LMQ counts
                      included (``lmqCount``, ``lmqEntries``)
deleteLmq             delete a light message queue on broker ``-b``: its entries and
                      every group's offset
queryMsgById          a message by offset id, or by UNIQ_KEY with ``-t``
queryMsgByKey         messages whose KEYS contain ``-k``
queryMsgByOffset      the message at an offset of one queue
sendMessage           send one message and print where it was stored
consumeMessage        print messages until ``-c`` were read or none came for
                      ``--timeout`` seconds
====================  =========================================================
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import dataclasses
import datetime
import re
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer
from rich.markup import escape

from tidemq.cli.commands.admin_common import (
    AccessKey,
    Interval,
    JsonFlag,
    Namesrv,
    SecretKey,
    TlsCa,
    TlsCert,
    TlsKey,
    Topic,
    UseTls,
    console_err,
    console_out,
    emit_json,
    parse_bool,
    parse_time_ms,
    print_columns,
    repeat_every,
    run_admin,
    set_account,
    set_tls,
)
from tidemq.cli.commands.admin_resend import (
    ClientIdOpt,
    ConsumerGroupOpt,
    resend_to_consumer,
    wants_resend,
)
from tidemq.cli.commands.logical import create_logical_topic
from tidemq.cli.markup import counted
from tidemq.client import AdminClient
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.codec.headers import parse_attributes
from tidemq.errors import TideMQError
from tidemq.types import MessageExt, MessageQueue

if TYPE_CHECKING:
    from tidemq.client.admin import QueueStatus
    from tidemq.codec.bodies import TopicRouteData

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True,
                  help="Administer a running cluster (mqadmin-style commands).")


@app.callback()
def _account(access_key: AccessKey = "", secret_key: SecretKey = "", tls: UseTls = None,
             tls_ca: TlsCa = "", tls_cert: TlsCert = "", tls_key: TlsKey = "") -> None:
    """Administer a running cluster (mqadmin-style commands)."""
    set_account(access_key, secret_key)
    set_tls(tls, tls_ca, tls_cert, tls_key)

#: The groups the tools use, as mqadmin's.
TOOLS_PRODUCER = "TOOLS_PRODUCER"
TOOLS_CONSUMER = "TOOLS_CONSUMER"

def _when(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def _mqadmin_time(ms: int) -> str:
    """mqadmin's ``yyyy-MM-dd HH:mm:ss,SSS`` (local), empty for no time."""
    if ms <= 0:
        return ""
    at = datetime.datetime.fromtimestamp(ms / 1000)
    return at.strftime("%Y-%m-%d %H:%M:%S,") + f"{at.microsecond // 1000:03d}"


# ---------------------------------------------------------------------- messages


def _body_fields(body: bytes, charset: str = "utf-8") -> dict[str, str]:
    try:
        return {"body": body.decode(charset)}
    except UnicodeDecodeError:
        return {"bodyBase64": base64.b64encode(body).decode("ascii")}


def _charset(value: str) -> str:
    """mqadmin's ``-f`` (bodyFormat): the charset a body is printed in."""
    try:
        codecs.lookup(value)
    except LookupError:
        raise typer.BadParameter(f"unknown charset {value!r}") from None
    return value


BodyFormat = Annotated[str, typer.Option(
    "-f", "--bodyFormat", callback=_charset,
    help="Print the body in this charset (UTF-8, GBK, ...).")]


def message_json(msg: MessageExt, charset: str = "utf-8") -> dict[str, Any]:
    """A message as the JSON the commands print (RocketMQ's field names)."""
    return {
        "topic": msg.topic, "brokerName": msg.broker_name, "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset, "msgId": msg.uniq_key or msg.msg_id,
        "offsetMsgId": msg.msg_id if msg.msg_id != msg.uniq_key else "",
        "tags": msg.tags, "keys": msg.keys, "commitLogOffset": msg.commit_log_offset,
        "storeSize": msg.store_size, "sysFlag": msg.sys_flag, "flag": msg.flag,
        "bornTimestamp": msg.born_timestamp, "bornHost": msg.born_host,
        "storeTimestamp": msg.store_timestamp, "storeHost": msg.store_host,
        "reconsumeTimes": msg.reconsume_times, "properties": dict(msg.properties),
        **_body_fields(msg.body, charset),
    }


def _body_text(body: bytes, limit: int | None = None, charset: str = "utf-8") -> str:
    text = body.decode(charset, errors="replace")
    if limit is not None and len(text) > limit:
        return text[:limit] + f"... ({len(body)} bytes)"
    return text


def _queue_text(msg: MessageExt) -> str:
    """``broker:queueId`` (lookups by id or key do not learn the broker name)."""
    return f"{msg.broker_name}:{msg.queue_id}" if msg.broker_name else str(msg.queue_id)


def print_message(msg: MessageExt, charset: str = "utf-8") -> None:
    """A message as mqadmin prints one: a ``%-20s %s`` line a field, then a blank line."""
    rows: list[tuple[str, object]] = [
        ("OffsetID:", msg.msg_id), ("Topic:", msg.topic), ("Tags:", f"[{msg.tags or ''}]"),
        ("Keys:", f"[{' '.join(msg.keys)}]"), ("Queue ID:", msg.queue_id),
        ("Queue Offset:", msg.queue_offset), ("CommitLog Offset:", msg.commit_log_offset),
        ("Reconsume Times:", msg.reconsume_times),
        ("Born Timestamp:", _when(msg.born_timestamp)),
        ("Store Timestamp:", _when(msg.store_timestamp)),
        ("Born Host:", msg.born_host), ("Store Host:", msg.store_host),
        ("System Flag:", msg.sys_flag),
        ("Properties:", ", ".join(f"{k}={v}" for k, v in sorted(msg.properties.items()))),
        ("Message Body:", _body_text(msg.body, charset=charset)),
    ]
    out = console_out()
    for label, value in rows:
        out.print(f"{label:<20s} {value}", markup=False, soft_wrap=True)
    out.print("")


def _print_messages(msgs: list[MessageExt]) -> None:
    """mqadmin's ``queryMsgByKey`` columns (message id, queue id, offset), then the tags,
    keys and store time of each."""
    print_columns(["#Message ID", "#QID", "#Offset", "#Tags", "#Keys", "#StoreTime"],
                  ([m.uniq_key or m.msg_id, m.queue_id, m.queue_offset, m.tags or "-",
                    " ".join(m.keys) or "-", _when(m.store_timestamp)] for m in msgs))


# ---------------------------------------------------------------------- topics


def _parse_order(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise typer.BadParameter(f"expected true or false, got {value!r}", param_hint="-o")
    return lowered == "true"


def _parse_attrs(text: str | None) -> dict[str, str | None]:
    try:
        return parse_attributes(text)
    except TideMQError as exc:
        raise typer.BadParameter(f"{exc} (expected +key=value,-key)",
                                 param_hint="--attributes") from None


@app.command("updateTopic")
def update_topic(
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Annotated[str | None, typer.Option(
        "-c", "--cluster", help="Create on every master of this cluster.")] = None,
    broker: Annotated[str | None, typer.Option(
        "-b", "--broker-addr", help="Create on this broker address only (with "
        "--logical-queue: the brokers to spread over, names or addresses, comma "
        "separated).")] = None,
    logical_queue: Annotated[int | None, typer.Option(
        "--logical-queue", min=1, help="Create a logical topic (RIP-21) of N logical queues "
        "decoupled from brokers; -r/-w/-p/-o/-a do not apply.")] = None,
    read_queues: Annotated[int, typer.Option("-r", "--read-queue-nums", min=1)] = 8,
    write_queues: Annotated[int, typer.Option("-w", "--write-queue-nums", min=1)] = 8,
    perm: Annotated[int, typer.Option("-p", "--perm", help="2 write, 4 read, 6 both.")] = 6,
    order: Annotated[str, typer.Option("-o", "--order", help="true or false.")] = "false",
    attributes: Annotated[str | None, typer.Option(
        "-a", "--attributes", help="'+queue.type=BatchCQ' (+key=value,-key).")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Create or update a topic."""
    if logical_queue is not None:
        create_logical_topic(namesrv, topic, logical_queue, cluster=cluster, brokers=broker,
                             json_out=json_out)
        return
    if cluster and broker:
        raise typer.BadParameter("give -c or -b, not both")
    if perm not in (2, 4, 6):
        raise typer.BadParameter(f"perm must be 2, 4 or 6, got {perm}", param_hint="-p")
    ordered = _parse_order(order)
    attrs = _parse_attrs(attributes)
    targets = run_admin(namesrv, lambda admin: admin.create_topic(
        topic, cluster=cluster, broker_addr=broker, read_queue_nums=read_queues,
        write_queue_nums=write_queues, perm=perm, order=ordered, attributes=attrs or None))
    if json_out:
        emit_json({"topic": topic, "brokers": targets, "readQueueNums": read_queues,
                    "writeQueueNums": write_queues, "perm": perm, "order": ordered,
                    "attributes": attrs})
        return
    out = console_out()
    for addr in targets:
        out.print(f"create topic to {addr} success.")
    shown = ", ".join(f"+{k}={v}" if v is not None else f"-{k}=" for k, v in attrs.items())
    out.print(f"TopicConfig [topicName={topic}, readQueueNums={read_queues}, "
              f"writeQueueNums={write_queues}, perm={_perm_text(perm)}, "
              f"topicFilterType=SINGLE_TAG, topicSysFlag=0, order={str(ordered).lower()}, "
              f"attributes={{{shown}}}]", markup=False)


def _perm_text(perm: int) -> str:
    """A permission as Java's PermName prints it: ``RW-`` for read and write."""
    return "".join(c if perm & bit else "-" for c, bit in (("R", 4), ("W", 2), ("X", 1)))


@app.command("deleteTopic")
def delete_topic(
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Annotated[str | None, typer.Option(
        "-c", "--cluster", help="Delete from this cluster's masters (default: all).")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Delete a topic from the brokers and the name servers."""
    targets = run_admin(namesrv, lambda admin: admin.delete_topic(topic, cluster=cluster))
    if json_out:
        emit_json({"topic": topic, "brokers": targets})
        return
    where = f"cluster {cluster}" if cluster else "every cluster"
    console_out().print(f"delete topic [{topic}] from {where} success "
                        f"({', '.join(targets) or 'no broker'}).", markup=False)


@app.command("topicList")
def topic_list(with_clusters: Annotated[bool, typer.Option(
                   "-c", "--clusterModel",
                   help="mqadmin's list of each topic's cluster and consumer groups (the "
                        "retry and dead-letter topics left out).")] = False,
               namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Every topic the name servers know."""
    if with_clusters:
        rows = run_admin(namesrv, _topic_clusters)
        if json_out:
            emit_json([{"cluster": c, "topic": t, "groups": g} for c, t, g in rows])
            return
        out = console_out()
        out.print(f"{'#Cluster Name':<20}  {'#Topic':<48}  #Consumer Group", markup=False)
        for cluster, topic, groups in rows:
            for group in groups or [""]:
                out.print(f"{cluster:<20}  {topic:<48}  {group}".rstrip(), markup=False)
        return
    topics = run_admin(namesrv, lambda admin: admin.topic_list())
    if json_out:
        emit_json(topics)
        return
    out = console_out()
    for name in topics:
        out.print(name, markup=False)


async def _topic_clusters(admin: AdminClient) -> list[tuple[str, str, list[str]]]:
    from tidemq.client import monitor  # only here: other commands start without it

    return await monitor.topic_clusters(admin, await admin.topic_list())


@app.command("topicRoute")
def topic_route(topic: Topic,
                as_list: Annotated[bool, typer.Option(
                    "-l", "--list", help="mqadmin's list: a line per broker and a total.")]
                = False,
                namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """A topic's route: which brokers serve how many queues."""
    route = run_admin(namesrv, lambda admin: admin.topic_route(topic))
    if as_list and not json_out:
        _print_route_list(route)
        return
    emit_json(msgspec.to_builtins(route))  # mqadmin prints the route's JSON too


def _print_route_list(route: TopicRouteData) -> None:
    """mqadmin's ``topicRoute -l``: cluster, broker, addresses (as Java prints a map),
    read and write queues and permission of each broker, then the totals."""
    queues = {q.broker_name: q for q in route.queue_datas}
    rows: list[list[object]] = []
    for b in sorted(route.broker_datas, key=lambda b: b.broker_name):
        q = queues.get(b.broker_name)
        if q is None:
            continue
        addrs = ", ".join(f"{bid}={addr}" for bid, addr in sorted(b.broker_addrs.items()))
        rows.append([b.cluster, b.broker_name, f"{{{addrs}}}", q.read_queue_nums,
                     q.write_queue_nums, q.perm])
    rows.append(["Total:", len(queues), "", sum(q.read_queue_nums for q in queues.values()),
                 sum(q.write_queue_nums for q in queues.values()), ""])
    print_columns(["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue",
                   "#WriteQueue", "#Perm"], rows)


ClusterFilter = Annotated[str | None, typer.Option(
    "-c", "--cluster", help="Only the brokers of this cluster.")]


@app.command("topicStatus")
def topic_status(topic: Topic, cluster: ClusterFilter = None,
                 namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Min and max offset and the last store time of every queue of a topic."""

    async def status_of(admin: AdminClient) -> list[QueueStatus]:
        found = await admin.topic_status(topic)
        if cluster is None:
            return found
        names = {b.broker_name for b in await admin.cluster_list(cluster)}
        return [s for s in found if s.queue.broker_name in names]

    status = sorted(run_admin(namesrv, status_of), key=lambda s: s.queue)
    if json_out:
        emit_json([{"brokerName": s.queue.broker_name, "queueId": s.queue.queue_id,
                     "minOffset": s.min_offset, "maxOffset": s.max_offset,
                     "earliestStoreTime": s.earliest_store_time,
                     "lastUpdateTime": s.last_update_time} for s in status])
        return
    print_columns(["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
                  ([s.queue.broker_name, s.queue.queue_id, s.min_offset, s.max_offset,
                    _mqadmin_time(s.last_update_time)] for s in status))


# ---------------------------------------------------------------------- cluster


async def _cluster_rows(admin: AdminClient, cluster: str | None = None
                        ) -> list[dict[str, Any]]:
    return [row for row, _ in await _cluster_figures(admin, cluster)]


async def _cluster_figures(admin: AdminClient, cluster: str | None = None
                           ) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Each broker's row (what ``--json`` prints) and its runtime figures as it gave
    them (``error``: why it did not)."""
    brokers = await admin.cluster_list(cluster)

    async def figures(addr: str) -> dict[str, str]:
        try:
            return await admin.broker_status(addr)
        except TideMQError as exc:
            return {"error": str(exc)}

    status = await asyncio.gather(*(figures(b.address) for b in brokers))
    return [({"cluster": b.cluster, "brokerName": b.broker_name, "brokerId": b.broker_id,
              "address": b.address, "version": s.get("brokerVersionDesc", ""),
              "inTps": s.get("putTps", ""), "outTps": s.get("getTransferedTps", ""),
              "role": s.get("brokerRole", ""), "replicationLagBytes": s.get(
                  "slaveFallBehindMuch", ""),
              **_day_totals(s), "error": s.get("error")}, s)
            for b, s in zip(brokers, status, strict=True)]


def _day_totals(status: dict[str, str]) -> dict[str, int | None]:
    """Messages put and got yesterday and today, from a broker's morning totals
    (mqadmin's ``clusterList -m``); ``None`` where the broker does not give them."""
    def total(key: str) -> int | None:
        value = status.get(key, "")
        return int(value) if value.lstrip("-").isdigit() else None

    def between(later: str, earlier: str) -> int | None:
        a, b = total(later), total(earlier)
        return a - b if a is not None and b is not None else None

    return {"inTotalYest": between("msgPutTotalTodayMorning", "msgPutTotalYesterdayMorning"),
            "outTotalYest": between("msgGetTotalTodayMorning", "msgGetTotalYesterdayMorning"),
            "inTotalToday": between("msgPutTotalTodayNow", "msgPutTotalTodayMorning"),
            "outTotalToday": between("msgGetTotalTodayNow", "msgGetTotalTodayMorning")}


@app.command("clusterList")
def cluster_list(cluster: Annotated[str | None, typer.Option(
                     "-c", "--clusterName", help="Only this cluster.")] = None,
                 more: Annotated[bool, typer.Option(
                     "-m", "--moreStats",
                     help="Messages put and got yesterday and today instead.")] = False,
                 interval: Interval = None,
                 namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Every broker of every cluster in mqadmin's columns, then its role and, for a
    master, the bytes its furthest replica lacks."""
    repeat_every(interval, lambda: _print_clusters(
        run_admin(namesrv, lambda admin: _cluster_figures(admin, cluster)), more, json_out))


def _print_clusters(rows: list[tuple[dict[str, Any], dict[str, str]]], more: bool,
                    json_out: bool) -> None:
    if json_out:
        emit_json([row for row, _ in rows])
        return
    if more:
        counts = ("inTotalYest", "outTotalYest", "inTotalToday", "outTotalToday")
        print_columns(["#Cluster Name", "#Broker Name", "#InTotalYest", "#OutTotalYest",
                       "#InTotalToday", "#OutTotalToday"],
                      ([r["cluster"], r["brokerName"],
                        *("-" if r[k] is None else r[k] for k in counts)] for r, _ in rows))
    else:
        now = int(time.time() * 1000)
        print_columns(["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version",
                       "#InTPS(LOAD)", "#OutTPS(LOAD)", "#Timer(Progress)", "#PCWait(ms)",
                       "#Hour", "#SPACE", "#ACTIVATED", "#Role", "#FallBehind(B)"],
                      ([r["cluster"], r["brokerName"], r["brokerId"], r["address"],
                        *_base_figures(status, now), r["role"] or "-",
                        r["replicationLagBytes"] or "-"] for r, status in rows))
    for row, _ in rows:
        if row["error"]:
            console_err().print(f"{row['address']} did not answer: {row['error']}",
                                markup=False)


def _base_figures(status: dict[str, str], now_ms: int) -> list[str]:
    """mqadmin's ``clusterList`` cells after the address, from a broker's runtime figures:
    version, put and get TPS, timer progress, page-cache lock wait, hours of messages
    kept, disk ratio, active; ``-`` for what the broker does not report."""
    def number(key: str, form: str) -> str:
        try:
            return format(float(status[key].split()[0]), form)
        except (KeyError, IndexError, ValueError):
            return "-"

    version = status.get("brokerVersionDesc", "")
    protocol = re.search(r"\((V\d\S*) protocol\)", version)
    earliest = status.get("earliestMessageTimeStamp", "")
    hours = f"{(now_ms - int(earliest)) / 3_600_000:.2f}" if earliest.isdigit() else "-"
    active = status.get("brokerActive") or (
        ("true" if status["brokerRole"].endswith("MASTER") else "false")
        if "brokerRole" in status else "-")
    return [protocol.group(1) if protocol else version.replace(" ", "_") or "-",
            number("putTps", ".2f"), number("getTransferedTps", ".2f"), "-",
            status.get("pageCacheLockTimeMills") or "-", hours,
            number("commitLogDiskRatio", ".4f"), active]


@app.command("brokerStatus")
def broker_status(
    broker: Annotated[str | None, typer.Option(
        "-b", "--brokerAddr", "--broker-addr", help="Broker address.")] = None,
    cluster: Annotated[str | None, typer.Option(
        "-c", "--clusterName", help="Every broker of this cluster instead.")] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """A broker's runtime figures (its KVTable); with -c, those of each broker of a
    cluster."""
    if (broker is None) == (cluster is None):
        raise typer.BadParameter("give one of -b (a broker address) and -c (a cluster)")
    if broker is not None:
        table = run_admin(namesrv, lambda admin: admin.broker_status(broker))
        if json_out:
            emit_json(table)
        else:
            _print_figures(table.items())
        return

    async def every(admin: AdminClient) -> dict[str, dict[str, str]]:
        addrs = [b.address for b in await admin.cluster_list(cluster)]
        tables = await asyncio.gather(*(admin.broker_status(a) for a in addrs))
        return dict(zip(addrs, tables, strict=True))

    by_addr = run_admin(namesrv, every)
    if json_out:
        emit_json(by_addr)
        return
    for addr, figures in by_addr.items():
        _print_figures(figures.items(), addr)


def _print_figures(items: Iterable[tuple[str, str]], broker: str | None = None) -> None:
    """mqadmin's ``brokerStatus`` lines: ``key: value`` sorted by key, after the broker's
    address when several brokers are printed."""
    out = sys.stdout
    for key, value in sorted(items):
        lead = f"{broker:<24} " if broker is not None else ""
        out.write(f"{lead}{key:<32}: {value}\n")


@app.command("deleteLmq")
def delete_lmq(
    broker: Annotated[str, typer.Option("-b", "--broker-addr", help="Broker address.")],
    lmq: Annotated[str, typer.Option("-q", "--lmq", help="The LMQ, e.g. %LMQ%device-1.")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """Delete a light message queue (RIP-28) on one broker, with every group's offset."""
    run_admin(namesrv, lambda admin: admin.delete_lmq(broker, lmq))
    if json_out:
        emit_json({"broker": broker, "lmq": lmq, "deleted": True})
        return
    console_out().print(f"deleted {escape(lmq)} on {broker}")


# ---------------------------------------------------------------------- lookups


@app.command("queryMsgById")
def query_msg_by_id(
    msg_id: Annotated[str, typer.Option("-i", "--msg-id", help="Offset id or UNIQ_KEY.")],
    topic: Annotated[str | None, typer.Option(
        "-t", "--topic", help="Needed to look a UNIQ_KEY up.")] = None,
    group: ConsumerGroupOpt = None, client_id: ClientIdOpt = None,
    body_format: BodyFormat = "UTF-8",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """A message by its offset id (or by UNIQ_KEY when the topic is given); with -g and
    -d, have that consumer consume it again."""
    if wants_resend(group, client_id):
        assert group is not None and client_id is not None
        resend_to_consumer(namesrv, group, client_id, topic, msg_id, json_out)
        return
    msg = run_admin(namesrv, lambda admin: admin.view_message(msg_id, topic))
    if json_out:
        emit_json(message_json(msg, body_format))
    else:
        print_message(msg, body_format)


@app.command("queryMsgByKey")
def query_msg_by_key(
    topic: Topic,
    key: Annotated[str, typer.Option("-k", "--msgKey", "--key",
                                     help="One of the messages' KEYS.")],
    begin: Annotated[str | None, typer.Option(
        "-b", "--beginTimestamp", help="Stored at or after: now, epoch ms or "
                                       "yyyy-MM-dd#HH:mm:ss:SSS (local).")] = None,
    end: Annotated[str | None, typer.Option(
        "-e", "--endTimestamp", help="Stored at or before (the same forms).")] = None,
    max_num: Annotated[int, typer.Option("-m", "--maxNum", "--max", min=1,
                                         help="At most this many.")] = 64,
    cluster: Annotated[str | None, typer.Option(
        "-c", "--cluster", help="Only the brokers of this cluster.")] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """Messages of a topic whose KEYS contain a key."""
    begin_ms = 0 if begin is None else parse_time_ms(begin, "-b")
    end_ms = None if end is None else parse_time_ms(end, "-e")
    msgs = run_admin(namesrv, lambda admin: admin.query_messages_by_key(
        topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms, cluster=cluster))
    if json_out:
        emit_json([message_json(m) for m in msgs])
    else:
        _print_messages(msgs)


@app.command("queryMsgByOffset")
def query_msg_by_offset(
    topic: Topic,
    broker_name: Annotated[str, typer.Option("-b", "--broker-name", help="Broker name.")],
    queue_id: Annotated[int, typer.Option("-i", "--queue-id", min=0)],
    offset: Annotated[int, typer.Option("-o", "--offset", min=0, help="Queue offset.")],
    body_format: BodyFormat = "UTF-8",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """The message at an offset of one queue."""
    queue = MessageQueue(topic, broker_name, queue_id)
    msg = run_admin(namesrv, lambda admin: admin.message_at(queue, offset))
    if json_out:
        emit_json(message_json(msg, body_format))
    else:
        print_message(msg, body_format)


# ---------------------------------------------------------------------- send / consume


def _fixed_queue(topic: str, broker: str | None, queue_id: int | None) -> MessageQueue | None:
    if (broker is None) != (queue_id is None):
        raise typer.BadParameter("-b (broker name) and -i (queue id) go together")
    return None if broker is None or queue_id is None else MessageQueue(topic, broker, queue_id)


@app.command("sendMessage")
def send_message(
    topic: Topic,
    body: Annotated[str, typer.Option("-p", "--body", help="Message body (UTF-8).")],
    keys: Annotated[str | None, typer.Option("-k", "--keys", help="Keys, space separated.")]
    = None,
    tags: Annotated[str | None, typer.Option("-c", "--tags", help="Tag.")] = None,
    broker: Annotated[str | None, typer.Option("-b", "--broker-name")] = None,
    queue_id: Annotated[int | None, typer.Option("-i", "--queue-id", min=0)] = None,
    trace: Annotated[str, typer.Option(
        "-m", "--msgTraceEnable", help="true: record the send in the trace topic "
                                       "(queryMsgTraceById shows it).")] = "false",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """Send one message (to queue -b/-i if given) and print where it was stored."""
    queue = _fixed_queue(topic, broker, queue_id)
    props = {k: v for k, v in (("KEYS", keys), ("TAGS", tags)) if v}
    traced = parse_bool(trace, "-m")

    async def send(admin: AdminClient) -> Any:
        from tidemq.client import Message, Producer  # the other commands send nothing

        message = Message(topic, body.encode("utf-8"), props)
        if traced:  # a producer of its own: the trace is a setting of its client
            config = dataclasses.replace(admin.instance.config, enable_msg_trace=True)
            async with Producer(TOOLS_PRODUCER, config=config) as producer:
                return await producer.send(message, queue=queue)
        async with Producer(TOOLS_PRODUCER, instance=admin.instance) as producer:
            return await producer.send(message, queue=queue)

    result = run_admin(namesrv, send)
    row = {"status": result.status.value, "msgId": result.msg_id,
           "offsetMsgId": result.offset_msg_id, "brokerName": result.queue.broker_name,
           "queueId": result.queue.queue_id, "queueOffset": result.queue_offset}
    if json_out:
        emit_json(row)
        return
    print_columns(["#Broker Name", "#QID", "#Send Result", "#MsgId"],
                  [[row["brokerName"], row["queueId"], row["status"], row["msgId"]]])


@app.command("consumeMessage")
def consume_message(
    topic: Topic,
    group: Annotated[str, typer.Option("-g", "--group", help="Consumer group.")]
    = TOOLS_CONSUMER,
    count: Annotated[int, typer.Option("-c", "--count", min=1, help="Stop after this many.")]
    = 128,
    offset: Annotated[int | None, typer.Option(
        "-o", "--offset", min=0,
        help="Start offset of every queue read (default: the group's, else the first).")]
    = None,
    broker: Annotated[str | None, typer.Option("-b", "--broker-name")] = None,
    queue_id: Annotated[int | None, typer.Option("-i", "--queue-id", min=0)] = None,
    begin: Annotated[str | None, typer.Option(
        "-s", "--beginTimestamp", help="From the first message stored at or after: now, "
                                       "epoch ms or yyyy-MM-dd#HH:mm:ss:SSS (local).")]
    = None,
    end: Annotated[str | None, typer.Option(
        "-e", "--endTimestamp", help="Only messages stored at or before (the same forms).")]
    = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.1, help="Stop when no message came for this many seconds.")] = 3.0,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json_out: JsonFlag = False,
) -> None:
    """Print messages of a topic (or of queue -b/-i); commits nothing."""
    queue = _fixed_queue(topic, broker, queue_id)
    begin_ms = None if begin is None else parse_time_ms(begin, "-s")
    end_ms = None if end is None else parse_time_ms(end, "-e")
    out = console_out()

    def show(msg: MessageExt) -> None:
        out.print(f"{_queue_text(msg)}@{msg.queue_offset}  "
                  f"msgId={msg.uniq_key or msg.msg_id}  tags={msg.tags or ''}  "
                  f"keys={' '.join(msg.keys)}  body={_body_text(msg.body, 200)}",
                  markup=False)

    async def consume(admin: AdminClient) -> list[MessageExt]:
        from tidemq.client import ConsumeFromWhere, PullConsumer  # nor consume

        consumer = PullConsumer(group, instance=admin.instance,
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        await consumer.start()
        try:
            queues = [queue] if queue is not None else list(
                (await admin.instance.routes.get(topic, refresh=True)).subscribe_queues)
            consumer.assign(queues)
            if begin_ms is not None:
                await consumer.seek_by_timestamp(begin_ms, queues)
            if offset is not None:  # with -s as well: whichever is further on (mqadmin's)
                for mq in queues:
                    consumer.seek(mq, max(offset, consumer.position(mq) or 0))
            got: list[MessageExt] = []
            reading = set(queues)
            while len(got) < count and reading:
                polled = await consumer.poll(timeout=timeout, max_messages=count - len(got))
                if not polled:
                    break
                batch = [m for m in polled if end_ms is None or m.store_timestamp <= end_ms]
                if len(batch) < len(polled):  # the queues past -e are done
                    past = {MessageQueue(m.topic, m.broker_name, m.queue_id) for m in polled
                            if end_ms is not None and m.store_timestamp > end_ms}
                    if not batch and not past & reading:
                        break  # nothing before -e, from queues not named as assigned
                    reading -= past
                    consumer.assign(reading)
                got.extend(batch)
                if not json_out:
                    for msg in batch:
                        show(msg)
            return got
        finally:
            await consumer.close(commit=False)

    msgs = run_admin(namesrv, consume)
    if json_out:
        emit_json([message_json(m) for m in msgs])
    else:
        console_err().print(counted(len(msgs), "message"))
