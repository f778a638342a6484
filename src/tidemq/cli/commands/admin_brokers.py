"""``tidemq admin`` views of brokers, with mqadmin's names, flags and output.

====================  =========================================================
command               what it does
====================  =========================================================
getConsumerConfig     a subscription group's config on every broker that has it
haStatus              the HA runtime of ``-b`` or of each master of ``-c``
producer              the producers connected to broker ``-b``, by group
queryCq               consume-queue entries of one queue from an index
====================  =========================================================
"""

from __future__ import annotations

import datetime
import json
from typing import Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    ClusterName,
    Interval,
    JsonFlag,
    Namesrv,
    Topic,
    console_out,
    emit_json,
    repeat_every,
    run_admin,
)
from tidemq.client import AdminClient
from tidemq.client import broker_views as bv
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.client.errors import NoRouteError

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("getConsumerConfig")(get_consumer_config)
    app.command("haStatus")(ha_status)
    app.command("producer")(producer)
    app.command("queryCq")(query_cq)


def _joined(value: Any) -> str:
    """A value as Java's string concatenation shows it: ``null`` for null."""
    return "null" if value is None else str(value)


def java_text(value: Any) -> str:
    """A value as Java's ``toString`` shows it: ``true``/``false``, JSON for structures,
    empty for null."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def get_consumer_config(
    group: Annotated[str, typer.Option("-g", "--groupName", help="Subscription group name.")],
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """A subscription group's config on the master of every broker name that has it."""
    found = run_admin(namesrv, lambda admin: bv.consumer_configs(admin, group))
    if json_out:
        emit_json([{"clusterName": c.cluster, "brokerName": c.broker_name,
                    "subscriptionGroupConfig": c.config} for c in found])
        return
    out = console_out()
    for c in found:
        out.print(f"============================={c.cluster}:{c.broker_name}"
                  "=============================", markup=False)
        for key, value in c.config.items():
            out.print(f"{key:<40s}=  {java_text(value)}", markup=False, soft_wrap=True)


def _human_ms(ms: int) -> str:
    """Upstream's ``timeMillisToHumanString2``: ``yyyy-MM-dd HH:mm:ss,SSS``."""
    when = datetime.datetime.fromtimestamp(ms / 1000)
    return when.strftime("%Y-%m-%d %H:%M:%S,") + f"{when.microsecond // 1000:03d}"


def _signed_in(link: dict[str, Any]) -> str:
    """How a replica got in: ``as KEY`` when it authenticated, else ``no``."""
    return f"as {link.get('accessKey', '')}" if link.get("authenticated") else "no"


def _flush_offset(value: Any) -> str:
    """A replica's master flush offset: ``unknown`` where it is not given or negative (a
    TideMQ replica cannot know it; upstream's unset value is -1)."""
    return str(value) if isinstance(value, int) and value >= 0 else "unknown"


def _print_ha(addr: str, info: dict[str, Any]) -> None:
    out = console_out()
    if info.get("master"):
        links = info.get("haConnectionInfo") or []
        out.print(f"\n#MasterAddr\t{addr}\n"
                  f"#MasterCommitLogMaxOffset\t{info.get('masterCommitLogMaxOffset', 0)}\n"
                  f"#SlaveNum\t{len(links)}\n#InSyncSlaveNum\t{info.get('inSyncSlaveNums', 0)}",
                  markup=False, soft_wrap=True)
        out.print(f"{'#SlaveAddr':<32s}  {'#SlaveAckOffset':<16s} {'#Diff':>16s} "
                  f"{'#TransferSpeed(KB/s)':>16s} {'#Status':>16s} "
                  f"{'#TransferFromWhere':>16s}  #Authenticated", markup=False, soft_wrap=True)
        for c in links:
            status = "OK" if c.get("inSync") else "Fall Behind"
            speed = c.get("transferredByteInSecond", 0) / 1024.0
            out.print(f"{c.get('addr', ''):<32s}  {c.get('slaveAckOffset', 0):<16d} "
                      f"{c.get('diff', 0):>16d} {speed:>16.2f} {status:>16s} "
                      f"{c.get('transferFromWhere', 0):>16d}  {_signed_in(c)}",
                      markup=False, soft_wrap=True)
        return
    client = info.get("haClientRuntimeInfo") or {}
    speed = client.get("transferredByteInSecond", 0) / 1024.0
    out.print(f"\n#MasterAddr\t{client.get('masterAddr', '')}\n"
              f"#CommitLogMaxOffset\t{client.get('maxOffset', 0)}\n"
              f"#TransferSpeed(KB/s)\t{speed:.2f}\n"
              f"#LastReadTime\t{_human_ms(client.get('lastReadTimestamp', 0))}\n"
              f"#LastWriteTime\t{_human_ms(client.get('lastWriteTimestamp', 0))}\n"
              f"#MasterFlushOffset\t{_flush_offset(client.get('masterFlushOffset'))}",
              markup=False, soft_wrap=True)


def ha_status(
    broker: Annotated[str | None, typer.Option(
        "-b", "--brokerAddr", help="This broker only (host:port).")] = None,
    cluster: ClusterName = None, interval: Interval = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """The HA runtime: a master's replicas with each one's acknowledged offset and lag, or
    a replica's link to its master."""
    if bool(broker) == bool(cluster):
        raise typer.BadParameter("give -b (broker address) or -c (cluster), one of them")

    async def read(admin: AdminClient) -> dict[str, dict[str, Any]]:
        addrs = [broker] if broker else sorted((await admin.masters(cluster)).values())
        return {addr: await bv.ha_status(admin, addr) for addr in addrs}

    def once() -> None:
        by_addr = run_admin(namesrv, read)
        if json_out:
            emit_json(by_addr)
            return
        for addr, info in by_addr.items():
            _print_ha(addr, info)

    repeat_every(interval, once)


def producer(
    broker: Annotated[str, typer.Option("-b", "--broker", help="Broker address.")],
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """The producers connected to a broker: each instance of each group."""
    data = run_admin(namesrv, lambda admin: bv.producers(admin, broker))
    if json_out:
        emit_json(data)
        return
    out = console_out()
    for group, members in data.items():
        if not members:
            out.print(f"producer group ({group}) instances are empty", markup=False)
        for p in members:
            out.print(f"producer group ({group}) instance : clientId={p.get('clientId')},"
                      f"remoteIP={p.get('remoteIP')}, language={p.get('language')}, "
                      f"version={p.get('version')}, "
                      f"lastUpdateTimestamp={p.get('lastUpdateTimestamp')}",
                      markup=False, soft_wrap=True)


_RULE = "======================================"


def query_cq(
    topic: Topic,
    queue: Annotated[int, typer.Option("-q", "--queue", min=0, help="Queue id.")],
    index: Annotated[int, typer.Option("-i", "--index", min=0, help="Start queue index.")],
    count: Annotated[int, typer.Option("-c", "--count", min=1, help="How many.")] = 10,
    broker: Annotated[str | None, typer.Option(
        "-b", "--broker", help="Broker address (default: the topic's first broker).")] = None,
    group: Annotated[str | None, typer.Option(
        "-g", "--consumer", help="Consumer group: its subscription.")] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Consume-queue entries of one queue (position in the commit log, size, tags code)
    from an index, with the queue's bounds."""

    async def read(admin: AdminClient) -> dict[str, Any]:
        addr = broker
        if not addr:
            route = await admin.topic_route(topic)
            masters = [a for b in route.broker_datas if (a := b.master_addr())]
            if not masters:
                raise NoRouteError(topic, "no master broker")
            addr = masters[0]
        return await bv.consume_queue(admin, addr, topic, queue, index, count, group)

    body = run_admin(namesrv, read)
    if json_out:
        emit_json(body)
        return
    out = console_out()
    if body.get("subscriptionData") is not None:
        out.print(f"Subscription data: \n{json.dumps(body['subscriptionData'], indent=2)}\n"
                  f"{_RULE}", markup=False, soft_wrap=True)
    if body.get("filterData") is not None:
        out.print(f"Filter data: \n{body['filterData']}\n{_RULE}", markup=False,
                  soft_wrap=True)
    out.print(f"Queue data: \nmax: {body.get('maxQueueIndex')}, "
              f"min: {body.get('minQueueIndex')}\n{_RULE}", markup=False, soft_wrap=True)
    for i, e in enumerate(body.get("queueData") or [], start=index):
        out.print(f"idx: {i}\nConsumeQueueData{{physicOffset={e.get('physicOffset')}, "
                  f"physicSize={e.get('physicSize')}, tagsCode={e.get('tagsCode')}, "
                  f"extendDataJson='{_joined(e.get('extendDataJson'))}', "
                  f"bitMap='{_joined(e.get('bitMap'))}', "
                  f"eval={java_text(bool(e.get('eval')))}, msg='{_joined(e.get('msg'))}'}}"
                  f"\n{_RULE}",
                  markup=False, soft_wrap=True)
