"""Retention's lowest committed offset per queue, gathered a slice of the offsets table's
keys at a time, in C where it is built: the compiled slice gives its twin's map."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.offset_lowest import lowest_offsets, py_lowest_offsets
from tidemq.formats.record.native import compiled

#: Keys with and without '@' (and with several), of any text; offsets over 64 bits too.
key_text = st.text(max_size=10) | st.from_regex(r"[%A-Za-z0-9_@-]{0,12}", fullmatch=True)
big = st.integers(-2**63, 2**63 - 1) | st.integers(-2**70, 2**70)
tables = st.dictionaries(key_text, st.dictionaries(st.integers(-3, 40), big, max_size=6),
                         max_size=30)
native = compiled("lowest_offsets")


def _whole(table: dict[str, dict[int, int]]) -> dict[tuple[str, int], int]:
    """The lowest offset of each queue, by its definition."""
    out: dict[tuple[str, int], list[int]] = {}
    for key, queues in table.items():
        for queue_id, offset in queues.items():
            out.setdefault((key.split("@", 1)[0], queue_id), []).append(offset)
    return {k: min(v) for k, v in out.items()}


@given(table=tables, data=st.data())
def test_the_compiled_slice_gives_its_twins_map(table: dict[str, dict[int, int]],
                                                data: st.DataObject) -> None:
    if native is None:
        pytest.skip("the compiled module is not built")
    keys = data.draw(st.lists(st.sampled_from([*table, "gone@g"]) if table
                              else st.just("gone@g"), max_size=25))
    start, stop = data.draw(st.integers(-2, 27)), data.draw(st.integers(-2, 27))
    # a map already holding some queues, lower and higher than the table's
    seed = data.draw(st.dictionaries(st.tuples(key_text, st.integers(-3, 40)), big,
                                     max_size=5))
    got, twin = dict(seed), dict(seed)
    topics: dict[str, str] = {}
    native(table, keys, start, stop, got, topics)
    py_lowest_offsets(table, keys, start, stop, twin, {})
    assert got == twin
    # the keys it added share the topics it kept, one object each
    assert all(topics[t] is t for t, q in got if (t, q) not in seed and t in topics)
    assert list(got) == list(twin)  # and in the same order


@given(table=tables, slice_keys=st.integers(1, 7))
def test_slices_make_the_lowest_offset_of_every_queue(table: dict[str, dict[int, int]],
                                                      slice_keys: int) -> None:
    keys = list(table)
    out: dict[tuple[str, int], int] = {}
    topics: dict[str, str] = {}
    for start in range(0, len(keys), slice_keys):
        lowest_offsets(table, keys, start, start + slice_keys, out, topics)
    assert out == _whole(table)


def test_a_key_that_is_not_str_is_refused_by_both() -> None:
    table: dict[object, dict[int, int]] = {1: {0: 1}}
    with pytest.raises((TypeError, AttributeError)):
        py_lowest_offsets(table, [1], 0, 1, {}, {})  # type: ignore[arg-type, list-item]
    if native is not None:
        with pytest.raises(TypeError, match="a key is int"):
            native(table, [1], 0, 1, {}, {})
