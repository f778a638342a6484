"""Spilled columns: what is appended comes back, in order, whatever the chunk size."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.store.spool import SpilledColumns


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1),
                               st.integers(-(2**31), 2**31 - 1)), max_size=60),
       chunk=st.integers(1, 9), read_at=st.integers(0, 60))
def test_columns_come_back_as_appended(rows: list[tuple[int, int]], chunk: int,
                                       read_at: int) -> None:
    """Rows appended one by one, spilled every ``chunk``, read back (also half way, then
    appended to again) as mapped int64 and int32 arrays equal to what went in."""
    with tempfile.TemporaryDirectory() as tmp:
        cols = SpilledColumns(Path(tmp), {"a": "q", "b": "i"}, chunk=chunk)
        for n, (a, b) in enumerate(rows):
            if n == read_at:
                got = cols.arrays()
                assert got["a"].tolist() == [r[0] for r in rows[:n]]
            cols.cols["a"].append(a)
            cols.cols["b"].append(b)
            if cols.full():
                cols.spill()
            assert len(cols) == n + 1
        got = cols.arrays()
        assert got["a"].dtype == np.int64 and got["b"].dtype == np.int32
        assert got["a"].tolist() == [r[0] for r in rows]
        assert got["b"].tolist() == [r[1] for r in rows]
        cols.close()


def test_columns_of_different_lengths_are_refused(tmp_path: Path) -> None:
    cols = SpilledColumns(tmp_path, {"a": "q", "b": "q"})
    cols.cols["a"].append(1)
    with pytest.raises(ValueError, match="column b has 0 rows, expected 1"):
        cols.spill()
    cols.close()
