"""The controller-mode wire (RocketMQ 5): request and response headers, and JSON bodies.

Codes and what they carry (header field names are upstream's ext keys):

- CONTROLLER_ALTER_SYNC_STATE_SET (1001): :class:`AlterSyncStateSetRequestHeader` and the
  new :class:`SyncStateSet` as body; answered :class:`AlterSyncStateSetResponseHeader`.
- CONTROLLER_ELECT_MASTER (1002): :class:`ElectMasterRequestHeader`; answered
  :class:`ElectMasterResponseHeader` and :class:`ElectMasterResponseBody`.
- CONTROLLER_REGISTER_BROKER (1003): :class:`RegisterBrokerToControllerRequestHeader`;
  answered :class:`RegisterBrokerToControllerResponseHeader` and a :class:`SyncStateSet`.
- CONTROLLER_GET_REPLICA_INFO (1004): :class:`GetReplicaInfoRequestHeader`; answered
  :class:`GetReplicaInfoResponseHeader` and a :class:`SyncStateSet`.
- CONTROLLER_GET_METADATA_INFO (1005): no header; answered
  :class:`GetMetaDataResponseHeader`.
- CONTROLLER_GET_SYNC_STATE_DATA (1006): a JSON list of broker names as body; answered
  :class:`BrokerReplicasInfo`.
- GET_BROKER_EPOCH_CACHE (1007), served by a broker: answered :class:`EpochEntryCache`.
- CLEAN_BROKER_DATA (1011): :class:`CleanControllerBrokerDataRequestHeader`.
- BROKER_HEARTBEAT (904): :class:`~tidemq.codec.headers.BrokerHeartbeatRequestHeader`;
  a TideMQ controller answers :class:`BrokerHeartbeatResponseHeader` (upstream answers no
  header).

TideMQ adds to upstream's headers what Java peers ignore: ``haAddress``, the broker's HA
endpoint (``host:haListenPort``), sent when it registers and returned as
``masterHaAddress`` wherever the master is named, so a replica knows where to copy from;
and the heartbeat's answer, from which a master renews its lease.

A broker's controller id is the ``brokerId`` the controller knows it by (1 and up); the
master is listed under brokerId 0 in the name server's routes, as upstream.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from tidemq.codec.bodies import _Body
from tidemq.codec.schema import I64, Header, Key
from tidemq.errors import RemoteProtocolError

__all__ = [
    "AlterSyncStateSetRequestHeader",
    "AlterSyncStateSetResponseHeader",
    "BrokerHeartbeatResponseHeader",
    "BrokerMemberGroup",
    "BrokerReplicasInfo",
    "CleanControllerBrokerDataRequestHeader",
    "ElectMasterRequestHeader",
    "ElectMasterResponseBody",
    "ElectMasterResponseHeader",
    "EpochEntry",
    "EpochEntryCache",
    "GetMetaDataResponseHeader",
    "GetReplicaInfoRequestHeader",
    "GetReplicaInfoResponseHeader",
    "RegisterBrokerToControllerRequestHeader",
    "RegisterBrokerToControllerResponseHeader",
    "ReplicaIdentity",
    "ReplicasInfo",
    "SyncStateSet",
    "decode_broker_names",
    "encode_broker_names",
    "parse_id_list",
]

#: ``endOffset`` of the newest epoch entry: open-ended (Java's ``Long.MAX_VALUE``).
OPEN_END = 2**63 - 1


# ---------------------------------------------------------------- headers


class AlterSyncStateSetRequestHeader(Header):
    broker_name: str
    master_broker_id: I64
    master_epoch: int
    invoke_time: I64 | None = None


class AlterSyncStateSetResponseHeader(Header):
    new_sync_state_set_epoch: int = 0


class ElectMasterRequestHeader(Header):
    """``brokerId`` -1 lets the controller choose; ``designateElect`` forces that id."""

    cluster_name: str = ""
    broker_name: str
    broker_id: I64 = -1
    designate_elect: bool = False
    invoke_time: I64 | None = None


class ElectMasterResponseHeader(Header):
    master_broker_id: I64 | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None


class RegisterBrokerToControllerRequestHeader(Header):
    cluster_name: str
    broker_name: str
    broker_id: I64
    broker_address: str
    invoke_time: I64 | None = None
    ha_address: str | None = None  # TideMQ


class RegisterBrokerToControllerResponseHeader(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: I64 | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None
    master_ha_address: str | None = None  # TideMQ


class GetReplicaInfoRequestHeader(Header):
    broker_name: str


class GetReplicaInfoResponseHeader(Header):
    master_broker_id: I64 | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    master_ha_address: str | None = None  # TideMQ


class BrokerHeartbeatResponseHeader(Header):
    """A controller's answer to BROKER_HEARTBEAT (TideMQ): the Raft leader it knows
    (``controllerLeaderId``, empty: none), whether it is that leader, and, from the
    leader only, the group's master and epoch. A master renews its lease from these
    answers (``docs/replication.md``)."""

    controller_leader_id: str | None = None
    is_leader: Annotated[bool, Key("isLeader")] = False
    master_broker_id: I64 | None = None
    master_epoch: int | None = None


class GetMetaDataResponseHeader(Header):
    """``peers`` is ``id-host:port`` of every controller's Raft endpoint, ``;``-separated."""

    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: Annotated[bool, Key("isLeader")] = False
    peers: str | None = None


class CleanControllerBrokerDataRequestHeader(Header):
    """``brokerControllerIdsToClean``: ``;``-separated ids; empty cleans the whole group."""

    cluster_name: str | None = None
    broker_name: str
    broker_controller_ids_to_clean: str | None = None
    is_clean_living_broker: Annotated[bool, Key("isCleanLivingBroker")] = False
    invoke_time: I64 | None = None


def parse_id_list(text: str | None) -> frozenset[int]:
    """``"1;2;3"`` -> ``{1, 2, 3}``; raises :class:`RemoteProtocolError` naming the bad id."""
    ids: set[int] = set()
    for raw in (text or "").replace(",", ";").split(";"):
        part = raw.strip()
        if not part:
            continue
        if not part.isascii() or not part.isdigit():
            raise RemoteProtocolError(f"broker id {part!r} is not a non-negative integer")
        ids.add(int(part))
    return frozenset(ids)


# ---------------------------------------------------------------- bodies


class SyncStateSet(_Body):
    sync_state_set: list[int] = []
    sync_state_set_epoch: int = 0


class ReplicaIdentity(_Body):
    broker_name: str = ""
    broker_id: int = 0
    broker_address: str = ""
    alive: bool = False


class ReplicasInfo(_Body):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    in_sync_replicas: list[ReplicaIdentity] = []
    not_in_sync_replicas: list[ReplicaIdentity] = []


class BrokerReplicasInfo(_Body):
    replicas_info_table: dict[str, ReplicasInfo] = {}


class BrokerMemberGroup(_Body):
    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = {}


class ElectMasterResponseBody(_Body):
    broker_member_group: BrokerMemberGroup | None = None
    sync_state_set: list[int] = []


class EpochEntry(_Body):
    epoch: int
    start_offset: int
    end_offset: int = OPEN_END


class EpochEntryCache(_Body):
    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = 0
    epoch_list: list[EpochEntry] = []
    max_offset: int = 0


_names_encoder = msgspec.json.Encoder()
_names_decoder = msgspec.json.Decoder(list[str])


def encode_broker_names(names: list[str]) -> bytes:
    """CONTROLLER_GET_SYNC_STATE_DATA's request body: a JSON list of broker names."""
    return _names_encoder.encode(names)


def decode_broker_names(data: bytes | bytearray | memoryview) -> list[str]:
    try:
        return _names_decoder.decode(bytes(data))
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(
            f"the body must be a JSON list of broker names: {exc}") from None
