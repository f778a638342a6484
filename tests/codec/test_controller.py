"""The controller-mode wire: header keys are upstream's, every header and body survives a
round trip through a frame, and bad bodies are refused with an error naming them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.codec.test_headers import header_instances

from tidemq.codec import controller
from tidemq.codec.bodies import decode_body, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.frame import FrameDecoder, frame_bytes
from tidemq.codec.schema import Header
from tidemq.errors import RemoteProtocolError

CONTROLLER_HEADERS: list[type[Header]] = [
    cls for name in controller.__all__
    if isinstance(cls := getattr(controller, name), type) and issubclass(cls, Header)
]


def test_request_codes_are_upstreams() -> None:
    assert {c.name: int(c) for c in RequestCode if 1000 < c < 1100} == {
        "CONTROLLER_ALTER_SYNC_STATE_SET": 1001, "CONTROLLER_ELECT_MASTER": 1002,
        "CONTROLLER_REGISTER_BROKER": 1003, "CONTROLLER_GET_REPLICA_INFO": 1004,
        "CONTROLLER_GET_METADATA_INFO": 1005, "CONTROLLER_GET_SYNC_STATE_DATA": 1006,
        "GET_BROKER_EPOCH_CACHE": 1007, "UPDATE_CONTROLLER_CONFIG": 1009,
        "GET_CONTROLLER_CONFIG": 1010, "CLEAN_BROKER_DATA": 1011}


def test_ext_keys_are_upstreams_field_names() -> None:
    assert controller.ElectMasterRequestHeader.ext_keys() == {
        "cluster_name": "clusterName", "broker_name": "brokerName", "broker_id": "brokerId",
        "designate_elect": "designateElect", "invoke_time": "invokeTime"}
    assert controller.CleanControllerBrokerDataRequestHeader.ext_keys()[
        "is_clean_living_broker"] == "isCleanLivingBroker"
    assert controller.GetMetaDataResponseHeader.ext_keys()["is_leader"] == "isLeader"
    assert controller.AlterSyncStateSetRequestHeader.ext_keys() == {
        "broker_name": "brokerName", "master_broker_id": "masterBrokerId",
        "master_epoch": "masterEpoch", "invoke_time": "invokeTime"}


@settings(max_examples=300)
@given(header_instances(CONTROLLER_HEADERS))
def test_every_controller_header_round_trips_through_a_frame(header: Header) -> None:
    cmd = RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER, header.to_ext())
    decoder = FrameDecoder()
    decoder.receive_data(frame_bytes(cmd))
    got = decoder.next_command()
    assert got is not None
    assert type(header).from_ext(got.ext_fields) == header


_ids = st.lists(st.integers(0, 2**62), max_size=8, unique=True)
_name = st.text(min_size=1, max_size=12)
_replica = st.builds(controller.ReplicaIdentity, broker_name=_name,
                     broker_id=st.integers(0, 2**62), broker_address=_name,
                     alive=st.booleans())
_bodies = st.one_of(
    st.builds(controller.SyncStateSet, sync_state_set=_ids,
              sync_state_set_epoch=st.integers(0, 2**31 - 1)),
    st.builds(controller.BrokerReplicasInfo, replicas_info_table=st.dictionaries(
        _name, st.builds(controller.ReplicasInfo,
                         master_broker_id=st.none() | st.integers(0, 2**62),
                         master_address=st.none() | _name,
                         master_epoch=st.integers(0, 2**31 - 1),
                         sync_state_set_epoch=st.integers(0, 2**31 - 1),
                         in_sync_replicas=st.lists(_replica, max_size=3),
                         not_in_sync_replicas=st.lists(_replica, max_size=3)), max_size=3)),
    st.builds(controller.ElectMasterResponseBody,
              broker_member_group=st.none() | st.builds(
                  controller.BrokerMemberGroup, cluster=_name, broker_name=_name,
                  broker_addrs=st.dictionaries(st.integers(0, 2**62), _name, max_size=4)),
              sync_state_set=_ids),
    st.builds(controller.EpochEntryCache, cluster_name=_name, broker_name=_name,
              broker_id=st.integers(0, 2**62), max_offset=st.integers(0, 2**62),
              epoch_list=st.lists(st.builds(
                  controller.EpochEntry, epoch=st.integers(0, 2**31 - 1),
                  start_offset=st.integers(0, 2**62),
                  end_offset=st.integers(0, 2**63 - 1)), max_size=4)),
)


@settings(max_examples=300)
@given(_bodies)
def test_every_controller_body_round_trips(body: object) -> None:
    assert decode_body(encode_body(body), type(body)) == body  # type: ignore[arg-type]


def test_a_java_sync_state_set_body_decodes() -> None:
    # fastjson's output for SyncStateSet: a JSON array of longs and the epoch.
    body = decode_body(b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}', controller.SyncStateSet)
    assert body == controller.SyncStateSet(sync_state_set=[1, 2], sync_state_set_epoch=3)


@given(st.lists(st.text(max_size=10), max_size=5))
def test_broker_names_round_trip(names: list[str]) -> None:
    assert controller.decode_broker_names(controller.encode_broker_names(names)) == names


def test_a_body_that_is_not_a_list_of_names_is_refused_naming_it() -> None:
    with pytest.raises(RemoteProtocolError, match="JSON list of broker names"):
        controller.decode_broker_names(b'{"a":1}')


def test_id_lists() -> None:
    assert controller.parse_id_list("1;2; 3,4") == {1, 2, 3, 4}
    assert controller.parse_id_list(None) == frozenset()
    with pytest.raises(RemoteProtocolError, match="'x'"):
        controller.parse_id_list("1;x")
