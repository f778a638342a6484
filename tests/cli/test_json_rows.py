"""A JSON array written a row at a time reads as, and is the same text as, the whole
list dumped at once; an output cut short by an error before any row is empty."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.cli.json_rows import JsonRows

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=10)


@given(rows=st.lists(_VALUES, max_size=6))
def test_rows_written_one_by_one_are_the_list_dumped_at_once(rows: list[Any]) -> None:
    out = io.StringIO()
    writer = JsonRows(out)
    for row in rows:
        writer.add(row)
    writer.close()
    assert out.getvalue() == json.dumps(rows, indent=2) + "\n"
    assert json.loads(out.getvalue()) == rows


def test_an_output_cut_short_ends_the_rows_written_and_is_empty_without_any() -> None:
    out = io.StringIO()
    writer = JsonRows(out)
    writer.add({"a": 1})
    writer.close(whole=False)  # the rows written still read as an array
    assert json.loads(out.getvalue()) == [{"a": 1}]
    empty = io.StringIO()
    JsonRows(empty).close(whole=False)
    assert empty.getvalue() == ""


def test_as_a_context_manager_it_closes_whole_unless_an_exception_ends_the_block() -> None:
    done = io.StringIO()
    with JsonRows(done):
        pass
    assert done.getvalue() == "[]\n"
    cut = io.StringIO()
    with pytest.raises(ValueError), JsonRows(cut) as rows:
        rows.add({"a": 1})
        raise ValueError("a damaged file")
    assert json.loads(cut.getvalue()) == [{"a": 1}]
    empty = io.StringIO()
    with pytest.raises(ValueError), JsonRows(empty):
        raise ValueError("before any row")
    assert empty.getvalue() == ""
