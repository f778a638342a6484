"""A dispatch round's LMQ entry keys: the compiled ``lmq_entry_keys`` builds and sorts
the same keys as its twin, which are the LMQ store's ``E`` keys in RocksDB's order."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.store import lmq_keys
from tidemq.store.lmq_keys import py_sorted_entry_keys, sorted_entry_keys
from tidemq.store.lmq_store import _entry_key

_NAMES = (st.text(string.ascii_letters + string.digits + "%_|-", min_size=1, max_size=40)
          | st.text(min_size=1, max_size=6).filter(lambda t: "\x00" not in t
                                                    and not any(0xD800 <= ord(c) <= 0xDFFF
                                                                for c in t)))
_OFFSETS = st.integers(0, 2**63 - 1) | st.integers(0, 300)


@settings(deadline=None, max_examples=400)
@given(st.lists(st.tuples(st.sampled_from(["%LMQ%a", "%LMQ%ab", "%LMQ%b"]) | _NAMES,
                          _OFFSETS), max_size=60))
def test_the_keys_are_the_stores_in_byte_order(entries: list[tuple[str, int]]) -> None:
    """Names that prefix one another, repeated names and repeated entries (whose order
    must stay the given one: the last put of a key wins in a write batch)."""
    entries += entries[:2]
    names = [n for n, _ in entries]
    offsets = [o for _, o in entries]
    expected_order = sorted(range(len(entries)),
                            key=lambda i: _entry_key(names[i].encode(), offsets[i]))
    expected = ([_entry_key(names[i].encode(), offsets[i]) for i in expected_order],
                expected_order)
    assert py_sorted_entry_keys(names, offsets) == expected
    assert sorted_entry_keys(names, offsets) == expected
    assert sorted_entry_keys(tuple(names), tuple(offsets)) == expected


def test_names_and_offsets_that_do_not_pair_are_refused() -> None:
    for build in (sorted_entry_keys, py_sorted_entry_keys):
        with pytest.raises(ValueError, match="2 names but 1 offsets"):
            build(["%LMQ%a", "%LMQ%b"], [0])


def test_the_compiled_keys_refuse_what_is_not_a_name_or_an_offset() -> None:
    c = compiled()
    with pytest.raises(TypeError):
        c.lmq_entry_keys([b"%LMQ%a"], [0])
    with pytest.raises(TypeError):
        c.lmq_entry_keys(["%LMQ%a"], ["0"])
    with pytest.raises(UnicodeEncodeError):
        c.lmq_entry_keys(["%LMQ%\ud800"], [0])


def test_the_compiled_keys_are_used() -> None:
    """Where the C module is built the dispatch thread takes it; a silent fallback
    would hide a slower dispatcher."""
    compiled()
    assert lmq_keys.NATIVE_ENTRY_KEYS
    assert lmq_keys.sorted_entry_keys is not lmq_keys.py_sorted_entry_keys


class _Clearing:
    """An offset whose conversion empties the list of offsets it is read from and fills
    the freed memory with other numbers."""

    def __init__(self, offsets: list[object], value: int) -> None:
        self.offsets, self.value = offsets, value
        self.junk: list[int] = []

    def __index__(self) -> int:
        n = len(self.offsets)
        self.offsets.clear()
        self.junk = [10**9 + i for i in range(n)]
        return self.value


def test_the_compiled_keys_read_the_offsets_given_even_when_one_changes_their_list() -> None:
    """Converting an offset may run its own code; what it does to the list changes
    neither the keys nor the memory read (the compiled call once read a cleared list's
    freed items)."""
    c = compiled()
    names = [f"%LMQ%q{i:03d}" for i in range(40)]
    offsets: list[object] = [0, *range(1, 40)]
    offsets[0] = _Clearing(offsets, 7)
    assert c.lmq_entry_keys(names, offsets) == py_sorted_entry_keys(names, [7, *range(1, 40)])
