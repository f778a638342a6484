"""The key index fed column-wise (:class:`KeyColumns`, ``put_key_columns``) against the
per-record path and against a per-entry reference of docs/reference/store.md §7.1: the same file
bytes, the same lookups."""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.formats.hashing import index_hash
from tidemq.store.index import (
    IndexFile,
    KeyIndex,
    index_file_size,
)
from tidemq.store.index_format import ENTRY_DTYPE, HEADER_SIZE, INT_MAX
from tidemq.store.index_keys import KeyColumns, column_hashes
from tidemq.store.layout import StoreLayout
from tidemq.store.mapped_file import MappedFile

T0 = 1_700_000_000_000
PROPS = settings(max_examples=200, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])

_TOPICS = st.text(string.ascii_letters + string.digits + "%_|-", min_size=1, max_size=20)
#: Extra (KEYS) values: any text but the separator, non-ASCII included.
_EXTRA = st.lists(st.text(st.characters(blacklist_characters=" "), min_size=1, max_size=12),
                  max_size=3).map(tuple)


def _uniq(rows: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(rows), np.uint8).reshape(len(rows), -1)


@st.composite
def _columns(draw: st.DrawFn, max_rows: int = 12) -> KeyColumns:
    n = draw(st.integers(1, max_rows))
    extra = draw(_EXTRA)
    if extra and draw(st.booleans()):
        return KeyColumns(None, extra, n)
    width = draw(st.integers(1, 40))
    rows = draw(st.lists(st.binary(min_size=width, max_size=width).map(
        lambda b: bytes(c & 0x7F for c in b)), min_size=n, max_size=n))
    if draw(st.booleans()):  # a strided view, as the send path hands it over
        padded = [b"<" + r + b">" for r in rows]
        return KeyColumns(_uniq(padded)[:, 1:-1], extra, n)
    return KeyColumns(_uniq(rows), extra, n)


# ---------------------------------------------------------------------- KeyColumns


@PROPS
@given(topic=_TOPICS, keys=_columns(max_rows=30))
def test_column_hashes_are_index_hash_of_every_key(topic: str, keys: KeyColumns) -> None:
    expected = [index_hash(f"{topic}#{k}") for record in keys for k in record]
    assert column_hashes(topic, keys).tolist() == expected


def test_column_hashes_of_wide_and_min_value_keys() -> None:
    # "polygenelubricants" hashes to Integer.MIN_VALUE: the index uses 0 (store.md §10.3).
    wide = "A" * 9000  # past the float64 product's exact width
    for topic, key in (("polygenelubricant", "s"), ("T", wide)):
        kc = KeyColumns(_uniq([key.encode()] * 3), ("x",), 3)
        assert column_hashes(topic, kc).tolist() == [index_hash(f"{topic}#{key}"),
                                                     index_hash(f"{topic}#x")] * 3


@PROPS
@given(keys=_columns(max_rows=20), data=st.data())
def test_key_columns_is_the_list_of_tuples_it_stands_for(keys: KeyColumns,
                                                         data: st.DataObject) -> None:
    if keys.uniq is None:
        expected = [keys.extra] * keys.n
    else:
        expected = [(bytes(row).decode("ascii"), *keys.extra) for row in keys.uniq]
    assert list(keys) == expected and len(keys) == len(expected) and bool(keys)
    assert [keys[i] for i in range(-len(keys), len(keys))] == expected * 2
    lo = data.draw(st.integers(0, len(keys)))
    hi = data.draw(st.integers(lo, len(keys)))
    assert list(keys[lo:hi]) == expected[lo:hi]
    with pytest.raises(IndexError):
        keys[len(keys)]


def test_key_columns_refuses_rows_that_do_not_match() -> None:
    with pytest.raises(ValueError):
        KeyColumns(_uniq([b"ab", b"cd"]), (), 3)
    with pytest.raises(ValueError):
        KeyColumns(np.zeros((2, 0), np.uint8), (), 2)


# ---------------------------------------------------------------------- IndexFile.append


def _reference_append(slots: list[int], entries: list[tuple[int, int, int, int]],
                      header: dict[str, int], slot_num: int, hashes: list[int],
                      phys: list[int], stamps: list[int]) -> None:
    """docs/reference/store.md §7.1, one entry at a time; heads from before the call outside
    ``1 .. count-1`` are empty slots (stale or torn)."""
    first = header["count"]
    if first == 1:
        header["begin_ts"], header["begin_phys"] = stamps[0], phys[0]
    written: set[int] = set()
    for h, p, ts in zip(hashes, phys, stamps, strict=True):
        slot = h % slot_num
        head = slots[slot]
        if slot not in written and not 0 < head < first:
            head = 0
        if head == 0:
            header["slot_count"] += 1
        n = header["count"]
        diff = min(max((ts - header["begin_ts"]) // 1000, 0), INT_MAX)
        entries.append((h, p, diff, head))
        slots[slot] = n
        written.add(slot)
        header["count"] = n + 1
    header["end_ts"], header["end_phys"] = stamps[-1], phys[-1]


@st.composite
def _appends(draw: st.DrawFn) -> tuple[int, list[int], list[list[tuple[int, int, int]]]]:
    slot_num = draw(st.integers(1, 9))
    garbage = draw(st.lists(st.integers(-3, 60), min_size=slot_num, max_size=slot_num))
    calls = []
    phys, ts = 0, T0
    for _ in range(draw(st.integers(1, 5))):
        call = []
        for _ in range(draw(st.integers(1, 12))):
            phys += draw(st.integers(1, 500))
            ts += draw(st.sampled_from([0, 0, 1, 999, 1000, 2500, -3000]))
            call.append((draw(st.integers(0, 2**31 - 1)), phys, ts))
        calls.append(call)
    return slot_num, garbage, calls


@PROPS
@given(case=_appends())
def test_append_writes_what_one_entry_at_a_time_writes(tmp_path_factory: pytest.TempPathFactory,
                                                       case: tuple[int, list[int], list[
                                                           list[tuple[int, int, int]]]]) -> None:
    slot_num, garbage, calls = case
    capacity = 1 + sum(map(len, calls))
    path = tmp_path_factory.mktemp("append") / "index"
    mf = MappedFile(path, 0, index_file_size(slot_num, capacity), create=True,
                    preallocate=False)
    f = IndexFile(mf, slot_num, capacity)
    table = np.frombuffer(f.mm, dtype=">i4", count=slot_num, offset=HEADER_SIZE)
    table[:] = garbage  # stale or torn heads: empty slots to both
    slots = list(garbage)
    entries: list[tuple[int, int, int, int]] = [(0, 0, 0, 0)]
    header = {"count": 1, "slot_count": 0, "begin_ts": 0, "begin_phys": 0}
    for call in calls:
        hashes, phys, stamps = (list(c) for c in zip(*call, strict=True))
        f.append(np.array(hashes, np.int64), np.array(phys, np.int64),
                 np.array(stamps, np.int64))
        _reference_append(slots, entries, header, slot_num, hashes, phys, stamps)
    assert table.tolist() == slots
    written = np.frombuffer(f.mm, dtype=ENTRY_DTYPE, count=header["count"],
                            offset=f.entries_at)
    assert [tuple(map(int, e)) for e in written[1:]] == entries[1:]
    assert (f.count, f.slot_count, f.begin_ts, f.end_ts, f.begin_phys, f.end_phys) == (
        header["count"], header["slot_count"], header["begin_ts"], header["end_ts"],
        header["begin_phys"], header["end_phys"])
    f.close()


# ---------------------------------------------------------------------- KeyIndex


#: One dispatched put: plain records ``(keys, gap)``, or one column batch.
_Put = tuple[str, object]


@st.composite
def _puts(draw: st.DrawFn) -> list[_Put]:
    puts: list[_Put] = []
    for _ in range(draw(st.integers(1, 14))):
        if draw(st.booleans()):
            puts.append(("columns", draw(_columns())))
        else:
            keys = draw(st.lists(st.text(string.ascii_letters + "é", max_size=5), max_size=3))
            puts.append(("plain", tuple(keys)))
    return puts


def _feed(index: KeyIndex, puts: list[_Put], columns: bool, drains: set[int],
          step: int) -> list[tuple[int, tuple[str, ...]]]:
    """Dispatch ``puts`` (as columns when ``columns``); returns every record (phys, keys)."""
    records: list[tuple[int, tuple[str, ...]]] = []
    phys, ts = 0, T0
    for i, (kind, what) in enumerate(puts):
        ts += 700
        if kind == "plain":
            keys = what
            assert isinstance(keys, tuple)
            index.put_keys("T", keys, phys, ts)
            records.append((phys, keys))
            phys += step
        else:
            assert isinstance(what, KeyColumns)
            at = range(phys, phys + what.n * step, step)
            if columns:
                index.put_key_columns("T", what, at, ts)
            else:
                for p, keys in zip(at, what, strict=True):
                    index.put_keys("T", keys, p, ts)
            records += zip(at, what, strict=True)
            phys = at.stop
        if i in drains:
            index.drain()
    index.drain()
    return records


@PROPS
@given(puts=_puts(), slots=st.integers(1, 7), capacity=st.integers(2, 40),
       drains=st.sets(st.integers(0, 14)))
def test_columns_write_the_files_the_per_record_path_writes(
        tmp_path_factory: pytest.TempPathFactory, puts: list[_Put], slots: int, capacity: int,
        drains: set[int]) -> None:
    root = tmp_path_factory.mktemp("index")
    fast = KeyIndex(StoreLayout(root / "fast"), max_hash_slot_num=slots,
                    max_index_num=capacity)
    plain = KeyIndex(StoreLayout(root / "plain"), max_hash_slot_num=slots,
                     max_index_num=capacity)
    records = _feed(fast, puts, True, drains, 97)
    assert _feed(plain, puts, False, drains, 97) == records
    assert [f.path.name for f in fast.files] == [f.path.name for f in plain.files]
    for a, b in zip(fast.files, plain.files, strict=True):
        assert bytes(a.mm) == bytes(b.mm)
    for key in {k for _, keys in records for k in keys}:
        assert fast.query("T", key, 64) == plain.query("T", key, 64)
    assert fast.end_phys_offset == plain.end_phys_offset
    fast.close()
    plain.close()


def test_columns_below_the_recorded_end_are_skipped(tmp_path: Path) -> None:
    """Re-dispatch after a crash: records at or below the recorded end are indexed once."""
    index = KeyIndex(StoreLayout(tmp_path), max_hash_slot_num=7, max_index_num=1000)
    keys = KeyColumns(_uniq([b"k%02d" % i for i in range(10)]), ("shared",), 10)
    index.put_key_columns("T", keys[:6], range(0, 600, 100), T0)
    index.put_key_columns("T", keys, range(0, 1000, 100), T0)  # the first 6 again
    index.put_key_columns("T", keys, range(0, 1000, 100), T0)  # all again
    assert index.entry_count == 20
    assert index.query("T", "k07", 10) == [700]
    assert sorted(index.query("T", "shared", 64)) == list(range(0, 1000, 100))
    index.close()


def test_a_put_key_columns_of_no_keys_or_wrong_rows(tmp_path: Path) -> None:
    index = KeyIndex(StoreLayout(tmp_path), max_hash_slot_num=7, max_index_num=100)
    index.put_key_columns("T", KeyColumns(None, (), 3), range(0, 30, 10), T0)
    assert index.entry_count == 0 and index.end_phys_offset == -1
    with pytest.raises(ValueError):
        index.put_key_columns("T", KeyColumns(None, ("k",), 3), range(0, 20, 10), T0)
    index.close()
