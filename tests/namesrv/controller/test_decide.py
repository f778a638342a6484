"""What the leading controller decides: first elections, elections from the sync-state set
by reported offset, unclean elections only when allowed, fencing of stale masters, and
refusals that say what was wrong."""

from __future__ import annotations

import pytest

from tidemq.codec.bodies import decode_body
from tidemq.codec.controller import (
    AlterSyncStateSetRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from tidemq.errors import ResponseCode
from tidemq.namesrv.controller import decide
from tidemq.namesrv.controller.heartbeats import Heartbeats
from tidemq.namesrv.controller.state import ControllerState

T = 1_000_000
TIMEOUT = 3000


def _apply(state: ControllerState, decision: decide.Decision) -> decide.Decision:
    for event in decision.events:
        assert state.apply(event)
    return decision


@pytest.fixture
def group() -> tuple[ControllerState, Heartbeats]:
    """broker-a with brokers 1, 2, 3 registered; 1 is master, the set is {1, 2, 3}."""
    state, beats = ControllerState(), Heartbeats(TIMEOUT)
    for broker_id in (1, 2, 3):
        header = RegisterBrokerToControllerRequestHeader(
            cluster_name="c", broker_name="broker-a", broker_id=broker_id,
            broker_address=f"127.0.0.1:{10910 + broker_id}")
        _apply(state, decide.register_broker(state, beats, header, T))
    first = _apply(state, decide.elect_master(
        state, beats, ElectMasterRequestHeader(broker_name="broker-a", broker_id=1), T,
        unclean=False))
    assert first.code == ResponseCode.SUCCESS
    alter = AlterSyncStateSetRequestHeader(broker_name="broker-a", master_broker_id=1,
                                           master_epoch=1)
    body = SyncStateSet(sync_state_set=[1, 2, 3], sync_state_set_epoch=1)
    assert _apply(state, decide.alter_sync_state_set(state, beats, alter, body, T)).code == 0
    return state, beats


def _beat(beats: Heartbeats, broker_id: int, now: int, offset: int, epoch: int = 1) -> None:
    beats.beat(("broker-a", broker_id), f"127.0.0.1:{10910 + broker_id}", now,
               epoch=epoch, max_offset=offset)


LAPSED = ElectMasterRequestHeader(broker_name="broker-a", broker_id=decide.CONTROLLER_TRIGGER)


def test_the_first_broker_to_ask_becomes_the_first_master(group: tuple) -> None:
    state, _ = group
    g = state.groups["broker-a"]
    assert (g.master_id, g.master_epoch, g.sync_state_set, g.sync_state_set_epoch) == (
        1, 1, {1, 2, 3}, 2)


def test_a_lapsed_master_is_replaced_by_the_replica_holding_the_most(group: tuple) -> None:
    state, beats = group
    now = T + TIMEOUT + 1  # the master (1) is silent from T on
    _beat(beats, 2, now, offset=500)
    _beat(beats, 3, now, offset=900)
    decision = _apply(state, decide.elect_master(state, beats, LAPSED, now, unclean=False))
    assert decision.code == ResponseCode.SUCCESS
    g = state.groups["broker-a"]
    assert (g.master_id, g.master_epoch, g.sync_state_set) == (3, 2, {3})
    assert decision.header is not None and decision.header.to_ext()["masterEpoch"] == "2"


def test_a_newer_epoch_wins_over_a_larger_offset(group: tuple) -> None:
    state, beats = group
    now = T + TIMEOUT + 1
    _beat(beats, 2, now, offset=500, epoch=2)
    _beat(beats, 3, now, offset=900, epoch=1)
    _apply(state, decide.elect_master(state, beats, LAPSED, now, unclean=False))
    assert state.groups["broker-a"].master_id == 2


def test_a_live_master_stays(group: tuple) -> None:
    state, beats = group
    _beat(beats, 1, T + 10, offset=1)
    _beat(beats, 2, T + 10, offset=1000)
    decision = decide.elect_master(state, beats, LAPSED, T + 20, unclean=False)
    assert decision.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    assert not decision.events


def test_no_live_member_of_the_set_leaves_the_group_without_master(group: tuple) -> None:
    state, beats = group
    state.groups["broker-a"].sync_state_set = frozenset({1, 2})
    now = T + TIMEOUT + 1
    _beat(beats, 3, now, offset=10**6)  # alive, but outside the set
    decision = _apply(state, decide.elect_master(state, beats, LAPSED, now, unclean=False))
    assert decision.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert state.groups["broker-a"].master_id is None
    unclean = _apply(state, decide.elect_master(state, beats, LAPSED, now, unclean=True))
    assert unclean.code == ResponseCode.SUCCESS
    assert state.groups["broker-a"].master_id == 3


def test_an_administrator_may_designate_a_live_member_of_the_set(group: tuple) -> None:
    state, beats = group
    _beat(beats, 1, T + 10, offset=5)
    _beat(beats, 2, T + 10, offset=5)
    header = ElectMasterRequestHeader(broker_name="broker-a", broker_id=2,
                                      designate_elect=True)
    assert _apply(state, decide.elect_master(state, beats, header, T + 20,
                                             unclean=False)).code == 0
    assert state.groups["broker-a"].master_id == 2
    dead = ElectMasterRequestHeader(broker_name="broker-a", broker_id=3, designate_elect=True)
    refused = decide.elect_master(state, beats, dead, T + TIMEOUT + 100, unclean=False)
    assert refused.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    assert "broker 3" in (refused.remark or "")


def test_a_fenced_master_cannot_alter_the_set(group: tuple) -> None:
    state, beats = group
    now = T + TIMEOUT + 1
    _beat(beats, 2, now, offset=1)
    _apply(state, decide.elect_master(state, beats, LAPSED, now, unclean=False))
    old = AlterSyncStateSetRequestHeader(broker_name="broker-a", master_broker_id=1,
                                         master_epoch=1)
    decision = decide.alter_sync_state_set(
        state, beats, old, SyncStateSet(sync_state_set=[1, 2], sync_state_set_epoch=3), now)
    assert decision.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    assert "not the master" in (decision.remark or "")


def test_the_set_must_hold_the_master_and_live_members(group: tuple) -> None:
    state, beats = group
    header = AlterSyncStateSetRequestHeader(broker_name="broker-a", master_broker_id=1,
                                            master_epoch=1)
    epoch = state.groups["broker-a"].sync_state_set_epoch
    without = decide.alter_sync_state_set(
        state, beats, header, SyncStateSet(sync_state_set=[2], sync_state_set_epoch=epoch), T)
    assert without.code == ResponseCode.CONTROLLER_INVALID_REPLICAS
    stale = decide.alter_sync_state_set(
        state, beats, header, SyncStateSet(sync_state_set=[1], sync_state_set_epoch=epoch - 1),
        T)
    assert stale.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    dead = decide.alter_sync_state_set(
        state, beats, header, SyncStateSet(sync_state_set=[1, 3], sync_state_set_epoch=epoch),
        T + TIMEOUT + 1)
    assert dead.code == ResponseCode.CONTROLLER_INVALID_REPLICAS
    assert "not alive" in (dead.remark or "")


def test_cleaning_refuses_living_brokers_unless_told(group: tuple) -> None:
    state, beats = group
    header = CleanControllerBrokerDataRequestHeader(
        broker_name="broker-a", broker_controller_ids_to_clean="3")
    refused = decide.clean_broker_data(state, beats, header, T + 1)
    assert refused.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert "alive" in (refused.remark or "")
    _apply(state, decide.clean_broker_data(state, beats, header, T + TIMEOUT + 1))
    assert set(state.groups["broker-a"].brokers) == {1, 2}
    assert state.groups["broker-a"].sync_state_set == {1, 2}


def test_reads_describe_the_group(group: tuple) -> None:
    state, _ = group
    info = decide.replica_info(state, "broker-a")
    assert info.header is not None
    assert info.header.to_ext()["masterAddress"] == "127.0.0.1:10911"
    assert decode_body(info.body, SyncStateSet).sync_state_set == [1, 2, 3]
    assert decide.replica_info(state, "nope").code == (
        ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST)


def test_a_broker_id_below_one_is_refused() -> None:
    header = RegisterBrokerToControllerRequestHeader(
        cluster_name="c", broker_name="b", broker_id=0, broker_address="h:1")
    decision = decide.register_broker(ControllerState(), Heartbeats(TIMEOUT), header, T)
    assert decision.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
