"""The LMQ store's compact table of queue metadata (tidemq.store.lmq_table)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.store.lmq_table import LmqTable

_names = st.sampled_from([f"%LMQ%q{i}" for i in range(12)])
_offset = st.integers(min_value=0, max_value=2**62)
_meta = st.tuples(_offset, st.one_of(st.just(0), _offset), st.one_of(st.just(0), _offset))
_ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.lists(st.tuples(_names, _meta), max_size=6)),
    st.tuples(st.just("clear"), st.just([]))), max_size=30)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(min_value=0, max_value=14), ops=_ops, probe=st.lists(_names))
def test_the_table_answers_as_a_dict_of_its_puts_up_to_its_limit(
        limit: int, ops: list[tuple[str, list[tuple[str, tuple[int, int, int]]]]],
        probe: list[str]) -> None:
    """Each name reads back as its last put, whatever its fields (plain and other
    entries move between the two maps), until the limit: a new name past it is left
    out and reported, a name already held is still replaced."""
    table = LmqTable(limit)
    model: dict[str, tuple[int, int, int]] = {}
    for op, puts in ops:
        if op == "clear":
            table.clear()
            model.clear()
            continue
        fitted = True
        for name, meta in puts:
            if name in model or len(model) < limit:
                model[name] = meta
            else:
                fitted = False
        assert table.put_many([n for n, _m in puts], [m for _n, m in puts]) is fitted
        assert len(table) == len(model)
    for name in [*probe, *model]:
        got = table.get(name)
        assert got == (list(model[name]) if name in model else None)
    if model:  # each get is a new list: a caller may change it in place
        name = next(iter(model))
        got = table.get(name)
        assert got is not None
        got[0] += 1
        assert table.get(name) == list(model[name])


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(min_value=0, max_value=14),
       before=st.lists(st.tuples(st.integers(min_value=0, max_value=30), _meta), max_size=5),
       rows=st.lists(st.tuples(st.integers(min_value=0, max_value=30), _meta), max_size=20,
                     unique_by=lambda row: row[0]))
def test_a_fill_takes_rows_until_the_table_is_full(
        limit: int, before: list[tuple[int, tuple[int, int, int]]],
        rows: list[tuple[int, tuple[int, int, int]]]) -> None:
    """A start's walk: rows of names the table does not hold are taken in order while
    there is room; the answer says how many, and whether that was every row."""
    table = LmqTable(limit)
    table.put_many([f"%LMQ%w{k}" for k, _m in before], [m for _k, m in before])
    held = {f"%LMQ%w{k}": list(m) for k, m in before if table.get(f"%LMQ%w{k}") is not None}
    held_count = len(table)
    taken, seen = table.fill([(f"%LMQ%w{k}", meta) for k, meta in rows
                              if f"%LMQ%w{k}" not in held])
    want: list[tuple[int, tuple[int, int, int]]] = []
    left_out = False
    for k, meta in rows:
        if f"%LMQ%w{k}" in held:
            continue
        if held_count + len(want) == limit:
            left_out = True
            break
        want.append((k, meta))
    assert (taken, seen) == (len(want), not left_out)
    assert len(table) == held_count + taken
    for k, meta in rows:
        name = f"%LMQ%w{k}"
        if name in held:
            assert table.get(name) == held[name]
        elif (k, meta) in want:
            assert table.get(name) == list(meta) and name in table
        else:
            assert table.get(name) is None and name not in table


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        LmqTable(-1)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(min_value=0, max_value=14),
       held=st.lists(st.tuples(_names, _meta), max_size=10),
       round_=st.dictionaries(_names, st.integers(min_value=1, max_value=2**62), max_size=6),
       new=st.booleans())
def test_a_round_advances_plain_queues_and_adds_new_ones_with_room(
        limit: int, held: list[tuple[str, tuple[int, int, int]]], round_: dict[str, int],
        new: bool) -> None:
    """A dispatch round may advance the table's queues in place when each is a plain
    queue moving on (from 0 only to 1), or, when the caller knows it is new, one the
    table lacks taking offset 0 with room left; afterwards each reads back as advanced
    and every other as it was."""
    table = LmqTable(limit)
    table.put_many([n for n, _m in held], [m for _n, m in held])
    model = {name: table.get(name) for name, _m in held}
    model = {name: meta for name, meta in model.items() if meta is not None}
    names, nexts = list(round_), list(round_.values())
    assert table.nexts(names) == [model[n][0] if n in model else None for n in names]
    fresh = [n for n in names if n not in model]
    expected = (all(n in model and model[n][1:] == [0, 0] and round_[n] > model[n][0]
                    and (model[n][0] or round_[n] == 1) for n in names if n in model)
                and (not fresh or (new and len(model) + len(fresh) <= limit
                                   and all(round_[n] == 1 for n in fresh))))
    assert table.advanceable(names, nexts, new=new) is expected
    if expected:
        table.advance(names, nexts)
        model.update((n, [round_[n], 0, 0]) for n in names)
    assert len(table) == len(model)
    for name in {*model, *names}:
        assert table.get(name) == model.get(name)
