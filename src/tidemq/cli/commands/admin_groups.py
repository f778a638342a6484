"""``tidemq admin`` group commands, with mqadmin's names, flags and columns.

====================  =========================================================
command               what it does
====================  =========================================================
consumerProgress      a group's offsets and lag per queue (``-g``, ``-t``, ``-c``); without
                      ``-g`` one line per consumer group
consumerConnection    the online consumers of a group and their subscriptions
producerConnection    the producers of a group connected to a topic's brokers
consumerStatus        what each online consumer of a group reports about itself (its
                      queues and positions) and whether the group's queues are split
                      without overlap or gap; ``-i`` one consumer in detail
brokerConsumeStats    every group's progress on one broker (``-b``; ``-l``: only queues
                      whose diff is at least this)
====================  =========================================================
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    BrokerAddr,
    JsonFlag,
    Namesrv,
    Topic,
    console_err,
    console_out,
    emit_json,
    format_ms,
    parse_bool,
    print_columns,
    run_admin,
)
from tidemq.client import AdminClient
from tidemq.client import group_admin as ga
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.client.versions import version_name
from tidemq.errors import TideMQError

__all__ = ["register"]



def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("consumerProgress")(consumer_progress)
    app.command("consumerConnection")(consumer_connection)
    app.command("producerConnection")(producer_connection)
    app.command("consumerStatus")(consumer_status)
    app.command("brokerConsumeStats")(broker_consume_stats)


def _progress_json(p: ga.ConsumeProgress) -> dict[str, Any]:
    return {"group": p.group, "consumeTps": p.consume_tps, "diffTotal": p.diff_total,
            "inflightTotal": p.inflight_total,
            "queues": [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id,
                        "brokerOffset": q.broker_offset, "consumerOffset": q.consumer_offset,
                        "diff": q.diff, "pullOffset": q.pull_offset,
                        "inflight": q.inflight, "lastTimestamp": q.last_timestamp}
                       for q in p.queues]}


def consumer_progress(
    group: Annotated[str | None, typer.Option(
        "-g", "--groupName", help="Consumer group name (default: a line per group).")] = None,
    topic: Annotated[str | None, typer.Option("-t", "--topicName", help="Topic name.")]
    = None,
    show_ip: Annotated[str, typer.Option(
        "-s", "--showClientIP", help="true: the IP of the consumer holding each queue.")]
    = "false",
    cluster: Annotated[str | None, typer.Option("-c", "--cluster", help="Cluster name.")]
    = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """A consumer group's offsets and lag per queue; without -g, every group's summary."""
    if group is None:
        _all_groups(namesrv, cluster, json_out)
        return
    with_ip = parse_bool(show_ip, "-s")

    async def collect(admin: AdminClient) -> tuple[ga.ConsumeProgress,
                                                   dict[tuple[str, str, int], str]]:
        progress = await ga.consume_progress(admin, group, topic=topic, cluster=cluster)
        return progress, (await _holders(admin, group) if with_ip else {})

    progress, holders = run_admin(namesrv, collect)
    if json_out:
        doc = _progress_json(progress)
        if with_ip:
            for row in doc["queues"]:
                row["clientIp"] = holders.get(
                    (row["topic"], row["brokerName"], row["queueId"]), "")
        emit_json(doc)
        return
    rows = [[q.topic, q.broker_name, q.queue_id, q.broker_offset, q.consumer_offset,
             q.diff, q.inflight, format_ms(q.last_timestamp)] for q in progress.queues]
    headers = ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset",
               "#Diff", "#Inflight", "#LastTime"]
    if with_ip:
        headers.insert(5, "#Client IP")
        for row, q in zip(rows, progress.queues, strict=True):
            row.insert(5, holders.get((q.topic, q.broker_name, q.queue_id), "N/A"))
    print_columns(headers, rows)
    out = console_out()
    out.print("")
    out.print(f"Consume TPS: {progress.consume_tps:.2f}", markup=False)
    out.print(f"Consume Diff Total: {progress.diff_total}", markup=False)
    out.print(f"Consume Inflight Total: {progress.inflight_total}", markup=False)
    if not progress.queues:  # mqadmin fails here; the empty table alone says too little
        of = f" of topic {topic}" if topic is not None else ""
        console_err().print(f"no broker holds an offset{of} of group {group}: it has "
                            "committed none, or there is no such group (consumerProgress "
                            "without -g lists the groups)", markup=False)


async def _holders(admin: AdminClient, group: str) -> dict[tuple[str, str, int], str]:
    """(topic, broker, queue) -> the IP of the online consumer that holds it."""
    try:
        conns = await ga.consumer_connection(admin, group)
    except TideMQError:
        return {}  # nobody online: no queue has a holder
    out: dict[tuple[str, str, int], str] = {}
    for client in conns.clients:
        info = await ga.running_info(admin, group, client["clientId"])
        ip = str(client["clientAddr"]).rsplit(":", 1)[0]
        for q in info.get("mqTable", []):
            out[(q["topic"], q["brokerName"], int(q["queueId"]))] = ip
    return out


def _all_groups(namesrv: str, cluster: str | None, json_out: bool) -> None:
    async def collect(admin: AdminClient) -> list[ga.GroupSummary]:
        return [await ga.group_summary(admin, g)
                for g in await ga.group_names(admin, cluster)]

    rows = run_admin(namesrv, collect)
    if json_out:
        emit_json([{"group": r.group, "count": r.count, "version": r.version,
                    "consumeType": r.consume_type, "messageModel": r.message_model,
                    "consumeTps": r.consume_tps, "diffTotal": r.diff_total} for r in rows])
        return
    print_columns(("#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"),
                  ((r.group, r.count, version_name(r.version) if r.count else "OFFLINE",
                    *_type_and_model(r), f"{r.consume_tps:.0f}", r.diff_total)
                   for r in rows))


def _type_and_model(r: ga.GroupSummary) -> tuple[str, str]:
    """mqadmin's #Type (PULL or PUSH) and #Model (a push group's only) of a group with
    consumers online; blank for one without."""
    if not r.count:
        return "", ""
    push = r.consume_type == "CONSUME_PASSIVELY"
    return ("PUSH" if push else "PULL"), (r.message_model if push else "")


def _connections_json(c: ga.Connections) -> dict[str, Any]:
    return {"connections": c.clients, "subscriptions": c.subscriptions,
            "consumeType": c.consume_type, "messageModel": c.message_model,
            "consumeFromWhere": c.consume_from_where}


def consumer_connection(
    group: Annotated[str, typer.Option("-g", "--consumerGroup", help="Consumer group name.")],
    broker: BrokerAddr = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """The online consumers of a group, their subscriptions and consume settings."""
    conns = run_admin(namesrv, lambda admin: ga.consumer_connection(
        admin, group, broker_addr=broker))
    if json_out:
        emit_json(_connections_json(conns))
        return
    print_columns(("#ClientId", "#ClientAddr", "#Language", "#Version"),
                  ((c["clientId"], c["clientAddr"], c["language"], version_name(c["version"]))
                   for c in conns.clients))
    out = console_out()
    out.print("\nBelow is subscription:", markup=False)
    print_columns(("#Topic", "#SubExpression"), sorted(conns.subscriptions.items()))
    out.print("")
    out.print(f"ConsumeType: {conns.consume_type}", markup=False)
    out.print(f"MessageModel: {conns.message_model}", markup=False)
    out.print(f"ConsumeFromWhere: {conns.consume_from_where}", markup=False)


def producer_connection(
    group: Annotated[str, typer.Option("-g", "--producerGroup", help="Producer group name.")],
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """The producers of a group connected to the brokers of a topic."""
    conns = run_admin(namesrv, lambda admin: ga.producer_connection(admin, group, topic))
    if json_out:
        emit_json({"connections": conns.clients})
        return
    print_columns(("#Index", "#ClientId", "#ClientAddr", "#Language", "#Version"),
                  ((f"{i:04d}", c["clientId"], c["clientAddr"], c["language"],
                    version_name(c["version"])) for i, c in enumerate(conns.clients, 1)))


def _split_check(infos: dict[str, dict[str, Any]], expected: set[tuple[str, str, int]]
                 ) -> tuple[bool, bool, list[str]]:
    """(same subscriptions?, queues split without overlap or gap?, what is wrong)."""
    subs = {cid: json.dumps(i.get("subscriptionSet", []), sort_keys=True)
            for cid, i in infos.items()}
    same = len(set(subs.values())) <= 1
    held: dict[tuple[str, str, int], list[str]] = {}
    for cid, info in infos.items():
        for q in info.get("mqTable", []):
            held.setdefault((q["topic"], q["brokerName"], int(q["queueId"])), []).append(cid)
    problems = [f"{t}/{b}/{i} held by {', '.join(sorted(c))}"
                for (t, b, i), c in sorted(held.items()) if len(c) > 1]
    problems += [f"{t}/{b}/{i} held by nobody" for t, b, i in sorted(expected - set(held))]
    return same, not problems, problems


def consumer_status(
    group: Annotated[str, typer.Option("-g", "--consumerGroup", help="Consumer group name.")],
    client_id: Annotated[str | None, typer.Option(
        "-i", "--clientId", help="One consumer, in detail.")] = None,
    broker: BrokerAddr = None,
    jstack: Annotated[bool, typer.Option(
        "-s", "--jstack", help="Each consumer's thread and asyncio task stacks too.")]
    = False,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """What the online consumers of a group report: their queues and positions, and
    whether the group's queues are split among them without overlap or gap."""

    async def collect(admin: AdminClient) -> tuple[dict[str, dict[str, Any]],
                                                   ga.Connections,
                                                   set[tuple[str, str, int]]]:
        conns = await ga.consumer_connection(admin, group, broker_addr=broker)
        ids = [client_id] if client_id else [c["clientId"] for c in conns.clients]
        infos = {cid: await ga.running_info(admin, group, cid, broker_addr=broker,
                                            jstack=jstack)
                 for cid in ids}
        expected: set[tuple[str, str, int]] = set()
        if conns.message_model == "CLUSTERING":
            for topic in conns.subscriptions:
                route = await admin.instance.routes.get(topic, refresh=True)
                expected.update((q.topic, q.broker_name, q.queue_id)
                                for q in route.subscribe_queues)
        return infos, conns, expected

    infos, conns, expected = run_admin(namesrv, collect)
    same, split_ok, problems = _split_check(infos, expected if client_id is None else set())
    if json_out:
        emit_json({"group": group, "consumers": infos, "sameSubscription": same,
                   "rebalanceOk": split_ok if client_id is None else None,
                   "problems": problems if client_id is None else []})
        return
    out = console_out()
    if client_id is not None:
        info = infos[client_id]
        out.print("#Consumer Properties#", markup=False)
        for key, value in sorted(info.get("properties", {}).items()):
            out.print(f"{key:<40s}: {value}", markup=False)
        out.print("\n#Consumer Subscription#", markup=False)
        for i, sub in enumerate(info.get("subscriptionSet", []), 1):
            out.print(f"{i:03d} Topic: {sub.get('topic', ''):<40s} SubExpression: "
                      f"{sub.get('subString', '')}", markup=False)
        out.print("\n#Consumer Offset#", markup=False)
        print_columns(("#Topic", "#Broker Name", "#QID", "#Consumer Offset"),
                      ((q["topic"], q["brokerName"], q["queueId"], q.get("commitOffset", -1))
                       for q in info.get("mqTable", [])))
        if jstack:
            out.print("\n\n#Consumer jstack#", markup=False)
            out.print(info.get("jstack", ""), markup=False, soft_wrap=True)
        return
    versions = {c["clientId"]: version_name(c["version"]) for c in conns.clients}
    print_columns(("#Index", "#ClientId", "#Version", "#Queues"),
                  ((i, cid, versions.get(cid, ""), len(info.get("mqTable", [])))
                   for i, (cid, info) in enumerate(sorted(infos.items()), 1)))
    if not same:
        out.print("\n\nWARN: Different subscription in the same group of consumer!!!",
                  markup=False)
        return
    out.print("\n\nSame subscription in the same group of consumer", markup=False)
    out.print(f"\n\nRebalance {'OK' if split_ok else 'Failed'}", markup=False)
    for problem in problems:
        out.print(problem, markup=False)
    if jstack:
        for cid, info in sorted(infos.items()):
            out.print(f"\n\n#Consumer jstack# {cid}", markup=False)
            out.print(info.get("jstack", ""), markup=False, soft_wrap=True)


def broker_consume_stats(
    broker: Annotated[str, typer.Option("-b", "--brokerAddr", help="Broker address.")],
    level: Annotated[int, typer.Option(
        "-l", "--level", min=0, help="Only queues whose diff is at least this.")] = 0,
    timeout_ms: Annotated[int, typer.Option(
        "-t", "--timeoutMillis", min=1, help="How long each request may take, ms.")]
    = 50_000,
    order: Annotated[str, typer.Option(
        "-o", "--order", help="true: only the topics the broker holds as ordered.")]
    = "false",
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Every consumer group's progress on one broker."""
    ordered_only = parse_bool(order, "-o")
    stats = run_admin(namesrv, lambda admin: ga.broker_consume_stats(
        admin, broker, ordered_only=ordered_only, timeout=timeout_ms / 1000))
    kept = [dataclasses.replace(p, queues=[q for q in p.queues if q.diff >= level])
            for p in stats]
    total = sum(p.diff_total for p in stats)
    if json_out:
        emit_json({"brokerAddr": broker, "totalDiff": total,
                   "groups": [_progress_json(p) for p in kept if p.queues]})
        return
    print_columns(("#Topic", "#Group", "#Broker Name", "#QID", "#Broker Offset",
                   "#Consumer Offset", "#Diff", "#LastTime"),
                  ((q.topic, p.group, q.broker_name, q.queue_id, q.broker_offset,
                    q.consumer_offset, q.diff, format_ms(q.last_timestamp))
                   for p in kept for q in p.queues))
    console_out().print(f"\nDiff Total: {total}", markup=False)
