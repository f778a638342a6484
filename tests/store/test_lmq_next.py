"""The appender's next LMQ offsets in two generations: every offset handed out is the one
an unbounded map would hand out, and the map stays bounded while dispatch keeps up."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.store.lmq_next import LmqNextOffsets

NAMES = [f"%LMQ%{i}" for i in range(40)]

#: A run: each step puts a record naming some LMQs, then lets dispatch apply some of the
#: records in flight (in log order).
steps = st.lists(st.tuples(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5,
                                    unique=True),
                           st.integers(0, 3)), min_size=1, max_size=120)


@given(steps, st.integers(1, 12))
def test_offsets_match_an_unbounded_map(plan: list[tuple[list[str], int]], limit: int) -> None:
    nexts = LmqNextOffsets(limit)
    truth: dict[str, int] = {}  # what an unbounded map hands out
    store: dict[str, int] = {}  # the LMQ store: max offsets of what is dispatched
    in_flight: list[tuple[int, dict[str, int]]] = []  # (record end, next offsets)
    dispatched = end = 0

    def store_max(names: Iterable[str]) -> dict[str, int]:
        return {name: store.get(name, 0) for name in names}

    for names, applied in plan:
        young = nexts.young
        missing = [name for name in names if name not in young]
        found = nexts.older(missing, store_max) if missing else {}
        offsets = [young[name] if name in young else found[name] for name in names]
        assert offsets == [truth.get(name, 0) for name in names]
        assigned = {name: at + 1 for name, at in zip(names, offsets, strict=True)}
        truth.update(assigned)
        end += 10
        young.update(assigned)
        in_flight.append((end, assigned))
        for _ in range(min(applied, len(in_flight))):
            dispatched, done = in_flight.pop(0)
            store.update(done)
        before = len(nexts.young)
        nexts.age(dispatched, end)
        if not in_flight:  # dispatch has kept up: the young generation is bounded
            assert len(nexts.young) <= limit
            # and the older one is gone: all that is left is what young held (sealed
            # now if it was full)
            assert len(nexts) == before


def test_a_popped_name_is_gone_from_both_generations() -> None:
    nexts = LmqNextOffsets(2)
    nexts.young.update({"%LMQ%a": 3, "%LMQ%b": 1})
    nexts.age(0, 100)  # sealed: a and b
    nexts.set("%LMQ%a", 4)
    assert nexts.get("%LMQ%a") == 4 and nexts.get("%LMQ%b") == 1 and len(nexts) == 3
    assert nexts.pop("%LMQ%a") == 4
    assert nexts.get("%LMQ%a") is None
    assert nexts.pop("%LMQ%b") == 1 and nexts.pop("%LMQ%b") is None and len(nexts) == 0


def test_sealed_generation_is_kept_until_dispatch_passes_it() -> None:
    nexts = LmqNextOffsets(1)
    nexts.set("%LMQ%a", 1)
    nexts.age(0, 50)  # a sealed at 50
    nexts.set("%LMQ%b", 1)
    nexts.age(49, 60)  # dispatch has not passed 50: a must stay, b stays young
    assert nexts.get("%LMQ%a") == 1 and nexts.young == {"%LMQ%b": 1}
    nexts.set("%LMQ%c", 1)
    nexts.age(50, 70)  # now it has: a is forgotten, b and c sealed at 70
    assert nexts.get("%LMQ%a") is None and nexts.young == {}
    assert nexts.older(["%LMQ%a", "%LMQ%b"], lambda names: dict.fromkeys(names, 9)) == {
        "%LMQ%a": 9, "%LMQ%b": 1}


def test_sealed_generation_is_dropped_once_dispatch_passes_it() -> None:
    nexts = LmqNextOffsets(2)
    nexts.young.update({"%LMQ%a": 3, "%LMQ%b": 1})
    nexts.age(0, 50)  # a and b sealed at 50
    nexts.set("%LMQ%c", 1)
    nexts.age(50, 60)  # dispatch passed 50; young (c) is not full and stays
    assert nexts.generations() == ({"%LMQ%c": 1}, {})
    asked: list[list[str]] = []

    def store(names: Iterable[str]) -> dict[str, int]:
        asked.append(list(names))
        return dict.fromkeys(asked[-1], 7)

    assert nexts.older(["%LMQ%a"], store) == {"%LMQ%a": 7} and asked == [["%LMQ%a"]]


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LmqNextOffsets(0)
