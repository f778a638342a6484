"""``tidemq admin getSyncStateSet`` / ``getBrokerEpoch`` / ``electMaster`` /
``getControllerMetaData`` / ``cleanBrokerMetadata`` / ``getControllerConfig`` /
``updateControllerConfig``: controller mode, with mqadmin's
names and flags (``-a`` the controllers' addresses, ``;``-separated; ``-c`` cluster;
``--bn`` broker name where mqadmin's ``-b`` is a broker id). Requests go to the leading
controller, found by asking the ones given; ``getBrokerEpoch`` asks the brokers the name
servers list."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import msgspec
import typer

from tidemq.cli.commands.admin_common import (
    Interval,
    JsonFlag,
    Namesrv,
    console_err,
    console_out,
    emit_json,
    repeat_every,
    run_admin,
)
from tidemq.client import AdminClient
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.client.controller_admin import ControllerAdmin, broker_epoch_cache
from tidemq.codec.controller import OPEN_END, BrokerReplicasInfo, ReplicaIdentity

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
    if not info.replicas_info_table:  # mqadmin prints nothing: scripts read stdout
        console_err().print("no broker group is known to the controllers", markup=False)
    out = sys.stdout
    for name, group in sorted(info.replicas_info_table.items()):
        out.write(f"\n#brokerName\t{name}\n#MasterBrokerId\t{_java(group.master_broker_id)}"
                  f"\n#MasterAddr\t{_java(group.master_address)}"
                  f"\n#MasterEpoch\t{_java(group.master_epoch)}"
                  f"\n#SyncStateSetEpoch\t{_java(group.sync_state_set_epoch)}"
                  f"\n#SyncStateSetNums\t{len(group.in_sync_replicas)}\n")
        for replica in group.in_sync_replicas:
            out.write(f"\nInSyncReplica:\t{_identity(replica)}\n")
        for replica in group.not_in_sync_replicas:
            out.write(f"\nNotInSyncReplica:\t{_identity(replica)}\n")


def _identity(r: ReplicaIdentity) -> str:
    """A replica as mqadmin prints it (its Java ``toString``)."""
    return (f"ReplicaIdentity{{brokerName='{r.broker_name}', brokerId={r.broker_id}, "
            f"brokerAddress='{r.broker_address}', alive={_bool(r.alive)}}}")


def _java(value: object) -> str:
    """A field as Java's ``printf`` prints it: ``null`` for none."""
    return "null" if value is None else str(value)


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
            for entry in row.get("epochList", []):
                # the open epoch runs to the commit log's end, as mqadmin shows it
                if entry.get("endOffset", OPEN_END) == OPEN_END:
                    entry["endOffset"] = row["maxOffset"]
            out.append(row)
        return out

    repeat_every(interval, lambda: _print_epochs(run_admin(namesrv, fetch), json_out))


def _print_epochs(rows: list[dict[str, Any]], json_out: bool) -> None:
    if json_out:
        emit_json(rows)
        return
    out = sys.stdout
    for row in rows:
        out.write(f"\n#clusterName\t{row['clusterName']}\n#brokerName\t{row['brokerName']}"
                  f"\n#brokerAddr\t{row['brokerAddr']}\n#brokerId\t{row['brokerId']}")
        for e in row.get("epochList", []):
            out.write(f"\n#Epoch: EpochEntry{{epoch={e['epoch']}, "
                      f"startOffset={e['startOffset']}, endOffset={e['endOffset']}}}")
        out.write("\n")


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
    out = sys.stdout
    out.write(f"\n#ClusterName\t{cluster}\n#BrokerName\t{broker_name}"
              f"\n#BrokerMasterAddr\t{_java(header.master_address)}"
              f"\n#MasterEpoch\t{_java(header.master_epoch)}"
              f"\n#SyncStateSetEpoch\t{_java(header.sync_state_set_epoch)}\n")
    for member, address in sorted(members.items()):
        out.write(f"\t#Broker\t{member}\t{address}\n")


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
    out = sys.stdout
    for r in rows:
        out.write(f"\n#ControllerAddress\t{r['address']}\n#ControllerGroup\t{_java(r['group'])}"
                  f"\n#ControllerLeaderId\t{_java(r['controllerLeaderId'])}"
                  f"\n#ControllerLeaderAddress\t{_java(r['controllerLeaderAddress'])}")
        for peer in (r["peers"] or "").split(";"):
            if peer:
                out.write(f"\n#Peer:\t{peer}")
        out.write("\n")


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
