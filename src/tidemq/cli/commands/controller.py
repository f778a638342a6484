"""``tidemq admin getSyncStateSet`` / ``getBrokerEpoch`` / ``electMaster`` /
``getControllerMetaData`` / ``cleanBrokerMetadata`` / ``getControllerConfig`` /
``updateControllerConfig``: controller mode, with mqadmin's
names and flags (``-a`` the controllers' addresses, ``;``-separated; ``-c`` cluster;
``--bn`` broker name where mqadmin's ``-b`` is a broker id). Requests go to the leading
controller, found by asking the ones given; ``getBrokerEpoch`` asks the brokers the name
servers list."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import typer

from tidemq.cli.commands.admin_common import (
    Interval,
    JsonFlag,
    Namesrv,
    console_out,
    emit_json,
    repeat_every,
    run_admin,
    table_of,
)
from tidemq.client import AdminClient
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.client.controller_admin import ControllerAdmin, broker_epoch_cache
from tidemq.codec.controller import OPEN_END, BrokerReplicasInfo

__all__ = ["register"]

Controllers = Annotated[str, typer.Option(
    "-a", "--controllerAddress", envvar="TIDEMQ_CONTROLLER", show_envvar=True,
    help="Controller addresses, 'host:port;host:port' (name servers with the controller "
         "embedded, or standalone controllers).")]
Cluster = Annotated[str, typer.Option("-c", "--clusterName", help="The cluster.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("getSyncStateSet")(get_sync_state_set)
    app.command("getBrokerEpoch")(get_broker_epoch)
    app.command("electMaster")(elect_master)
    app.command("getControllerMetaData")(get_controller_metadata)
    app.command("cleanBrokerMetadata")(clean_broker_metadata)
    app.command("getControllerConfig")(get_controller_config)
    app.command("updateControllerConfig")(update_controller_config)


def _controllers(admin: AdminClient, addresses: str) -> ControllerAdmin:
    addrs = [a.strip() for a in addresses.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise ValueError("-a/--controllerAddress names no controller")
    return ControllerAdmin(admin.instance.request, addrs)


async def _names_in(admin: AdminClient, cluster: str) -> list[str]:
    """The broker names of ``cluster`` as the name servers list them."""
    brokers = await admin.cluster_list()
    names = sorted({b.broker_name for b in brokers if b.cluster == cluster})
    if not names:
        raise ValueError(f"the name servers list no broker of cluster {cluster!r}")
    return names


def get_sync_state_set(
    controllers: Controllers,
    broker_name: Annotated[list[str] | None, typer.Option(
        "-b", "--brokerName", help="A broker group (repeatable; default: every group, or "
                                   "those of -c).")] = None,
    cluster: Annotated[str | None, typer.Option(
        "-c", "--clusterName", help="Every group of this cluster (asks -n).")] = None,
    interval: Interval = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Each broker group's master, epochs and in-sync replicas."""

    async def fetch(admin: AdminClient) -> BrokerReplicasInfo:
        names = list(broker_name or [])
        if cluster and not names:
            names = await _names_in(admin, cluster)
        info = await _controllers(admin, controllers).sync_state_set(names)
        missing = [n for n in broker_name or [] if n not in info.replicas_info_table]
        if missing:
            raise ValueError(f"the controllers know no broker group named {', '.join(missing)}")
        return info

    repeat_every(interval, lambda: _print_sync_state_sets(run_admin(namesrv, fetch),
                                                         json_out))


def _print_sync_state_sets(info: BrokerReplicasInfo, json_out: bool) -> None:
    if json_out:
        emit_json(msgspec.to_builtins(info))
        return
    out = console_out()
    if not info.replicas_info_table:
        out.print("no broker group is known to the controllers", markup=False)
    for name, group in sorted(info.replicas_info_table.items()):
        rows = [("InSyncReplica", r.broker_id, r.broker_address, _bool(r.alive))
                for r in group.in_sync_replicas]
        rows += [("NotInSyncReplica", r.broker_id, r.broker_address, _bool(r.alive))
                 for r in group.not_in_sync_replicas]
        title = (f"{name}: master {group.master_broker_id} ({group.master_address}), "
                 f"masterEpoch {group.master_epoch}, syncStateSetEpoch "
                 f"{group.sync_state_set_epoch}, {len(group.in_sync_replicas)} in sync")
        out.print(table_of(title, ("state", "brokerId", "address", "alive"), rows,
                           right=("brokerId",)))


def get_broker_epoch(
    broker_name: Annotated[str | None, typer.Option(
        "-b", "--brokerName", help="One broker group.")] = None,
    cluster: Annotated[str | None, typer.Option(
        "-c", "--clusterName", help="Every broker of this cluster.")] = None,
    interval: Interval = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Each broker's epoch entries (which master epoch began at which commit-log offset)."""
    if not broker_name and not cluster:
        raise typer.BadParameter("give -b/--brokerName or -c/--clusterName")

    async def fetch(admin: AdminClient) -> list[dict[str, Any]]:
        brokers = [b for b in await admin.cluster_list()
                   if (broker_name is None or b.broker_name == broker_name)
                   and (cluster is None or b.cluster == cluster)]
        if not brokers:
            raise ValueError("the name servers list no such broker")
        out = []
        for b in brokers:
            cache = await broker_epoch_cache(admin.instance.request, b.address)
            row: dict[str, Any] = msgspec.to_builtins(cache)
            row["brokerAddr"] = b.address
            out.append(row)
        return out

    repeat_every(interval, lambda: _print_epochs(run_admin(namesrv, fetch), json_out))


def _print_epochs(rows: list[dict[str, Any]], json_out: bool) -> None:
    if json_out:
        emit_json(rows)
        return
    out = console_out()
    for row in rows:
        entries = [(e["epoch"], e["startOffset"],
                    "" if e.get("endOffset", OPEN_END) == OPEN_END else e["endOffset"])
                   for e in row.get("epochList", [])]
        out.print(table_of(f"{row['clusterName']} {row['brokerName']} {row['brokerAddr']} "
                           f"(id {row['brokerId']}, maxOffset {row['maxOffset']})",
                           ("epoch", "startOffset", "endOffset"), entries,
                           right=("epoch", "startOffset", "endOffset")))


def elect_master(
    controllers: Controllers,
    broker_id: Annotated[int, typer.Option("-b", "--brokerId",
                                           help="The broker to make master.")],
    broker_name: Annotated[str, typer.Option("-bn", "--brokerName",
                                             help="Its broker group.")],
    cluster: Cluster = "",
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Make a broker master of its group (it must be alive and in the sync-state set)."""
    header, body = run_admin(namesrv, lambda admin: _controllers(admin, controllers)
                             .elect_master(cluster, broker_name, broker_id))
    members = body.broker_member_group.broker_addrs if body.broker_member_group else {}
    if json_out:
        emit_json({"clusterName": cluster, "brokerName": broker_name,
                   "masterBrokerId": header.master_broker_id,
                   "masterAddress": header.master_address, "masterEpoch": header.master_epoch,
                   "syncStateSetEpoch": header.sync_state_set_epoch,
                   "syncStateSet": body.sync_state_set,
                   "brokers": {str(k): v for k, v in members.items()}})
        return
    console_out().print(table_of(
        f"{broker_name}: master {header.master_broker_id} ({header.master_address}), "
        f"masterEpoch {header.master_epoch}, syncStateSetEpoch {header.sync_state_set_epoch}",
        ("brokerId", "address"), sorted(members.items()), right=("brokerId",)))


def get_controller_metadata(controllers: Controllers, namesrv: Namesrv = DEFAULT_NAMESRV,
                            json_out: JsonFlag = False) -> None:
    """Each controller's view: the leader's id and address, and the Raft peers."""

    async def fetch(admin: AdminClient) -> list[dict[str, Any]]:
        ctl = _controllers(admin, controllers)
        out = []
        for addr in ctl.controllers:
            meta = await ctl.metadata(addr)
            out.append({"address": addr, "group": meta.group,
                        "controllerLeaderId": meta.leader_id,
                        "controllerLeaderAddress": meta.leader_address,
                        "isLeader": meta.is_leader, "peers": meta.peers})
        return out

    rows = run_admin(namesrv, fetch)
    if json_out:
        emit_json(rows)
        return
    console_out().print(table_of(
        "controllers", ("address", "isLeader", "leaderId", "leaderAddress", "peers"),
        ((r["address"], r["isLeader"], r["controllerLeaderId"] or "",
          r["controllerLeaderAddress"] or "", r["peers"] or "") for r in rows)))


def clean_broker_metadata(
    controllers: Controllers,
    broker_name: Annotated[str, typer.Option("-bn", "--brokerName",
                                             help="The broker group.")],
    ids: Annotated[str, typer.Option(
        "-b", "--brokerControllerIdsToClean",
        help="Broker ids to forget, '1;2;3' (default: the whole group).")] = "",
    cluster: Cluster = "",
    clean_living: Annotated[bool, typer.Option(
        "-l", "--cleanLivingBroker", help="Also forget brokers that are alive.")] = False,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Make the controllers forget brokers of a group (or the whole group)."""
    try:
        id_list = [int(i) for i in ids.replace(",", ";").split(";") if i.strip()]
    except ValueError:
        raise typer.BadParameter(f"{ids!r} is not a ';'-separated list of broker ids",
                                 param_hint="-b") from None
    run_admin(namesrv, lambda admin: _controllers(admin, controllers).clean_broker_metadata(
        cluster, broker_name, id_list, clean_living))
    result = {"clusterName": cluster, "brokerName": broker_name, "cleaned": id_list or "all"}
    if json_out:
        emit_json(result)
        return
    what = ", ".join(map(str, id_list)) if id_list else "every broker"
    console_out().print(f"cleaned {what} of {broker_name} from the controllers", markup=False)


def _bool(value: bool) -> str:
    """A flag as mqadmin prints it (Java's ``true``/``false``)."""
    return "true" if value else "false"


def _addresses(controllers: str) -> list[str]:
    addrs = [a.strip() for a in controllers.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise typer.BadParameter("names no controller", param_hint="-a")
    return addrs


def get_controller_config(controllers: Controllers, namesrv: Namesrv = DEFAULT_NAMESRV,
                          json_out: JsonFlag = False) -> None:
    """Every key of each controller with its current value."""
    addrs = _addresses(controllers)

    async def read(admin: AdminClient) -> dict[str, dict[str, str]]:
        ctl = ControllerAdmin(admin.instance.request, addrs)
        return {a: await ctl.config(a) for a in addrs}

    by_addr = run_admin(namesrv, read)
    if json_out:
        emit_json(by_addr)
        return
    out = console_out()
    for addr, props in by_addr.items():
        out.print(f"============{addr}============", markup=False)
        for key, value in props.items():
            out.print(f"{key:<50s}=  {value}", markup=False, soft_wrap=True)


def update_controller_config(
    controllers: Controllers,
    key: Annotated[str, typer.Option("-k", "--key", help="Config key.")],
    value: Annotated[str, typer.Option("-v", "--value", help="Config value.")],
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Change a key that can change while the controllers run (until they restart);
    others are refused."""
    addrs = _addresses(controllers)

    async def update(admin: AdminClient) -> None:
        ctl = ControllerAdmin(admin.instance.request, addrs)
        for addr in addrs:
            await ctl.update_config(addr, {key: value})

    run_admin(namesrv, update)
    if json_out:
        emit_json({"controllers": addrs, "key": key, "value": value})
        return
    # mqadmin prints the controllers as a Java list: [host:port, host:port]
    console_out().print(f"update controller config success![{', '.join(addrs)}]\n"
                        f"{key} : {value}", markup=False)
