"""What the leading controller answers to each request, and which events it writes.

Pure: each function takes the replicated state, the heartbeats and the time, and returns
a :class:`Decision` -- the response (code, remark, header, body) and the events that
make it true. The caller replicates the events and answers only once they are applied
(:mod:`~tidemq.namesrv.controller.app`). Requests that only read have no events.
"""

from __future__ import annotations

import dataclasses

from tidemq.codec.bodies import encode_body
from tidemq.codec.controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    BrokerMemberGroup,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
    parse_id_list,
)
from tidemq.codec.schema import Header
from tidemq.errors import RemoteProtocolError, ResponseCode
from tidemq.namesrv.controller.election import choose_master
from tidemq.namesrv.controller.events import (
    AlterSyncStateSet,
    CleanBrokerData,
    ElectMaster,
    Event,
    RegisterBroker,
)
from tidemq.namesrv.controller.heartbeats import Heartbeats
from tidemq.namesrv.controller.state import BrokerGroup, ControllerState

__all__ = [
    "Decision",
    "alter_sync_state_set",
    "clean_broker_data",
    "elect_master",
    "register_broker",
    "replica_info",
    "sync_state_data",
]

#: ``brokerId`` of an election the controller triggers itself (a lapsed master lease).
CONTROLLER_TRIGGER = -1


@dataclasses.dataclass(slots=True)
class Decision:
    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: Header | None = None
    body: bytes = b""
    events: list[Event] = dataclasses.field(default_factory=list)


def _refuse(code: ResponseCode, remark: str) -> Decision:
    return Decision(code=code, remark=remark)


def _member_group(group: BrokerGroup) -> BrokerMemberGroup:
    return BrokerMemberGroup(cluster=group.cluster, broker_name=group.broker_name,
                             broker_addrs=dict(group.brokers))


def register_broker(state: ControllerState, heartbeats: Heartbeats,
                    header: RegisterBrokerToControllerRequestHeader, now_ms: int) -> Decision:
    """A broker announces itself; it learns the group's master from the answer."""
    if header.broker_id < 1:
        return _refuse(ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                       f"broker id {header.broker_id}: controller broker ids start at 1")
    if not header.broker_address:
        return _refuse(ResponseCode.CONTROLLER_INVALID_REQUEST, "brokerAddress is empty")
    group = state.groups.get(header.broker_name)
    if group is not None and group.cluster != header.cluster_name:
        return _refuse(ResponseCode.CONTROLLER_INVALID_REQUEST,
                       f"broker {header.broker_name} belongs to cluster {group.cluster}, "
                       f"not {header.cluster_name}")
    events: list[Event] = []
    ha_address = header.ha_address or ""
    if (group is None or group.brokers.get(header.broker_id) != header.broker_address
            or group.ha_addresses.get(header.broker_id, "") != ha_address):
        events.append(RegisterBroker(cluster=header.cluster_name,
                                     broker_name=header.broker_name,
                                     broker_id=header.broker_id,
                                     address=header.broker_address, ha_address=ha_address))
    heartbeats.beat((header.broker_name, header.broker_id), header.broker_address, now_ms)
    response = RegisterBrokerToControllerResponseHeader(
        cluster_name=header.cluster_name, broker_name=header.broker_name)
    if group is not None and group.master_id is not None:
        response = dataclasses.replace(
            response, master_broker_id=group.master_id, master_address=group.master_address,
            master_epoch=group.master_epoch, sync_state_set_epoch=group.sync_state_set_epoch,
            master_ha_address=group.master_ha_address)
    body = SyncStateSet(sync_state_set=sorted(group.sync_state_set) if group else [],
                        sync_state_set_epoch=group.sync_state_set_epoch if group else 0)
    return Decision(header=response, body=encode_body(body), events=events)


def elect_master(state: ControllerState, heartbeats: Heartbeats,
                 header: ElectMasterRequestHeader, now_ms: int, *, unclean: bool) -> Decision:
    """An election, asked for by a broker (its own id: take me if there never was a
    master), by an administrator (``designateElect``) or by the controller (id -1)."""
    group = state.groups.get(header.broker_name)
    if group is None:
        return _refuse(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                       f"broker group {header.broker_name} has not registered")
    new: int | None = None
    if (group.never_elected and header.broker_id in group.brokers
            and heartbeats.alive((group.broker_name, header.broker_id), now_ms)):
        new = header.broker_id
    else:
        assigned = header.broker_id if header.designate_elect else None
        new = choose_master(group, heartbeats, now_ms, unclean=unclean, assigned=assigned)
    if new is not None and new == group.master_id:
        return Decision(
            code=ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
            remark=f"master {new} of {group.broker_name} is alive: no election needed",
            header=ElectMasterResponseHeader(
                master_broker_id=new, master_address=group.master_address,
                master_epoch=group.master_epoch,
                sync_state_set_epoch=group.sync_state_set_epoch),
            body=encode_body(ElectMasterResponseBody(
                broker_member_group=_member_group(group),
                sync_state_set=sorted(group.sync_state_set))))
    if new is not None:
        return Decision(
            header=ElectMasterResponseHeader(
                master_broker_id=new, master_address=group.brokers[new],
                master_epoch=group.master_epoch + 1,
                sync_state_set_epoch=group.sync_state_set_epoch + 1),
            body=encode_body(ElectMasterResponseBody(
                broker_member_group=_member_group(group), sync_state_set=[new])),
            events=[ElectMaster(broker_name=group.broker_name, new_master=new,
                                expected_master_epoch=group.master_epoch)])
    if header.designate_elect:
        return _refuse(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                       f"broker {header.broker_id} of {group.broker_name} cannot be master: "
                       "it is not alive or not in the sync-state set"
                       + ("" if unclean else " (enableElectUncleanMaster=false)"))
    if header.broker_id == CONTROLLER_TRIGGER and group.master_id is not None:
        return Decision(
            code=ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
            remark=f"master {group.master_id} of {group.broker_name} is gone and no broker "
                   "of the sync-state set is alive",
            events=[ElectMaster(broker_name=group.broker_name, new_master=None,
                                expected_master_epoch=group.master_epoch)])
    return _refuse(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                   f"no broker of {group.broker_name} can be master: none of the sync-state "
                   f"set {sorted(group.sync_state_set)} is alive")


def alter_sync_state_set(state: ControllerState, heartbeats: Heartbeats,
                         header: AlterSyncStateSetRequestHeader, body: SyncStateSet,
                         now_ms: int) -> Decision:
    """The master reports which replicas are in sync."""
    group = state.groups.get(header.broker_name)
    if group is None:
        return _refuse(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                       f"broker group {header.broker_name} is unknown")
    if group.master_id != header.master_broker_id or group.master_epoch != header.master_epoch:
        return _refuse(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                       f"broker {header.master_broker_id} at epoch {header.master_epoch} is not "
                       f"the master of {group.broker_name} (master {group.master_id}, epoch "
                       f"{group.master_epoch})")
    if body.sync_state_set_epoch != group.sync_state_set_epoch:
        return _refuse(ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                       f"sync-state-set epoch {body.sync_state_set_epoch} is stale (now "
                       f"{group.sync_state_set_epoch})")
    new_set = frozenset(body.sync_state_set)
    if header.master_broker_id not in new_set:
        return _refuse(ResponseCode.CONTROLLER_INVALID_REPLICAS,
                       f"the sync-state set {sorted(new_set)} must contain the master")
    for broker_id in sorted(new_set):
        if broker_id not in group.brokers:
            return _refuse(ResponseCode.CONTROLLER_INVALID_REPLICAS,
                           f"broker {broker_id} is not a member of {group.broker_name}")
        if (broker_id != header.master_broker_id
                and not heartbeats.alive((group.broker_name, broker_id), now_ms)):
            return _refuse(ResponseCode.CONTROLLER_INVALID_REPLICAS,
                           f"broker {broker_id} of {group.broker_name} is not alive")
    return Decision(
        header=AlterSyncStateSetResponseHeader(
            new_sync_state_set_epoch=group.sync_state_set_epoch + 1),
        events=[AlterSyncStateSet(broker_name=group.broker_name,
                                  master_id=header.master_broker_id,
                                  master_epoch=header.master_epoch,
                                  expected_epoch=group.sync_state_set_epoch,
                                  sync_state_set=new_set)])


def clean_broker_data(state: ControllerState, heartbeats: Heartbeats,
                      header: CleanControllerBrokerDataRequestHeader, now_ms: int) -> Decision:
    """An administrator removes brokers (or a whole group) from the controllers' books."""
    group = state.groups.get(header.broker_name)
    if group is None:
        return _refuse(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                       f"broker group {header.broker_name} is unknown")
    try:
        ids = parse_id_list(header.broker_controller_ids_to_clean)
    except RemoteProtocolError as exc:
        return _refuse(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, str(exc))
    targets = ids or frozenset(group.brokers)
    unknown = sorted(targets - group.brokers.keys())
    if unknown:
        return _refuse(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                       f"brokers {unknown} are not members of {group.broker_name}")
    if not header.is_clean_living_broker:
        living = sorted(i for i in targets
                        if heartbeats.alive((group.broker_name, i), now_ms))
        if living:
            return _refuse(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                           f"brokers {living} of {group.broker_name} are alive "
                           "(isCleanLivingBroker=false)")
    for broker_id in targets:
        heartbeats.forget((group.broker_name, broker_id))
    return Decision(events=[CleanBrokerData(broker_name=group.broker_name, broker_ids=ids)])


def replica_info(state: ControllerState, broker_name: str) -> Decision:
    group = state.groups.get(broker_name)
    if group is None:
        return _refuse(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                       f"broker group {broker_name} is unknown")
    return Decision(
        header=GetReplicaInfoResponseHeader(
            master_broker_id=group.master_id, master_address=group.master_address,
            master_epoch=group.master_epoch, master_ha_address=group.master_ha_address),
        body=encode_body(SyncStateSet(sync_state_set=sorted(group.sync_state_set),
                                      sync_state_set_epoch=group.sync_state_set_epoch)))


def sync_state_data(state: ControllerState, heartbeats: Heartbeats, names: list[str],
                    now_ms: int) -> Decision:
    """The groups named (every group when none is), as ``BrokerReplicasInfo``."""
    table: dict[str, ReplicasInfo] = {}
    for name in names or sorted(state.groups):
        group = state.groups.get(name)
        if group is None:
            continue
        members = [ReplicaIdentity(broker_name=name, broker_id=i, broker_address=addr,
                                   alive=heartbeats.alive((name, i), now_ms))
                   for i, addr in sorted(group.brokers.items())]
        table[name] = ReplicasInfo(
            master_broker_id=group.master_id, master_address=group.master_address,
            master_epoch=group.master_epoch, sync_state_set_epoch=group.sync_state_set_epoch,
            in_sync_replicas=[m for m in members if m.broker_id in group.sync_state_set],
            not_in_sync_replicas=[m for m in members
                                  if m.broker_id not in group.sync_state_set])
    return Decision(body=encode_body(BrokerReplicasInfo(replicas_info_table=table)))
