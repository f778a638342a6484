"""The pure planning functions of :mod:`tidemq.client.logical_admin` (no cluster)."""

from __future__ import annotations

import dataclasses

import pytest

from tidemq.client.logical_admin import (
    plan_commit,
    plan_create,
    plan_migration,
    plan_resize,
    writable,
)
from tidemq.formats.logical_mapping import SegmentState, TopicMapping


def seal(mapping: TopicMapping, lq: int, end: int) -> TopicMapping:
    """What SEAL_LOGICAL_QUEUE does on the broker: the open segment ends at ``end``."""
    segs = mapping.queues[lq]
    i = next(i for i, s in enumerate(segs) if s.state is SegmentState.NORMAL)
    sealed = dataclasses.replace(segs[i], physical_end=end, state=SegmentState.READONLY)
    return mapping.replace(lq, (*segs[:i], sealed, *segs[i + 1:]), mapping.epoch + 1)


def migrate(mapping: TopicMapping, lq: int, target: str, end: int) -> TopicMapping:
    planned = plan_migration(mapping, lq, target)
    assert planned is not None and planned.epoch > mapping.epoch
    committed = plan_commit(seal(planned, lq, end), lq)
    assert committed.epoch > planned.epoch
    return committed


def test_create_spreads_round_robin_with_queues_per_broker() -> None:
    m = plan_create("T", 5, ["a", "b"])
    assert [(m.queues[i][0].broker, m.queues[i][0].queue_id) for i in range(5)] == [
        ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)]
    assert writable(m) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        plan_create("T", 0, ["a"])


def test_migration_is_contiguous_and_never_shares_a_physical_queue() -> None:
    m = plan_create("T", 2, ["a", "b"])
    seen = {(s.broker, s.queue_id) for segs in m.queues.values() for s in segs}
    end = 0
    for i, target in enumerate(["b", "c", "a", "b", "c", "a", "b", "c", "a", "b"]):
        end += 7
        m = migrate(m, 0, target, 7)
        segs = m.queues[0]
        assert [s.state for s in segs[:-1]] == [SegmentState.READONLY] * (i + 1)
        assert segs[-1].state is SegmentState.NORMAL and segs[-1].broker == target
        assert segs[-1].logical_start == end  # 7 messages per segment, no gap
        new = (segs[-1].broker, segs[-1].queue_id)
        assert new not in seen  # a readable queue is never written again
        seen.add(new)
    assert plan_migration(m, 0, "b") is None  # already there


def test_an_expired_queue_of_the_target_is_reused_from_its_end() -> None:
    m = migrate(plan_create("T", 1, ["a"]), 0, "b", 10)
    old = m.queues[0][0]
    m = m.replace(0, (dataclasses.replace(old, state=SegmentState.EXPIRED), m.queues[0][1]),
                  m.epoch + 1)
    planned = plan_migration(m, 0, "a")
    assert planned is not None
    new = planned.queues[0][-1]
    assert (new.broker, new.queue_id, new.physical_start) == ("a", 0, 10)  # scenario (c)
    assert plan_migration(planned, 0, "c") is None  # one pending target at a time


def test_resize_reopens_sealed_queues_then_adds() -> None:
    m = plan_create("T", 4, ["a", "b"])
    m = seal(seal(m, 3, 5), 2, 0)  # a decrease to 2
    assert writable(m) == [0, 1]
    assert plan_resize(m, 2, ["a", "b"]) is m  # nothing to do
    grown = plan_resize(m, 5, ["a", "b"])
    assert writable(grown) == [0, 1, 2, 3, 4]
    reopened = grown.queues[3]
    assert [s.state for s in reopened] == [SegmentState.READONLY, SegmentState.NORMAL]
    assert reopened[1].logical_start == 5 and reopened[1].queue_id == 2  # a new queue on b
    assert grown.queues[4][0].logical_start == 0 and grown.epoch > m.epoch
