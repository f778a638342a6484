"""Key-index entries linked into their slots' chains: the compiled loop and its numpy twin
write the same bytes, and both chain as entry-by-entry writes would."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.store import index_links

_ENTRY = struct.Struct(">iqii")


def _both() -> list[Callable[..., int]]:
    fns: list[Callable[..., int]] = [index_links.py_link_entries]
    if index_links.NATIVE:
        fns.append(index_links.link_entries)
    return fns


def test_the_compiled_loop_is_built_and_used() -> None:
    """The C module is built wherever the project runs; a silent fallback would hide a
    slower dispatch thread."""
    _crecords = compiled()
    assert index_links.NATIVE
    assert index_links.link_entries is _crecords.link_index_entries


def _one_by_one(buf: bytearray, slots_at: int, slot_num: int, entries_at: int,
                count_at: int, first: int, hashes: list[int], phys: list[int],
                diffs: list[int]) -> int:
    """The chains written entry by entry, as the format describes them."""
    heads: dict[int, int] = {}
    empty = 0
    for i, (h, p, d) in enumerate(zip(hashes, phys, diffs, strict=True)):
        s = h % slot_num
        if s in heads:
            prev = heads[s]
        else:
            (head,) = struct.unpack_from(">i", buf, slots_at + 4 * s)
            prev = head if 1 <= head < first else 0
            empty += prev == 0
        num = first + i
        heads[s] = num
        _ENTRY.pack_into(buf, entries_at + 20 * num, h, p, d, prev)
    struct.pack_into(">i", buf, count_at, first + len(hashes))
    for s, num in heads.items():
        struct.pack_into(">i", buf, slots_at + 4 * s, num)
    return empty


@st.composite
def _files(draw: st.DrawFn) -> tuple[Any, ...]:
    slot_num = draw(st.integers(1, 40))
    first = draw(st.integers(1, 30))
    n = draw(st.integers(0, 60))
    capacity = first + n + draw(st.integers(0, 3))
    slots_at = 40
    entries_at = slots_at + 4 * slot_num
    buf = bytearray(draw(st.binary(min_size=entries_at + 20 * capacity,
                                   max_size=entries_at + 20 * capacity)))
    # Slot heads of every kind: empty, valid, stale (at or past ``first``), torn (negative).
    for s in range(slot_num):
        head = draw(st.sampled_from([0, 1, first - 1, first, first + n + 5, -3,
                                     draw(st.integers(-2**31, 2**31 - 1))]))
        struct.pack_into(">i", buf, slots_at + 4 * s, head)
    # Few distinct hashes, so that entries of one call share slots.
    hashes = draw(st.lists(st.integers(0, 2**31 - 1) | st.integers(0, 3 * slot_num),
                           min_size=n, max_size=n))
    phys = draw(st.lists(st.integers(0, 2**63 - 1), min_size=n, max_size=n))
    diffs = draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n))
    return buf, slots_at, slot_num, entries_at, 36, first, hashes, phys, diffs


@settings(max_examples=300, deadline=None)
@given(_files())
def test_both_write_what_entry_by_entry_writes(case: tuple[Any, ...]) -> None:
    buf, slots_at, slot_num, entries_at, count_at, first, hashes, phys, diffs = case
    expect = bytearray(buf)
    expect_empty = _one_by_one(expect, slots_at, slot_num, entries_at, count_at, first,
                               hashes, phys, diffs)
    for fn in _both():
        got = bytearray(buf)
        empty = fn(got, slots_at, slot_num, entries_at, count_at, first,
                   np.array(hashes, np.int64), np.array(phys, np.int64),
                   np.array(diffs, np.int64))
        assert (fn.__name__, empty, bytes(got)) == (fn.__name__, expect_empty, bytes(expect))


@pytest.mark.parametrize("fn", _both(), ids=lambda fn: fn.__name__)
@pytest.mark.parametrize(("first", "n", "slot_num", "length"), [
    (0, 1, 4, 1000),  # entry 0 is the null entry
    (1, 10, 4, 40 + 16 + 20 * 10),  # the last entry does not fit
    (1, 1, 400, 200),  # the slot table does not fit
])
def test_what_does_not_fit_is_refused_before_a_byte_is_written(
        fn: Callable[..., int], first: int, n: int, slot_num: int, length: int) -> None:
    buf = bytearray(length)
    ones = np.ones(n, np.int64)
    with pytest.raises(ValueError, match="link_index_entries"):
        fn(buf, 40, slot_num, 40 + 4 * slot_num, 36, first, ones, ones, ones)
    assert buf == bytearray(length)


@pytest.mark.parametrize("fn", _both(), ids=lambda fn: fn.__name__)
def test_columns_of_other_lengths_are_refused(fn: Callable[..., int]) -> None:
    buf = bytearray(40 + 16 + 20 * 10)
    with pytest.raises(ValueError, match="link_index_entries"):
        fn(buf, 40, 4, 56, 36, 1, np.ones(3, np.int64), np.ones(2, np.int64),
           np.ones(3, np.int64))
