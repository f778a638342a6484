"""The committed offsets' JSON, encoded from the live table a slice of keys at a time,
in C where it is built: the bytes of one ``json.dumps`` of the entries the keys name, for
the file's separators and the wire's; the compiled slice the bytes of its twin."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker import offset_json
from tidemq.broker.offset_json import (
    COMPACT,
    SPACED,
    load_offset_json,
    load_table_json,
    offset_json_parts,
    py_offset_entries,
    table_json,
)
from tidemq.formats.record.native import compiled

#: Keys of every kind (quotes, controls, DEL, non-ASCII), queue ids and offsets over the
#: 64 bits too (the compiled encoder leaves such slices to its twin).
key_text = st.text(min_size=1, max_size=12) | st.from_regex(r"[%A-Za-z0-9_@-]{1,12}",
                                                            fullmatch=True)
big = st.integers(-2**63, 2**63 - 1) | st.integers(-2**70, 2**70)
tables = st.dictionaries(key_text, st.dictionaries(big, big, max_size=6), max_size=40)
native_entries = compiled("offset_entries_json")


@given(table=tables, separators=st.sampled_from([SPACED, COMPACT]),
       slice_keys=st.integers(1, 50))
def test_the_slices_make_the_bytes_of_one_dumps(table: dict[str, dict[int, int]],
                                                separators: tuple[str, str],
                                                slice_keys: int) -> None:
    whole = json.dumps({"offsetTable": table}, separators=separators)
    body = b"".join(offset_json_parts(table, list(table), separators, slice_keys=slice_keys))
    assert body == whole.encode()
    assert json.loads(body) == {"offsetTable": {
        k: {str(q): o for q, o in v.items()} for k, v in table.items()}}


@given(table=tables, data=st.data(), separators=st.sampled_from([SPACED, COMPACT]))
def test_the_compiled_slice_writes_its_twins_bytes(table: dict[str, dict[int, int]],
                                                   data: st.DataObject,
                                                   separators: tuple[str, str]) -> None:
    if native_entries is None:
        pytest.skip("the compiled module is not built")
    keys = data.draw(st.lists(st.sampled_from([*table, "gone@g"]) if table
                              else st.just("gone@g"), max_size=20))
    start, stop = data.draw(st.integers(0, 22)), data.draw(st.integers(0, 22))
    item_sep, key_sep = (sep.encode() for sep in separators)
    out = native_entries(table, keys, start, stop, item_sep, key_sep)
    twin = py_offset_entries(table, keys, start, stop, item_sep, key_sep)
    assert out is None or out == twin
    plain = all(k.isascii() and k.isprintable() and '"' not in k and "\\" not in k
                and all(-2**63 <= n < 2**63 for q in table[k].items() for n in q)
                for k in keys[start:stop] if k in table)
    assert (out is not None) == plain


def test_keys_no_longer_in_the_table_are_left_out() -> None:
    table = {"T@g": {0: 1}, "U@g": {2: 3}}
    body = b"".join(offset_json_parts(table, ["gone@g", "T@g", "gone@h", "U@g"], COMPACT,
                                      slice_keys=1))
    assert body == b'{"offsetTable":{"T@g":{"0":1},"U@g":{"2":3}}}'


def test_the_file_and_the_wire_keep_their_separators() -> None:
    table = {"T@g": {0: 1, 10: 2, 2: 3}}
    assert b"".join(offset_json_parts(table, ["T@g"])) == \
        b'{"offsetTable": {"T@g": {"0": 1, "10": 2, "2": 3}}}'
    assert b"".join(offset_json_parts(table, ["T@g"], COMPACT)) == \
        b'{"offsetTable":{"T@g":{"0":1,"10":2,"2":3}}}'
    assert b"".join(offset_json_parts({}, [])) == b'{"offsetTable": {}}'


values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


@given(name=st.text(max_size=20), table=st.dictionaries(st.text(max_size=12), values,
                                                        max_size=30),
       others=st.dictionaries(st.text(max_size=20), values, max_size=3),
       separators=st.sampled_from([SPACED, COMPACT]), slice_keys=st.integers(1, 20))
def test_any_table_beside_other_members_makes_the_bytes_of_one_dumps(
        name: str, table: dict[str, Any], others: dict[str, Any],
        separators: tuple[str, str], slice_keys: int) -> None:
    whole = json.dumps({**others, name: table}, sort_keys=True, separators=separators)
    assert table_json(name, table, others, separators, slice_keys=slice_keys) == \
        whole.encode()


@given(table=tables, separators=st.sampled_from([SPACED, COMPACT]),
       extra=st.dictionaries(st.sampled_from(["a", "dataVersion"]), st.integers(), max_size=2))
def test_a_body_read_a_key_at_a_time_is_one_loads(table: dict[str, dict[str, int]],
                                                  separators: tuple[str, str],
                                                  extra: dict[str, int]) -> None:
    body = json.dumps({"offsetTable": table, **extra}, separators=separators).encode()
    assert load_offset_json(body) == json.loads(body)


@given(table=st.dictionaries(st.text(max_size=8), values, max_size=20),
       others=st.dictionaries(st.text(max_size=8), values, max_size=3),
       name=st.text(max_size=12))
def test_any_table_read_an_entry_at_a_time_is_one_loads(
        table: dict[str, Any], others: dict[str, Any], name: str) -> None:
    body = json.dumps({**others, name: table}).encode()
    assert load_table_json(body, name) == json.loads(body)


@given(body=st.binary(max_size=40) | st.sampled_from([
    b'{"offsetTable": {"a@b": {"0": NaN}}}', b'{"offsetTable": null}', b"[]", b"{}",
    b'{"offsetTable": []}', b'{"offsetTable": {"a@b": 1}, "x": Infinity}', b"  ",
    b'{"offsetTable": {"a@b": {"0": 123456789012345678901234567890}}}']))
def test_any_body_reads_as_one_loads_does(body: bytes) -> None:
    try:
        expected: Any = json.loads(body)
    except ValueError:
        expected = ValueError
    try:
        got: Any = load_offset_json(body)
    except ValueError:
        got = ValueError
    assert got == expected or (got != got and expected != expected)


def test_no_call_sorts_more_than_ten_slices_of_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {f"T{i}@g": {"0": i} for i in range(95)}
    seen: list[int] = []

    def counted(keys: list[str]) -> list[str]:
        seen.append(len(keys))
        return sorted(keys)

    monkeypatch.setattr(offset_json, "sorted", counted, raising=False)
    body = table_json("offsetTable", table, separators=COMPACT, slice_keys=2)
    assert body == json.dumps({"offsetTable": table}, sort_keys=True,
                              separators=COMPACT).encode()
    assert seen and max(seen) <= 20


def test_the_body_is_joined_once() -> None:
    """A copy of the whole body holds the interpreter as long as it takes: the slices'
    bytes are joined once, not copied whole step after step (what the copies would
    leave alive at once is traced)."""
    table = {f"T{i}@g{i % 97}": {str(q): q * 1000 for q in range(8)} for i in range(20000)}
    tracemalloc.start()
    try:
        body = table_json("offsetTable", table, separators=COMPACT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert body == json.dumps({"offsetTable": table}, sort_keys=True,
                              separators=COMPACT).encode()
    assert peak < 2.5 * len(body)
