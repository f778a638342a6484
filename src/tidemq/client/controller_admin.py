"""ControllerAdmin: the controller-mode administration mqadmin offers, over any request
function (an :class:`~tidemq.client.instance.ClientInstance`'s, so requests are signed
the same way).

===================================  =================================================
operation                            requests
===================================  =================================================
:meth:`metadata`                     1005 CONTROLLER_GET_METADATA_INFO at one controller
:meth:`leader`                       1005 at each controller until one names the leader
:meth:`sync_state_set`               1006 CONTROLLER_GET_SYNC_STATE_DATA at the leader
:meth:`replica_info`                 1004 CONTROLLER_GET_REPLICA_INFO at the leader
:meth:`elect_master`                 1002 CONTROLLER_ELECT_MASTER (designated) at the leader
:meth:`clean_broker_metadata`        1011 CLEAN_BROKER_DATA at the leader
:meth:`config`                       1010 GET_CONTROLLER_CONFIG at one controller
:meth:`update_config`                1009 UPDATE_CONTROLLER_CONFIG at one controller
:func:`broker_epoch_cache`           1007 GET_BROKER_EPOCH_CACHE at a broker
===================================  =================================================

A request the leader refuses with 2007 CONTROLLER_NOT_LEADER (leadership moved), or that
cannot reach the controller named as leader (it just died), is sent again to the leader
found anew, for up to :data:`LEADER_WAIT` seconds. When every controller refuses the
search for the leader with 16 NO_PERMISSION (wrong credentials, say), that refusal is
raised at once: asking again would not change it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence

from tidemq.codec.bodies import decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    EpochEntryCache,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    ReplicasInfo,
    SyncStateSet,
    encode_broker_names,
)
from tidemq.errors import BrokerResponseError, ResponseCode, TideMQError, error_for_code
from tidemq.formats.javaprops import parse_properties, properties_text

__all__ = ["LEADER_WAIT", "ControllerAdmin", "ControllerMetadata", "broker_epoch_cache"]

#: Seconds to keep looking for a leader (an election among controllers takes about one).
LEADER_WAIT = 5.0

RequestFn = Callable[[str, RemotingCommand], Awaitable[RemotingCommand]]


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerMetadata:
    """One controller's view of the controller group (mqadmin getControllerMetaData)."""

    address: str
    group: str | None
    leader_id: str | None
    leader_address: str | None
    is_leader: bool
    peers: str | None


def _check(response: RemotingCommand, address: str) -> RemotingCommand:
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(response.code, response.remark or "", address=address)
    return response


class ControllerAdmin:
    def __init__(self, request: RequestFn, controllers: Sequence[str]) -> None:
        if not controllers:
            raise ValueError("no controller address given")
        self._request = request
        self.controllers = list(controllers)

    async def metadata(self, address: str) -> ControllerMetadata:
        cmd = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
        header = GetMetaDataResponseHeader.from_ext(
            _check(await self._request(address, cmd), address).ext_fields)
        return ControllerMetadata(address, header.group, header.controller_leader_id,
                                  header.controller_leader_address, header.is_leader,
                                  header.peers)

    async def config(self, address: str) -> dict[str, str]:
        """Every key of the controller at ``address`` with its current value (secrets
        masked)."""
        response = _check(await self._request(address, RemotingCommand.request(
            RequestCode.GET_CONTROLLER_CONFIG)), address)
        try:
            text = response.full_body().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error_for_code(ResponseCode.SYSTEM_ERROR, f"config from {address} is not "
                                 f"UTF-8: {exc}", address=address) from None
        return dict(sorted(parse_properties(text).items()))

    async def update_config(self, address: str, changes: Mapping[str, str]) -> None:
        """Change run-time keys of the controller at ``address``; a key that cannot change
        while it runs is refused (INVALID_PARAMETER naming it)."""
        body = properties_text(changes).encode("utf-8")
        _check(await self._request(address, RemotingCommand.request(
            RequestCode.UPDATE_CONTROLLER_CONFIG, body=body)), address)

    async def leader(self) -> str:
        """The leader's request address, asking each controller in turn until one knows."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_WAIT
        errors: list[str] = []
        while True:
            refused: list[BrokerResponseError] = []
            for address in self.controllers:
                try:
                    meta = await self.metadata(address)
                except TideMQError as exc:
                    errors.append(f"{address}: {exc}")
                    if (isinstance(exc, BrokerResponseError)
                            and exc.code == ResponseCode.NO_PERMISSION):
                        refused.append(exc)
                    continue
                if meta.is_leader:
                    return address
                if meta.leader_address:
                    return meta.leader_address
                errors.append(f"{address}: knows no leader")
            if len(refused) == len(self.controllers):
                raise refused[0]
            if loop.time() >= deadline:
                raise error_for_code(
                    ResponseCode.CONTROLLER_NOT_LEADER,
                    "no controller leader found: " + "; ".join(errors[-len(self.controllers):]))
            await asyncio.sleep(0.2)

    async def _at_leader(self, make: Callable[[], RemotingCommand]) -> RemotingCommand:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_WAIT
        while True:
            leader = await self.leader()
            try:
                response = await self._request(leader, make())
            except TideMQError:  # a follower named a leader that just died
                if loop.time() >= deadline:
                    raise
            else:
                if (response.code != ResponseCode.CONTROLLER_NOT_LEADER
                        or loop.time() >= deadline):
                    return _check(response, leader)
            await asyncio.sleep(0.2)

    async def sync_state_set(self, broker_names: Sequence[str] = ()) -> BrokerReplicasInfo:
        """Every group's master, epochs and members, in sync or not (all groups when no
        name is given)."""
        response = await self._at_leader(lambda: RemotingCommand.request(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
            body=encode_broker_names(list(broker_names))))
        return decode_body(response.body, BrokerReplicasInfo)

    async def replica_info(self, broker_name: str) -> tuple[GetReplicaInfoResponseHeader,
                                                            SyncStateSet]:
        header = GetReplicaInfoRequestHeader(broker_name=broker_name)
        response = await self._at_leader(lambda: RemotingCommand.request(
            RequestCode.CONTROLLER_GET_REPLICA_INFO, header.to_ext()))
        return (GetReplicaInfoResponseHeader.from_ext(response.ext_fields),
                decode_body(response.body, SyncStateSet))

    async def elect_master(self, cluster: str, broker_name: str, broker_id: int
                           ) -> tuple[ElectMasterResponseHeader, ElectMasterResponseBody]:
        """Make ``broker_id`` master; refused unless it is alive and in the sync-state set
        (or unclean elections are enabled). A broker that is already master is answered
        with CONTROLLER_MASTER_STILL_EXIST, which this treats as done."""
        header = ElectMasterRequestHeader(cluster_name=cluster, broker_name=broker_name,
                                          broker_id=broker_id, designate_elect=True)
        try:
            response = await self._at_leader(lambda: RemotingCommand.request(
                RequestCode.CONTROLLER_ELECT_MASTER, header.to_ext()))
        except BrokerResponseError as exc:
            if exc.code != ResponseCode.CONTROLLER_MASTER_STILL_EXIST:
                raise
            return await self._master_still(broker_name)
        return (ElectMasterResponseHeader.from_ext(response.ext_fields),
                decode_body(response.body, ElectMasterResponseBody)
                if response.body else ElectMasterResponseBody())

    async def _master_still(self, broker_name: str) -> tuple[ElectMasterResponseHeader,
                                                            ElectMasterResponseBody]:
        """The group as an election would have answered it: its master, epochs, members
        and sync-state set, read from the leader's sync-state data."""
        table = (await self.sync_state_set([broker_name])).replicas_info_table
        info = table.get(broker_name) or ReplicasInfo()
        members = [*info.in_sync_replicas, *info.not_in_sync_replicas]
        return (ElectMasterResponseHeader(master_broker_id=info.master_broker_id,
                                          master_address=info.master_address,
                                          master_epoch=info.master_epoch,
                                          sync_state_set_epoch=info.sync_state_set_epoch),
                ElectMasterResponseBody(
                    broker_member_group=BrokerMemberGroup(
                        broker_name=broker_name,
                        broker_addrs={m.broker_id: m.broker_address for m in members}),
                    sync_state_set=sorted(m.broker_id for m in info.in_sync_replicas)))

    async def clean_broker_metadata(self, cluster: str, broker_name: str,
                                    broker_ids: Sequence[int] = (),
                                    clean_living: bool = False) -> None:
        """Forget ``broker_ids`` of the group (all of it when none is given)."""
        header = CleanControllerBrokerDataRequestHeader(
            cluster_name=cluster or None, broker_name=broker_name,
            broker_controller_ids_to_clean=";".join(map(str, broker_ids)) or None,
            is_clean_living_broker=clean_living)
        await self._at_leader(lambda: RemotingCommand.request(
            RequestCode.CLEAN_BROKER_DATA, header.to_ext()))


async def broker_epoch_cache(request: RequestFn, broker_address: str) -> EpochEntryCache:
    """A broker's epoch file: which master epoch began at which commit-log offset."""
    response = await request(broker_address,
                             RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE))
    return decode_body(_check(response, broker_address).body, EpochEntryCache)
