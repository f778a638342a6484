"""A fan-out batch's stored properties and fan-outs: the compiled ``lmq_offset_props``
writes the same bytes and builds the same fan-outs as its twin, which are each
message's properties with ``INNER_MULTI_QUEUE_OFFSET`` appended as RocketMQ writes it."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.formats.properties import decode_properties
from tidemq.store import lmq_props
from tidemq.store.lmq_props import offset_props, py_offset_props

_HEAD = b"INNER_MULTI_QUEUE_OFFSET\x01"
_NAMES = st.text(string.ascii_letters + string.digits + "%_|-", min_size=1, max_size=20)
_OFFSETS = st.integers(0, 2**63 - 1) | st.integers(0, 300) | st.integers(-(2**63), -1)
_PROPS = st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=8),
                         st.text(string.ascii_letters + string.digits, min_size=1, max_size=12),
                         max_size=4)


def _props(pairs: dict[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs.items()).encode()


@settings(deadline=None, max_examples=300)
@given(st.lists(st.tuples(st.lists(_NAMES, max_size=6), _PROPS), max_size=30), st.data())
def test_compiled_and_twin_write_each_messages_offsets(
        messages: list[tuple[list[str], dict[str, str]]], data: st.DataObject) -> None:
    targets = [names for names, _ in messages]
    props = [_props(pairs) for _, pairs in messages]
    offsets = data.draw(st.lists(_OFFSETS, min_size=sum(map(len, targets)),
                                 max_size=sum(map(len, targets))))
    want = py_offset_props(targets, props, offsets, _HEAD)
    assert offset_props(targets, props, offsets, _HEAD) == want
    assert offset_props(tuple(map(tuple, targets)), tuple(props), tuple(offsets),
                        _HEAD) == want
    stored, fan = want
    at = 0
    for names, pairs, raw, f in zip(targets, (p for _, p in messages), stored, fan,
                                    strict=True):
        if not names:
            assert f is None and raw == _props(pairs)
            continue
        mine = tuple(offsets[at:at + len(names)])
        at += len(names)
        assert f == (tuple(names), mine)
        assert decode_properties(raw) == {
            **pairs, "INNER_MULTI_QUEUE_OFFSET": ",".join(map(str, mine))}


def test_lists_that_do_not_pair_are_refused() -> None:
    for build in (offset_props, py_offset_props):
        with pytest.raises(ValueError, match="2 target lists but 1 properties"):
            build([["a"], ["b"]], [b""], [0, 1], _HEAD)
        with pytest.raises(ValueError, match="3 LMQ targets but 2 offsets"):
            build([["a", "b"], ["c"]], [b"", b""], [0, 1], _HEAD)
        with pytest.raises(TypeError, match="properties are not bytes"):
            build([["a"]], ["x"], [0], _HEAD)
        with pytest.raises(TypeError):
            build([["a"]], [b""], ["0"], _HEAD)
        with pytest.raises(TypeError):
            build([["a"]], [b""], [1.0], _HEAD)


def test_offsets_of_other_integer_types_are_written_as_numbers() -> None:
    """What has ``__index__`` (numpy's integers, a bool) is written as its number."""
    class Seven:
        def __index__(self) -> int:
            return 7

    seven = Seven()
    for build in (offset_props, py_offset_props):
        stored, fan = build([["a", "b"]], [b"k\x01v\x02"], [True, seven], _HEAD)
        assert stored == [b"k\x01v\x02INNER_MULTI_QUEUE_OFFSET\x011,7\x02"]
        assert fan == [(("a", "b"), (True, seven))]


class _Clearing:
    """An offset whose conversion empties the list it is read from."""

    def __init__(self, offsets: list[object], value: int) -> None:
        self.offsets, self.value = offsets, value

    def __index__(self) -> int:
        self.offsets.clear()
        self.offsets.extend(range(10**9, 10**9 + 40))
        return self.value


def test_the_compiled_call_reads_the_offsets_given_even_when_one_changes_their_list() -> None:
    c = compiled()
    targets = [[f"%LMQ%q{i:03d}" for i in range(j, j + 4)] for j in range(0, 40, 4)]
    offsets: list[object] = list(range(40))
    clearing = _Clearing(offsets, 5)
    offsets[0] = clearing
    stored, fan = c.lmq_offset_props(targets, [b""] * 10, offsets, _HEAD)
    assert stored[0] == _HEAD + b"5,1,2,3\x02"
    assert stored[9] == _HEAD + b"36,37,38,39\x02"
    assert fan[0] == (tuple(targets[0]), (clearing, 1, 2, 3))


def test_the_compiled_call_is_used() -> None:
    """Where the C module is built the appender takes it; a silent fallback would hide
    a slower send path."""
    compiled()
    assert lmq_props.NATIVE_OFFSET_PROPS
    assert lmq_props.offset_props is not lmq_props.py_offset_props
