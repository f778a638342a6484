"""A batch's LMQ offsets assigned with C-level maps give what entry-by-entry assignment
gives (the appender's helper for batched fan-out), repeated names included."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.errors import PropertiesTooLarge
from tidemq.formats.properties import MAX_PROPERTIES_BYTES
from tidemq.store.appender import _assign_lmq_offsets

names = st.sampled_from([f"%LMQ%{c}" for c in "abcdefghij"])
targets = st.lists(st.lists(names, max_size=4, unique=True), min_size=1, max_size=12)
Assigned = tuple[list[bytes], list[tuple[tuple[str, ...], tuple[int, ...]] | None],
                 dict[str, int]]


def _entry_by_entry(targets: Sequence[Sequence[str]], props: Sequence[bytes],
                    nexts: dict[str, int], found: dict[str, int]) -> Assigned:
    """The reference: entry by entry, an LMQ named again gets the next offset."""
    assigned: dict[str, int] = {}
    stored: list[bytes] = []
    fan: list[tuple[tuple[str, ...], tuple[int, ...]] | None] = []
    for ns, raw in zip(targets, props, strict=True):
        if not ns:
            stored.append(raw)
            fan.append(None)
            continue
        offsets = []
        for name in ns:
            nxt = assigned.get(name)
            if nxt is None:
                nxt = nexts.get(name)
                if nxt is None:
                    nxt = found[name]
            offsets.append(nxt)
            assigned[name] = nxt + 1
        stored.append(raw + b"INNER_MULTI_QUEUE_OFFSET\x01%s\x02"
                      % ",".join(map(str, offsets)).encode())
        fan.append((tuple(ns), tuple(offsets)))
    return stored, fan, assigned
used = st.dictionaries(names, st.integers(0, 10**6), max_size=6)


@given(targets, used, st.booleans())
def test_per_name_assignment_matches_entry_by_entry(
        plan: list[list[str]], nexts: dict[str, int], distinct: bool) -> None:
    if distinct:  # the usual batch: no LMQ named twice
        seen: set[str] = set()
        kept = []
        for ns in plan:
            kept.append([n for n in ns if n not in seen])
            seen.update(ns)
        plan = kept
    props = [b"UNIQ_KEY\x01%d\x02" % i for i in range(len(plan))]
    stored_in = dict(nexts)
    first_use = {f"%LMQ%{c}": 100 + i for i, c in enumerate("abcdefghij")}
    found = {n: first_use[n] for ns in plan for n in ns if n not in nexts}
    want = _entry_by_entry(plan, props, nexts, found)
    asked: list[set[str]] = []

    def first_uses(names: Iterable[str]) -> dict[str, int]:
        asked.append(set(names))
        return {name: first_use[name] for name in asked[-1]}

    assert _assign_lmq_offsets(plan, props, nexts, first_uses) == want
    assert asked == ([set(found)] if found else [])  # once, for the unknown names only
    assert nexts == stored_in  # published by the caller, after the write
    stored, fan, assigned = want
    for raw, ns, f in zip(stored, plan, fan, strict=True):
        if ns:
            assert f is not None and list(f[0]) == ns
            assert raw.endswith(b"INNER_MULTI_QUEUE_OFFSET\x01%s\x02"
                                % ",".join(map(str, f[1])).encode())
        else:
            assert f is None and b"INNER_MULTI_QUEUE_OFFSET" not in raw
    assert set(assigned) == {n for ns in plan for n in ns}


@pytest.mark.parametrize("repeat", [False, True])
def test_properties_pushed_over_the_limit_raise(repeat: bool) -> None:
    plan = [["%LMQ%a"], ["%LMQ%a" if repeat else "%LMQ%b", "%LMQ%c"]]
    props = [b"k\x01v\x02", b"p\x01" + b"x" * (MAX_PROPERTIES_BYTES - 20) + b"\x02"]
    with pytest.raises(PropertiesTooLarge, match=f"exceed {MAX_PROPERTIES_BYTES}"):
        _assign_lmq_offsets(plan, props, {}, lambda names: dict.fromkeys(names, 0))
