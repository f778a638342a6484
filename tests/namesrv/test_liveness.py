"""The broker liveness state table (tidemq.namesrv.liveness)."""

from __future__ import annotations

import itertools

import pytest

from tidemq.namesrv.liveness import (
    REFRESHING_EVENTS,
    TRANSITIONS,
    BrokerState,
    Liveness,
    LivenessEvent,
    LivenessTable,
)

from .conftest import START_MS, FakeClock

ALL_PAIRS = list(itertools.product(BrokerState, LivenessEvent))


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS)
def test_every_pair_follows_the_table(state: BrokerState, event: LivenessEvent) -> None:
    record = Liveness(state=state, last_update_ms=100, timeout_ms=50)
    transition = record.apply(event, 1000, timeout_ms=7)
    expected = TRANSITIONS.get((state, event))
    if expected is None:
        assert transition is None
        assert record == Liveness(state=state, last_update_ms=100, timeout_ms=50)
        return
    assert transition is not None
    assert (transition.event, transition.old, transition.new) == (event, state, expected)
    assert record.state is expected
    refreshed = event in REFRESHING_EVENTS
    assert record.last_update_ms == (1000 if refreshed else 100)
    assert record.timeout_ms == (7 if refreshed else 50)


def test_the_table_itself() -> None:
    """What the module docstring promises, pair by pair."""
    alive, expired, gone = BrokerState.ALIVE, BrokerState.EXPIRED, BrokerState.UNREGISTERED
    ev = LivenessEvent
    assert {
        (gone, ev.REGISTER): alive,
        (expired, ev.REGISTER): alive,
        (alive, ev.REGISTER): alive,
        (alive, ev.HEARTBEAT): alive,
        (alive, ev.TIMEOUT): expired,
        (alive, ev.CONNECTION_CLOSED): gone,
        (alive, ev.UNREGISTER): gone,
    } == TRANSITIONS
    assert {ev.REGISTER, ev.HEARTBEAT} == REFRESHING_EVENTS


def test_joined_and_left() -> None:
    record = Liveness()
    joined = record.apply(LivenessEvent.REGISTER, 0)
    assert joined is not None and joined.joined and not joined.left
    again = record.apply(LivenessEvent.REGISTER, 1)
    assert again is not None and not again.joined and not again.left
    left = record.apply(LivenessEvent.TIMEOUT, 2)
    assert left is not None and left.left and left.new is BrokerState.EXPIRED


def test_due_uses_the_java_test_and_the_registered_timeout() -> None:
    record = Liveness()
    record.apply(LivenessEvent.REGISTER, 1000, timeout_ms=500)
    assert record.deadline_ms == 1500
    assert not record.is_due(1500)  # last + timeout < now, strictly
    assert record.is_due(1501)
    record.apply(LivenessEvent.REGISTER, 1400)  # no timeout sent: keeps 500
    assert record.timeout_ms == 500 and not record.is_due(1800)


def test_table_tracks_only_live_addresses() -> None:
    clock = FakeClock()
    table = LivenessTable(clock, default_timeout_ms=100)
    assert table.apply("a:1", LivenessEvent.HEARTBEAT) is None  # unknown broker: ignored
    assert "a:1" not in table
    table.apply("a:1", LivenessEvent.REGISTER)
    clock.now += 10
    table.apply("b:1", LivenessEvent.REGISTER, timeout_ms=30)
    clock.now += 10
    table.apply("c:1", LivenessEvent.REGISTER)
    assert set(table) == {"a:1", "b:1", "c:1"} and len(table) == 3
    assert table.state("a:1") is BrokerState.ALIVE
    assert table.due(START_MS + 40) == []
    assert table.due(START_MS + 41) == ["b:1"]
    # b's deadline (START+40) passes before a's (START+100); c's is START+120
    assert table.due(START_MS + 101) == ["b:1", "a:1"]
    record = table.get("a:1")
    assert record is not None and record.last_update_ms == START_MS
    record.last_update_ms = 0  # a copy: the table is unchanged
    assert table.due(START_MS + 50) == ["b:1"]

    gone = table.apply("b:1", LivenessEvent.TIMEOUT)
    assert gone is not None and gone.new is BrokerState.EXPIRED
    assert "b:1" not in table and table.state("b:1") is BrokerState.UNREGISTERED
    assert table.apply("b:1", LivenessEvent.TIMEOUT) is None
    back = table.apply("b:1", LivenessEvent.REGISTER)
    assert back is not None and back.old is BrokerState.UNREGISTERED and back.joined
    closed = table.apply("c:1", LivenessEvent.CONNECTION_CLOSED)
    assert closed is not None and closed.new is BrokerState.UNREGISTERED
    assert set(table) == {"a:1", "b:1"}
