"""``tidemq admin`` configuration and permission commands, with mqadmin's names, flags and
output.

====================  =========================================================
command               what it does
====================  =========================================================
getBrokerConfig       every key of broker ``-b`` (or of each broker of cluster ``-c``)
updateBrokerConfig    change a run-time key (``-k``/``-v``) on ``-b`` or cluster ``-c``;
                      other keys are refused, naming the key
getNamesrvConfig      every key of each name server
updateNamesrvConfig   change a run-time key on every name server
updateTopicPerm       set a topic's permission (``-p`` 2, 4 or 6) on ``-b`` or ``-c``
wipeWritePerm         name servers stop routing sends to broker ``-b`` (a broker name)
addWritePerm          undo ``wipeWritePerm``
topicClusterList      the clusters that serve topic ``-t``
====================  =========================================================
"""

from __future__ import annotations

from typing import Annotated

import typer

from tidemq.cli.commands.admin_common import (
    BrokerAddr,
    ClusterName,
    JsonFlag,
    Namesrv,
    Topic,
    console_out,
    emit_json,
    parse_bool,
    run_admin,
)
from tidemq.client import AdminClient
from tidemq.client import config_admin as ca
from tidemq.client import group_admin as ga
from tidemq.client.config import DEFAULT_NAMESRV

__all__ = ["register"]

BrokerName = Annotated[str, typer.Option("-b", "--brokerName", help="Broker name.")]
Key = Annotated[str, typer.Option("-k", "--key", help="Config key.")]
Value = Annotated[str, typer.Option("-v", "--value", help="Config value.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("getBrokerConfig")(get_broker_config)
    app.command("updateBrokerConfig")(update_broker_config)
    app.command("getNamesrvConfig")(get_namesrv_config)
    app.command("updateNamesrvConfig")(update_namesrv_config)
    app.command("updateTopicPerm")(update_topic_perm)
    app.command("wipeWritePerm")(wipe_write_perm)
    app.command("addWritePerm")(add_write_perm)
    app.command("topicClusterList")(topic_cluster_list)


def _one_of(broker: str | None, cluster: str | None) -> None:
    if bool(broker) == bool(cluster):
        raise typer.BadParameter("give -b (broker address) or -c (cluster), one of them")


def _print_config(by_addr: dict[str, dict[str, str]]) -> None:
    out = console_out()
    for addr, props in by_addr.items():
        out.print(f"============{addr}============", markup=False)
        for key, value in props.items():
            out.print(f"{key:<50s}=  {value}", markup=False, soft_wrap=True)


async def _brokers(admin: AdminClient, broker: str | None, cluster: str | None,
                   every: bool = False) -> list[str]:
    if broker:
        return [broker]
    if not every:
        return await ga.targets(admin, cluster=cluster)
    return sorted(b.address for b in await admin.cluster_list() if b.cluster == cluster)


def get_broker_config(broker: BrokerAddr = None, cluster: ClusterName = None,
                      namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Every key of a broker (or of each broker of a cluster) with its current value."""
    _one_of(broker, cluster)

    async def read(admin: AdminClient) -> dict[str, dict[str, str]]:
        return {addr: await ca.broker_config(admin, addr)
                for addr in await _brokers(admin, broker, cluster, every=True)}

    by_addr = run_admin(namesrv, read)
    if json_out:
        emit_json(by_addr)
    else:
        _print_config(by_addr)


def update_broker_config(
    key: Key, value: Value, broker: BrokerAddr = None, cluster: ClusterName = None,
    update_all: Annotated[str, typer.Option(
        "-a", "--updateAllBroker", help="true: with -c, the replicas too.")] = "false",
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Change a key that can change while the broker runs; others are refused."""
    _one_of(broker, cluster)
    every = parse_bool(update_all, "-a")

    async def update(admin: AdminClient) -> list[str]:
        addrs = await _brokers(admin, broker, cluster, every=every)
        await ca.update_broker_config(admin, addrs, {key: value})
        return addrs

    addrs = run_admin(namesrv, update)
    if json_out:
        emit_json({"brokers": addrs, "key": key, "value": value})
        return
    out = console_out()
    for addr in addrs:
        out.print(f"update broker config success, {addr}", markup=False)


def get_namesrv_config(namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False
                       ) -> None:
    """Every key of each name server with its current value."""
    by_addr = run_admin(namesrv, ca.namesrv_config)
    if json_out:
        emit_json(by_addr)
    else:
        _print_config(by_addr)


def update_namesrv_config(key: Key, value: Value, namesrv: Namesrv = DEFAULT_NAMESRV,
                          json_out: JsonFlag = False) -> None:
    """Change a key that can change while the name servers run; others are refused."""
    addrs = run_admin(namesrv, lambda admin: ca.update_namesrv_config(admin, {key: value}))
    if json_out:
        emit_json({"namesrv": addrs, "key": key, "value": value})
        return
    # mqadmin prints the name servers as a Java list: [host:port, host:port]
    console_out().print(f"update name server config success![{', '.join(addrs)}]\n"
                        f"{key} : {value}", markup=False)


def update_topic_perm(
    topic: Topic,
    perm: Annotated[int, typer.Option("-p", "--perm", help="2 write, 4 read, 6 both.")],
    broker: BrokerAddr = None, cluster: ClusterName = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Set a topic's permission, keeping its queues and attributes."""
    _one_of(broker, cluster)
    if perm not in (2, 4, 6):
        raise typer.BadParameter(f"perm must be 2, 4 or 6, got {perm}", param_hint="-p")

    async def update(admin: AdminClient) -> list[ca.PermChange]:
        addrs = await ga.targets(admin, broker_addr=broker, cluster=cluster)
        return await ca.update_topic_perm(admin, topic, perm, addrs)

    changes = run_admin(namesrv, update)
    if json_out:
        emit_json({"topic": topic, "changes": [
            {"brokerAddr": c.broker_addr, "oldPerm": c.old_perm, "newPerm": c.new_perm}
            for c in changes]})
        return
    out = console_out()
    for c in changes:
        out.print(f"update topic perm from {c.old_perm} to {c.new_perm} in "
                  f"{c.broker_addr} success.", markup=False)


def _write_perm(broker_name: str, namesrv: str, json_out: bool, *, writable: bool) -> None:
    counts = run_admin(namesrv, lambda admin: ca.change_write_perm(admin, broker_name,
                                                                    writable=writable))
    if json_out:
        emit_json({"brokerName": broker_name, "topicCounts": counts})
        return
    verb = "add" if writable else "wipe"
    out = console_out()
    for addr, count in counts.items():
        out.print(f"{verb} write perm of broker[{broker_name}] in name server[{addr}] OK, "
                  f"{count}", markup=False)


def wipe_write_perm(broker_name: BrokerName, namesrv: Namesrv = DEFAULT_NAMESRV,
                    json_out: JsonFlag = False) -> None:
    """Take the write permission of a broker's topics away on every name server, so
    producers stop sending to it (until it registers a changed topic table)."""
    _write_perm(broker_name, namesrv, json_out, writable=False)


def add_write_perm(broker_name: BrokerName, namesrv: Namesrv = DEFAULT_NAMESRV,
                   json_out: JsonFlag = False) -> None:
    """Give a broker's topics their write permission back on every name server."""
    _write_perm(broker_name, namesrv, json_out, writable=True)


def topic_cluster_list(
    topic: Annotated[str, typer.Option("-t", "--topic", help="Topic name.")],
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """The clusters whose brokers serve a topic."""
    clusters = run_admin(namesrv, lambda admin: ca.topic_clusters(admin, topic))
    if json_out:
        emit_json(clusters)
        return
    out = console_out()
    for name in clusters:
        out.print(name, markup=False)
