"""``tidemq admin`` traffic, probe and housekeeping commands, with mqadmin's names, flags
and columns.

========================  =========================================================
command                   what it does
========================  =========================================================
statsAll                  per topic and consuming group: accumulation, in/out TPS and
                          messages in the last 24 hours (``-a`` active only, ``-t`` one topic)
allocateMQ                how the averaging strategy splits a topic's queues over clients
                          ``-i ip1,ip2``
sendMsgStatus             time ``-c`` sends of ``-s`` bytes to broker ``-b``'s own topic
checkMsgSendRT            time ``-a`` sends to topic ``-t``, queue after queue
clusterRT                 time ``-a`` sends to each broker of each cluster (``--rounds``
                          rounds, ``-i`` seconds apart)
cleanUnusedTopic          brokers drop the queues of topics they no longer have
cleanExpiredCQ            brokers drop queue files below the commit log's start
deleteExpiredCommitLog    brokers delete commit-log files past fileReservedTime now
updateOrderConf           get, put or delete an ordered topic's ``brokerName:queues;...``
========================  =========================================================
"""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    BrokerAddr,
    JsonFlag,
    Namesrv,
    Topic,
    console_out,
    emit_json,
    parse_bool,
    print_columns,
    run_admin,
)
from tidemq.client import AdminClient, MessageQueue
from tidemq.client import group_admin as ga
from tidemq.client import maintenance_admin as ma
from tidemq.client import stats_admin as sa
from tidemq.client.allocate import allocate_averagely, java_queue_string
from tidemq.client.config import DEFAULT_NAMESRV

if TYPE_CHECKING:
    from tidemq.client import probe as pr

__all__ = ["register"]

ClusterOpt = Annotated[str | None, typer.Option(
    "-c", "--cluster", help="Every master of this cluster.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("statsAll")(stats_all)
    app.command("allocateMQ")(allocate_mq)
    app.command("sendMsgStatus")(send_msg_status)
    app.command("checkMsgSendRT")(check_msg_send_rt)
    app.command("clusterRT")(cluster_rt)
    app.command("cleanUnusedTopic")(clean_unused_topic)
    app.command("cleanExpiredCQ")(clean_expired_cq)
    app.command("deleteExpiredCommitLog")(delete_expired_commit_log)
    app.command("updateOrderConf")(update_order_conf)


def stats_all(
    active: Annotated[bool, typer.Option(
        "-a", "--activeTopic", help="Only topics with traffic in the last 24 hours.")]
    = False,
    topic: Annotated[str | None, typer.Option("-t", "--topic", help="This topic only.")]
    = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Per topic and consuming group: accumulation, in/out TPS, messages in 24 hours."""
    lines = run_admin(namesrv, lambda admin: sa.stats_all(admin, topic=topic,
                                                          active_only=active))
    if json_out:
        emit_json([{"topic": s.topic, "group": s.group, "accumulation": s.accumulation,
                    "inTps": s.in_tps, "outTps": s.out_tps, "inMsg24Hour": s.in_msg_24h,
                    "outMsg24Hour": s.out_msg_24h} for s in lines])
        return
    print_columns(("#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS",
                   "#InMsg24Hour", "#OutMsg24Hour"),
                  ((s.topic, s.group or "-", s.accumulation, f"{s.in_tps:.2f}",
                    "-" if s.out_tps is None else f"{s.out_tps:.2f}", s.in_msg_24h,
                    "NO_CONSUMER" if s.out_msg_24h is None else s.out_msg_24h)
                   for s in lines))


def allocate_mq(
    topic: Topic,
    ips: Annotated[str, typer.Option("-i", "--ipList", help="Client ids, comma separated.")],
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """How the averaging strategy would split a topic's queues over the given clients."""
    clients = [c.strip() for c in ips.split(",") if c.strip()]
    if not clients:
        raise typer.BadParameter("no client id given", param_hint="-i")

    async def queues(admin: AdminClient) -> list[MessageQueue]:
        route = await admin.instance.routes.get(topic, refresh=True)
        return sorted(route.subscribe_queues, key=lambda q: (q.broker_name, q.queue_id))

    mqs = run_admin(namesrv, queues)
    result = {c: [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id}
                  for q in allocate_averagely("", c, mqs, clients)] for c in clients}
    if json_out:
        emit_json({"result": result})
    else:
        console_out().print(json.dumps({"result": result}), markup=False, soft_wrap=True)


def _probe_json(p: pr.Probe) -> dict[str, Any]:
    return {"brokerName": p.queue.broker_name if p.queue else "",
            "queueId": p.queue.queue_id if p.queue else -1, "ok": p.result is not None,
            "rtMs": round(p.rt_ms, 3), "queueOffset": p.result.queue_offset if p.result
            else -1, "msgId": p.result.msg_id if p.result else "", "error": p.error}


def send_msg_status(
    broker: Annotated[str, typer.Option("-b", "--brokerName", help="Broker name.")],
    size: Annotated[int, typer.Option("-s", "--messageSize", min=1)] = 128,
    count: Annotated[int, typer.Option("-c", "--count", min=1)] = 50,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Time sends to a broker's own topic (named as the broker), one at a time."""
    from tidemq.client import probe as pr  # a producer: the probes only

    probes = run_admin(namesrv, lambda admin: pr.probe_sends(admin, broker, count + 1, size))
    probes = probes[1:]  # the first, 16 bytes upstream, only opens the way
    if json_out:
        emit_json([_probe_json(p) for p in probes])
        return
    out = console_out()
    for p in probes:
        what = (f"SendResult [sendStatus={p.result.status.value}, msgId={p.result.msg_id}, "
                f"offsetMsgId={p.result.offset_msg_id}, "
                f"messageQueue={java_queue_string(p.result.queue)}, "
                f"queueOffset={p.result.queue_offset}]" if p.result
                else f"failed: {p.error}")
        out.print(f"rt={p.rt_ms:.0f}ms, {what}", markup=False, soft_wrap=True)


def check_msg_send_rt(
    topic: Topic,
    amount: Annotated[int, typer.Option("-a", "--amount", min=2)] = 100,
    size: Annotated[int, typer.Option("-s", "--size", min=1)] = 128,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Time sends to a topic, queue after queue; the average leaves the first out."""
    from tidemq.client import probe as pr

    probes = run_admin(namesrv, lambda admin: pr.probe_sends(admin, topic, amount, size,
                                                              round_robin=True))
    avg = pr.average_ms(probes)
    if json_out:
        emit_json({"sends": [_probe_json(p) for p in probes], "avgRtMs": round(avg, 3)})
        return
    print_columns(("#Broker Name", "#QID", "#Send Result", "#RT"),
                  ((p.queue.broker_name if p.queue else "-",
                    p.queue.queue_id if p.queue else "-",
                    str(p.result is not None).lower(), f"{p.rt_ms:.0f}") for p in probes))
    console_out().print(f"Avg RT: {avg:.2f}", markup=False)


def cluster_rt(
    amount: Annotated[int, typer.Option("-a", "--amount", min=2)] = 100,
    size: Annotated[int, typer.Option("-s", "--size", min=1)] = 128,
    cluster: Annotated[str | None, typer.Option("-c", "--cluster")] = None,
    print_log: Annotated[str, typer.Option(
        "-p", "--printLog", help="true: one 'time|room|cluster|broker|rt' line each.")]
    = "false",
    machine_room: Annotated[str, typer.Option("-m", "--machineRoom")] = "noname",
    interval: Annotated[float, typer.Option(
        "-i", "--interval", min=0, help="Seconds between rounds.")] = 10,
    rounds: Annotated[int, typer.Option(
        "--rounds", min=1, help="Rounds to run (mqadmin runs until stopped).")] = 1,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Time sends to every broker (its own topic) of each cluster."""
    from tidemq.client import probe as pr

    as_log = parse_bool(print_log, "-p")

    async def measure(admin: AdminClient) -> list[dict[str, Any]]:
        info = await admin.cluster_info()
        names = [cluster] if cluster else sorted(info.cluster_addr_table)
        rows: list[dict[str, Any]] = []
        for n in range(rounds):
            if n:
                await asyncio.sleep(interval)  # the operator's pacing, not synchronisation
            for name in names:
                if name not in info.cluster_addr_table:
                    raise ValueError(f"cluster [{name}] not exist")
                for broker in sorted(info.cluster_addr_table[name]):
                    probes = await pr.probe_sends(admin, broker, amount, size)
                    ok = sum(p.result is not None for p in probes)
                    rows.append({"round": n, "cluster": name, "brokerName": broker,
                                 "rtMs": round(pr.average_ms(probes), 3),
                                 "successCount": ok, "failCount": len(probes) - ok})
        return rows

    rows = run_admin(namesrv, measure)
    if json_out:
        emit_json(rows)
    elif as_log:
        out = console_out()
        for r in rows:
            now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            out.print(f"{now}|{machine_room}|{r['cluster']}|{r['brokerName']}|"
                      f"{r['rtMs']:.0f}", markup=False)
    else:
        print_columns(("#Cluster Name", "#Broker Name", "#RT", "#successCount", "#failCount"),
                      ((r["cluster"], r["brokerName"], f"{r['rtMs']:.2f}", r["successCount"],
                        r["failCount"]) for r in rows))


def _clean(namesrv: str, broker: str | None, cluster: str | None, json_out: bool,
           what: str) -> None:
    if broker and cluster:
        raise typer.BadParameter("give -b (broker address) or -c (cluster), not both")

    async def clean(admin: AdminClient) -> dict[str, int]:
        addrs = await ga.targets(admin, broker_addr=broker, cluster=cluster)
        if what == "topics":
            return await ma.clean_unused_topics(admin, addrs)
        if what == "segments":
            return await ma.delete_expired_commit_log(admin, addrs)
        return await ma.clean_expired_queues(admin, addrs)

    counts = run_admin(namesrv, clean)
    if json_out:
        emit_json(counts)
        return
    out = console_out()
    for addr, count in counts.items():
        noun = {"topics": "unused topics", "segments": "commit log files deleted"}.get(
            what, "queues corrected")
        out.print(f"{addr}: {count} {noun}", markup=False)
    out.print("success", markup=False)


def clean_unused_topic(broker: BrokerAddr = None, cluster: ClusterOpt = None,
                       namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False
                       ) -> None:
    """Brokers drop the consume queues of topics their topic table no longer has."""
    _clean(namesrv, broker, cluster, json_out, "topics")


def clean_expired_cq(broker: BrokerAddr = None, cluster: ClusterOpt = None,
                     namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Brokers move queue minimums past the commit log's start and drop the files below."""
    _clean(namesrv, broker, cluster, json_out, "queues")


def delete_expired_commit_log(broker: BrokerAddr = None, cluster: ClusterOpt = None,
                              namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False
                              ) -> None:
    """Brokers delete their commit-log files older than fileReservedTime now, whatever
    their hour of deletion (deleteWhen)."""
    _clean(namesrv, broker, cluster, json_out, "segments")


def update_order_conf(
    topic: Topic,
    method: Annotated[str, typer.Option("-m", "--method", help="get, put or delete.")],
    conf: Annotated[str | None, typer.Option(
        "-v", "--orderConf", help="brokerName1:num;brokerName2:num (for put).")] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Get, put or delete an ordered topic's queue layout on the name servers."""
    kind = method.strip().lower()
    if kind not in ("get", "put", "delete"):
        raise typer.BadParameter(f"expected get, put or delete, got {method!r}",
                                 param_hint="-m")
    if kind == "put" and not conf:
        raise typer.BadParameter("put needs -v brokerName:num;...", param_hint="-v")
    out = console_out()
    if kind == "get":
        value = run_admin(namesrv, lambda admin: admin.get_kv_config(ma.ORDER_TOPIC_CONFIG,
                                                                     topic))
        if json_out:
            emit_json({"topic": topic, "orderConf": value})
        else:
            out.print(f"get orderConf success. topic=[{topic}], orderConf=[{value or ''}]",
                      markup=False)
        return
    if kind == "put":
        assert conf is not None
        run_admin(namesrv, lambda admin: admin.update_kv_config(ma.ORDER_TOPIC_CONFIG, topic,
                                                                conf))
        if json_out:
            emit_json({"topic": topic, "orderConf": conf})
        else:
            out.print(f"update orderConf success. topic=[{topic}], orderConf=[{conf}]",
                      markup=False)
        return
    run_admin(namesrv, lambda admin: admin.delete_kv_config(ma.ORDER_TOPIC_CONFIG, topic))
    if json_out:
        emit_json({"topic": topic, "orderConf": None})
    else:
        out.print(f"delete orderConf success. topic=[{topic}]", markup=False)
