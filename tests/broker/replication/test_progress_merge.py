"""How a returning master merges a replica's progress: offsets only move forward, the
later timer checkpoint wins whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.replication.progress_merge import newer_timer, raised_levels, raised_offsets
from tidemq.broker.timers import TimerCheckpoint

TABLES = st.dictionaries(st.sampled_from(["T@g1", "T@g2", "U@g1"]),
                         st.dictionaries(st.integers(0, 3), st.integers(0, 50), max_size=4),
                         max_size=3)
LEVELS = st.dictionaries(st.integers(1, 18), st.integers(0, 50), max_size=5)
CHECKPOINTS = st.builds(TimerCheckpoint, st.integers(0, 9), st.integers(0, 9),
                        st.integers(0, 9))


def test_the_larger_offset_of_each_queue_wins() -> None:
    mine = {"T@g": {0: 10, 1: 30}}
    theirs = {"T@g": {0: 20, 1: 25, 2: 5}, "U@g": {0: 1}}
    assert raised_offsets(mine, theirs) == {("T@g", 0): 20, ("T@g", 2): 5, ("U@g", 0): 1}


@given(TABLES, TABLES)
def test_merged_offsets_are_the_maximum_of_both_and_never_lower(
        mine: dict[str, dict[int, int]], theirs: dict[str, dict[int, int]]) -> None:
    merged = {key: dict(queues) for key, queues in mine.items()}
    for (key, queue_id), offset in raised_offsets(mine, theirs).items():
        assert offset > mine.get(key, {}).get(queue_id, -1)
        merged.setdefault(key, {})[queue_id] = offset
    for table in (mine, theirs):
        for key, queues in table.items():
            for queue_id, offset in queues.items():
                assert merged[key][queue_id] >= offset
    for key, queues in merged.items():
        for queue_id, offset in queues.items():
            assert offset in (mine.get(key, {}).get(queue_id), theirs.get(key, {}).get(queue_id))


@given(LEVELS, LEVELS)
def test_delay_levels_only_move_forward(mine: dict[int, int], theirs: dict[int, int]) -> None:
    raised = raised_levels(mine, theirs)
    merged = {**mine, **raised}
    for level, offset in theirs.items():
        assert merged.get(level, 0) >= offset
    for level, offset in mine.items():
        assert merged[level] == max(offset, theirs.get(level, 0))


def test_the_later_timer_frontier_wins_whole() -> None:
    master = TimerCheckpoint(enqueue_offset=9, frontier_ms=100, scan_offset=4)
    replica = TimerCheckpoint(enqueue_offset=5, frontier_ms=200, scan_offset=5)
    # not (9, 200, ...): entries 5..8 due in (100, 200] were delivered by nobody
    assert newer_timer(master, replica) == replica
    assert newer_timer(replica, master) is None


@given(CHECKPOINTS, CHECKPOINTS)
def test_a_timer_checkpoint_is_never_mixed(mine: TimerCheckpoint,
                                           theirs: TimerCheckpoint) -> None:
    taken = newer_timer(mine, theirs)
    assert taken is None or taken is theirs
    assert (taken is not None) == (theirs.frontier_ms > mine.frontier_ms)
