"""The replicated state machine: events survive their encoding, and any sequence of
events -- stale ones included -- keeps the group invariants; a stale event changes nothing."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.namesrv.controller.events import (
    AlterSyncStateSet,
    AnnounceController,
    CleanBrokerData,
    ElectMaster,
    Event,
    RegisterBroker,
    decode_event,
    encode_event,
)
from tidemq.namesrv.controller.state import ControllerState

_names = st.sampled_from(["broker-a", "broker-b"])
_ids = st.integers(1, 4)
_epochs = st.integers(0, 4)
_id_sets = st.frozensets(_ids, max_size=4)

events: st.SearchStrategy[Event] = st.one_of(
    st.builds(RegisterBroker, cluster=st.just("c"), broker_name=_names, broker_id=_ids,
              address=st.sampled_from(["h:1", "h:2", "h:3"])),
    st.builds(ElectMaster, broker_name=_names, new_master=st.none() | _ids,
              expected_master_epoch=_epochs),
    st.builds(AlterSyncStateSet, broker_name=_names, master_id=_ids, master_epoch=_epochs,
              expected_epoch=_epochs, sync_state_set=_id_sets),
    st.builds(CleanBrokerData, broker_name=_names, broker_ids=_id_sets),
    st.builds(AnnounceController, raft_address=st.text(max_size=8),
              address=st.text(max_size=8)),
)


@given(events)
def test_events_round_trip(event: Event) -> None:
    assert decode_event(encode_event(event)) == event


def _check(state: ControllerState, before: ControllerState) -> None:
    for name, group in state.groups.items():
        assert group.brokers, "a group without brokers is removed"
        assert group.sync_state_set <= group.brokers.keys()
        if group.master_id is not None:
            assert group.master_id in group.brokers
            assert group.master_id in group.sync_state_set
        old = before.groups.get(name)
        if old is not None:
            assert group.master_epoch >= old.master_epoch
            assert group.sync_state_set_epoch >= old.sync_state_set_epoch
            if group.sync_state_set != old.sync_state_set:
                assert group.sync_state_set_epoch > old.sync_state_set_epoch


@settings(max_examples=400)
@given(st.lists(events, max_size=40))
def test_any_sequence_of_events_keeps_the_invariants(sequence: list[Event]) -> None:
    state = ControllerState()
    for event in sequence:
        before = copy.deepcopy(state)
        if not state.apply(event):
            assert state == before, f"{event} was refused but changed the state"
        _check(state, before)


def test_an_election_decided_against_an_older_epoch_is_a_no_op() -> None:
    state = ControllerState()
    for broker_id in (1, 2, 3):
        state.apply(RegisterBroker(cluster="c", broker_name="a", broker_id=broker_id,
                                   address=f"h:{broker_id}"))
    assert state.apply(ElectMaster(broker_name="a", new_master=1, expected_master_epoch=0))
    # two leaders decided at epoch 1; only the first to be applied counts
    assert state.apply(ElectMaster(broker_name="a", new_master=2, expected_master_epoch=1))
    assert not state.apply(ElectMaster(broker_name="a", new_master=3, expected_master_epoch=1))
    group = state.groups["a"]
    assert (group.master_id, group.master_epoch, group.sync_state_set) == (2, 2, {2})


def test_a_fenced_master_cannot_change_the_sync_state_set() -> None:
    state = ControllerState()
    for broker_id in (1, 2):
        state.apply(RegisterBroker(cluster="c", broker_name="a", broker_id=broker_id,
                                   address=f"h:{broker_id}"))
    state.apply(ElectMaster(broker_name="a", new_master=1, expected_master_epoch=0))
    state.apply(ElectMaster(broker_name="a", new_master=2, expected_master_epoch=1))
    group = state.groups["a"]
    assert not state.apply(AlterSyncStateSet(broker_name="a", master_id=1, master_epoch=1,
                                             expected_epoch=group.sync_state_set_epoch,
                                             sync_state_set=frozenset({1, 2})))
    assert group.sync_state_set == {2}
    assert state.apply(AlterSyncStateSet(broker_name="a", master_id=2, master_epoch=2,
                                         expected_epoch=group.sync_state_set_epoch,
                                         sync_state_set=frozenset({1, 2})))
    assert group.sync_state_set == {1, 2}
