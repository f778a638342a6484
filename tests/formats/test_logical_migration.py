"""The migration state machine and the merge of mapping copies
(:mod:`tidemq.formats.logical_migration`): copies taken at any points of one history merge,
in any order, into the newest; rule 1 holds along every history."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.logical_admin import plan_create, plan_migration
from tidemq.formats.logical_mapping import SegmentState, TopicMapping
from tidemq.formats.logical_migration import (
    FOLLOWS,
    MappingConflict,
    MigrationState,
    complete,
    forced_cut,
    merge,
    migration_state,
    plan_commit,
)

BROKERS = ["a", "b", "c"]


def seal(mapping: TopicMapping, lq: int, end: int) -> TopicMapping:
    segs = mapping.queues[lq]
    i = next(i for i, s in enumerate(segs) if s.state is SegmentState.NORMAL)
    sealed = dataclasses.replace(segs[i], physical_end=segs[i].physical_start + end,
                                 state=SegmentState.READONLY)
    return mapping.replace(lq, (*segs[:i], sealed, *segs[i + 1:]), mapping.epoch + 1)


def expire(mapping: TopicMapping, lq: int) -> TopicMapping:
    segs = tuple(dataclasses.replace(s, state=SegmentState.EXPIRED)
                 if s.state is SegmentState.READONLY else s for s in mapping.queues[lq])
    return mapping.replace(lq, segs, mapping.epoch + 1)


def history(ops: list[tuple[int, int, int]], queues: int = 2) -> list[TopicMapping]:
    """Versions of one mapping, each the one before it plus one legal step, chosen from
    ``(kind, lq, n)``: plan, seal, commit or expire -- whichever applies."""
    m = plan_create("T", queues, BROKERS[:2])
    out = [m]
    for kind, which, n in ops:
        lq = which % queues
        state = migration_state(m, lq, m.pending(lq).broker if m.pending(lq) else "")
        if state is MigrationState.PLANNED and kind == 3:  # its broker is unreachable
            leader = m.leader(lq)
            assert leader is not None
            m = forced_cut(m, lq, leader.physical_start + n, m.epoch + 1)
        elif state is MigrationState.PLANNED:
            m = seal(m, lq, n)
        elif state is MigrationState.SEALED:
            m = plan_commit(m, lq, m.epoch + 1)
        elif kind % 2 == 0:
            leader = m.leader(lq)
            target = BROKERS[(BROKERS.index(leader.broker) + 1 + n % 2) % 3] if leader else "a"
            m = plan_migration(m, lq, target) or m
        else:
            m = expire(m, lq)
        if m is not out[-1]:
            out.append(m)
    return out


OPS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 50)),
               max_size=25)


@settings(max_examples=150, deadline=None)
@given(OPS, st.randoms(use_true_random=False))
def test_copies_of_one_history_merge_into_the_newest_in_any_order(
        ops: list[tuple[int, int, int]], rnd: random.Random) -> None:
    versions = history(ops)
    newest = versions[-1]
    copies = [rnd.choice(versions) for _ in range(4)] + [newest]
    rnd.shuffle(copies)
    merged = copies[0]
    for c in copies[1:]:
        merged = merge(merged, c)
    assert merged.queues == newest.queues
    assert merged.epoch == newest.epoch


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_merge_is_commutative_idempotent_and_never_loses_a_fact(
        ops: list[tuple[int, int, int]]) -> None:
    versions = history(ops)
    for a in versions[:: max(1, len(versions) // 4)]:
        for b in versions[-2:]:
            ab, ba = merge(a, b), merge(b, a)
            assert ab == ba
            assert merge(ab, a) == ab and merge(ab, ab) == ab
            for lq, segs in a.queues.items():  # a's facts all survive
                for old, new in zip(segs, ab.queues[lq], strict=False):
                    assert (old.broker, old.queue_id) == (new.broker, new.queue_id)
                    assert new.state is old.state or new.state in _later(old.state)


def _later(state: SegmentState) -> set[SegmentState]:
    out: set[SegmentState] = set()
    todo = set(FOLLOWS[state])
    while todo:
        s = todo.pop()
        out.add(s)
        todo |= FOLLOWS[s] - out
    return out


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_every_step_of_a_history_follows_rule_1(ops: list[tuple[int, int, int]]) -> None:
    versions = history(ops)
    for before, after in itertools.pairwise(versions):
        assert after.epoch > before.epoch
        for lq, segs in before.queues.items():
            now = after.queues[lq]
            assert len(now) >= len(segs)
            for old, new in zip(segs, now, strict=False):
                assert new.state is old.state or new.state in FOLLOWS[old.state]
            assert sum(s.state is SegmentState.NORMAL for s in now) <= 1


def test_the_migration_table_step_by_step() -> None:
    m = plan_create("T", 1, ["a"])
    assert migration_state(m, 0, "b") is MigrationState.IDLE
    planned = plan_migration(m, 0, "b")
    assert planned is not None
    assert migration_state(planned, 0, "b") is MigrationState.PLANNED
    sealed = seal(planned, 0, 7)
    assert migration_state(sealed, 0, "b") is MigrationState.SEALED
    assert sealed.leader(0) is None  # unwritable until the commit
    done = complete(sealed)  # any broker may commit: decided by the sealed end alone
    assert migration_state(done, 0, "b") is MigrationState.COMMITTED
    assert done.leader(0) == dataclasses.replace(planned.queues[0][1], logical_start=7,
                                                 state=SegmentState.NORMAL)
    assert complete(done) is done and complete(planned) is planned
    assert plan_commit(sealed, 0, sealed.epoch + 1) == done  # the admin's commit is the same


def test_forked_copies_conflict_unless_told_to_pick() -> None:
    base = plan_create("T", 1, ["a"])
    to_b, to_c = plan_migration(base, 0, "b"), plan_migration(base, 0, "c")
    assert to_b is not None and to_c is not None
    to_c = dataclasses.replace(to_c, epoch=to_b.epoch + 5)
    with pytest.raises(MappingConflict) as info:
        merge(to_b, to_c)
    assert info.value.lq == 0 and "fork" in info.value.reason
    assert merge(to_b, to_c, strict=False) == merge(to_c, to_b, strict=False)
    assert merge(to_b, to_c, strict=False).queues == to_c.queues  # the higher epoch
    sealed_b = seal(to_b, 0, 3)  # the old leader sealed for the migration to b
    picked = merge(sealed_b, to_c, strict=False)
    assert picked.queues[0][0] == sealed_b.queues[0][0]  # the seal survives the fork
    assert picked.queues[0][1] == to_c.queues[0][1]  # the rest from the higher copy
    assert picked == merge(to_c, sealed_b, strict=False)
    with pytest.raises(MappingConflict, match="physical end"):
        merge(sealed_b, seal(to_b, 0, 4))


def planned_lq0(ops: list[tuple[int, int, int]]) -> TopicMapping:
    """The newest version of a history, then LQ 0 planned to move if it is not already."""
    m = history(ops)[-1]
    if migration_state(m, 0, m.pending(0).broker if m.pending(0) else "") is MigrationState.SEALED:
        m = plan_commit(m, 0, m.epoch + 1)
    if m.pending(0) is None:
        leader = m.leader(0)
        assert leader is not None
        m = plan_migration(m, 0, BROKERS[(BROKERS.index(leader.broker) + 1) % 3]) or m
    return m


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(0, 50), st.integers(0, 50), st.randoms(use_true_random=False))
def test_a_seal_racing_a_forced_cut_merges_to_the_cut_in_any_order(
        ops: list[tuple[int, int, int]], exact: int, known: int, rnd: random.Random) -> None:
    """The old leader sealed at its exact end and died before the admin tool heard it; the
    tool cut at the end the others knew and committed the target there. Every copy --
    the planned one, the dead broker's sealed one, the commit it made at its own end
    when it came back and no peer answered (or that it pushed to a peer before the cut
    reached that peer), the cut, the committed cut -- merges, in any order and any number
    of times, into the committed cut."""
    planned = planned_lq0(ops)
    leader = planned.leader(0)
    assert leader is not None and planned.pending(0) is not None
    sealed = seal(planned, 0, exact)
    own_commit = complete(sealed)
    cut = forced_cut(planned, 0, leader.physical_start + known, planned.epoch + 1)
    committed = complete(cut)
    assert committed.leader(0) is not None
    assert committed.leader(0).logical_start == leader.logical_start + known
    copies = [planned, sealed, own_commit, cut, committed,
              rnd.choice([planned, sealed, own_commit, cut])]
    rnd.shuffle(copies)
    merged = copies[0]
    for c in copies[1:]:
        merged = merge(merged, c)
        assert merge(c, merged) == merge(merged, c)
    assert merged.queues == committed.queues and merged.epoch == committed.epoch
    assert merge(merged, sealed) == merged  # idempotent
    assert merge(merged, own_commit) == merged
    assert complete(merged) == merged
    # A peer that took the old leader's commit and then the cut is consistent at once.
    peer = merge(own_commit, cut)
    assert complete(peer).queues == committed.queues


def test_a_forced_cut_seals_at_the_known_end_and_commits_there() -> None:
    planned = plan_migration(plan_create("T", 1, ["a"]), 0, "b")
    assert planned is not None
    cut = forced_cut(planned, 0, 9, planned.epoch + 1)
    old = cut.queues[0][0]
    assert (old.state, old.physical_end, old.forced) == (SegmentState.READONLY, 9, True)
    assert migration_state(cut, 0, "b") is MigrationState.SEALED
    assert complete(cut).leader(0) is not None and complete(cut).leader(0).logical_start == 9
    assert forced_cut(cut, 0, 12, cut.epoch + 1) is cut  # nothing open: nothing to cut
    below = forced_cut(planned, 0, -1, planned.epoch + 1)  # nothing known: an empty segment
    assert below.queues[0][0].physical_end == 0
    two = forced_cut(planned, 0, 4, planned.epoch + 1)
    with pytest.raises(MappingConflict, match="physical end"):  # two admin tools racing
        merge(cut, two)
    assert TopicMapping.from_json(json.loads(json.dumps(cut.to_json()))) == cut
    assert "forced" not in planned.to_json()["queues"]["0"][0]


def test_a_newer_incarnation_wins_whole() -> None:
    old = plan_create("T", 2, ["a"])
    old = seal(old, 0, 5)
    new = dataclasses.replace(plan_create("T", 2, ["a"]), created=old.created + 1,
                              epoch=old.epoch + 1)
    assert merge(old, new) == new and merge(new, old) == new


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_the_json_form_round_trips(ops: list[tuple[int, int, int]]) -> None:
    for m in history(ops):
        text = json.dumps(m.to_json())
        assert TopicMapping.from_json(json.loads(text)) == m
