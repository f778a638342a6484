"""The committed offsets' JSON, encoded a slice at a time: the same bytes as one
``json.dumps`` of the whole table, for the file's separators and the wire's."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.offset_json import COMPACT, SPACED, offset_table_json

tables = st.dictionaries(
    st.text(min_size=1, max_size=12),
    st.dictionaries(st.integers(0, 1024).map(str), st.integers(0, 2**63 - 1), max_size=6),
    max_size=40)


@given(table=tables, separators=st.sampled_from([SPACED, COMPACT]),
       slice_keys=st.integers(1, 50))
def test_the_slices_make_the_bytes_of_one_dumps(table: dict[str, dict[str, int]],
                                                separators: tuple[str, str],
                                                slice_keys: int) -> None:
    whole = json.dumps({"offsetTable": table}, sort_keys=True, separators=separators)
    assert offset_table_json(table, separators, slice_keys=slice_keys) == whole.encode()
    assert json.loads(offset_table_json(table, separators, slice_keys=slice_keys)) == {
        "offsetTable": table}


def test_the_file_and_the_wire_keep_their_separators() -> None:
    table = {"T@g": {"0": 1, "10": 2, "2": 3}}
    assert offset_table_json(table) == b'{"offsetTable": {"T@g": {"0": 1, "10": 2, "2": 3}}}'
    assert offset_table_json(table, COMPACT) == b'{"offsetTable":{"T@g":{"0":1,"10":2,"2":3}}}'
    assert offset_table_json({}) == b'{"offsetTable": {}}'
