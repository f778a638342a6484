"""The key index: layout, chains, rolling, truncation, retention, and the store's lookups."""

from __future__ import annotations

import itertools
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.formats.hashing import index_hash
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store.config import StoreConfig
from tidemq.store.index import (
    DRAIN_AT,
    DRAIN_KEYS,
    KeyIndex,
    index_file_size,
    index_hashes,
)
from tidemq.store.index_format import ENTRY_DTYPE, HEADER_SIZE
from tidemq.store.index_keys import KeyWords
from tidemq.store.layout import StoreLayout, segment_name
from tidemq.store.message_store import MessageInput, MessageStore

from .conftest import FakeClock, crash_copy, small_config

T0 = 1_700_000_000_000


def make_index(root: Path, slots: int = 16, entries: int = 64) -> KeyIndex:
    idx = KeyIndex(StoreLayout(root), max_hash_slot_num=slots, max_index_num=entries)
    idx.load()
    return idx


def config(root: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {"max_hash_slot_num": 16}
    values.update(overrides)
    return small_config(root, **values)


def keyed(body: bytes, uniq: str, *keys: str) -> MessageInput:
    props = {"UNIQ_KEY": uniq}
    if keys:
        props["KEYS"] = " ".join(keys)
    return MessageInput(body=body, properties=encode_properties(props), keys=(uniq, *keys))


# ---------------------------------------------------------------------- hashing


@settings(deadline=None, max_examples=200)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=20))
def test_vectorised_hashes_equal_index_hash(keys: list[str]) -> None:
    assert index_hashes(keys).tolist() == [index_hash(k) for k in keys]


def reference_index_hash(key: str) -> int:
    """Java ``Math.abs(key.hashCode())`` written the slow, obvious way; MIN_VALUE -> 0."""
    h = 0
    data = key.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) % 2**32
    h = h - 2**32 if h >= 2**31 else h
    return 0 if h == -(2**31) else abs(h)


@settings(deadline=None, max_examples=200)
@given(st.one_of(st.text(max_size=600), st.text(alphabet=st.characters(max_codepoint=127),
                                                max_size=600)))
def test_index_hash_matches_java(key: str) -> None:
    assert index_hash(key) == reference_index_hash(key)


def test_hash_vectors() -> None:
    # Java: "TagA".hashCode() == 2598919; "polygenelubricants" hashes to MIN_VALUE -> 0.
    assert index_hashes(["TagA", "polygenelubricants", "Aa", "BB"]).tolist() == [
        2598919, 0, 2112, 2112]


# ---------------------------------------------------------------------- layout


def test_golden_bytes_of_one_entry(tmp_path: Path) -> None:
    idx = make_index(tmp_path, slots=8, entries=4)
    idx.put_keys("T", ("k",), 4096, T0 + 2500)
    idx.flush()
    h = index_hash("T#k")
    data = (tmp_path / "index" / segment_name(4096)).read_bytes()
    assert len(data) == index_file_size(8, 4) == 40 + 8 * 4 + 4 * 20
    assert data[:HEADER_SIZE] == struct.pack(
        ">qqqqii",
        T0 + 2500,  # beginTimestamp
        T0 + 2500,  # endTimestamp
        4096,  # beginPhyOffset
        4096,  # endPhyOffset
        1,  # hashSlotCount
        2,  # indexCount: entry 1 written, 0 is the null link
    )
    slot_at = HEADER_SIZE + (h % 8) * 4
    assert data[slot_at : slot_at + 4] == struct.pack(">i", 1)  # slot -> entry 1
    entry_at = HEADER_SIZE + 8 * 4 + 1 * 20
    assert data[entry_at : entry_at + 20] == struct.pack(
        ">iqii",
        h,  # key hash
        4096,  # phyOffset
        0,  # timeDiff in seconds from beginTimestamp
        0,  # prev: end of chain
    )
    idx.close()


# ---------------------------------------------------------------------- put and query


def test_query_finds_every_key_newest_first(tmp_path: Path) -> None:
    idx = make_index(tmp_path, slots=4, entries=1000)  # few slots: long shared chains
    for i in range(100):
        idx.put_keys("T", (f"u{i}", f"k{i % 3}"), i * 100, T0 + i * 1000)
    idx.put_keys("Other", ("k0",), 20_000, T0 + 200_000)
    assert idx.query("T", "u7", 64) == [700]
    assert idx.query("T", "k1", 64) == [i * 100 for i in range(97, -1, -3)]
    assert idx.query("T", "k1", 5) == [9700, 9400, 9100, 8800, 8500]
    assert idx.query("Other", "k0", 64) == [20_000]
    assert idx.query("T", "missing", 64) == []
    assert idx.query("T", "u7", 0) == []
    idx.close()


def test_query_by_time_range(tmp_path: Path) -> None:
    idx = make_index(tmp_path, entries=1000)
    for i in range(50):
        idx.put_keys("T", ("k",), i * 100, T0 + i * 10_000)  # one every 10 s
    got = idx.query("T", "k", 64, T0 + 100_000, T0 + 200_000)
    assert got == [i * 100 for i in range(20, 9, -1)]
    assert idx.query("T", "k", 64, T0 + 10_000_000) == []
    idx.close()


def test_duplicate_keys_of_one_record_give_one_candidate(tmp_path: Path) -> None:
    idx = make_index(tmp_path)
    idx.put_keys("T", ("a", "a", "", "b"), 0, T0)
    assert idx.query("T", "a", 64) == [0]
    assert idx.entry_count == 3  # the empty key is not indexed
    idx.close()


def test_redispatch_below_the_recorded_end_is_skipped(tmp_path: Path) -> None:
    idx = make_index(tmp_path)
    idx.put_keys("T", ("a",), 0, T0)
    idx.put_keys("T", ("a",), 100, T0)
    idx.put_keys("T", ("a",), 100, T0)  # replay
    idx.put_keys("T", ("a",), 0, T0)
    assert idx.entry_count == 2
    assert idx.end_phys_offset == 100
    idx.close()


def test_files_roll_and_are_named_by_first_offset(tmp_path: Path) -> None:
    idx = make_index(tmp_path, slots=8, entries=5)  # 4 entries per file
    for i in range(10):
        idx.put_keys("T", ("k", f"u{i}"), i * 100, T0 + i)
    idx.drain()
    names = sorted(p.name for p in (tmp_path / "index").iterdir())
    assert names == [segment_name(i * 100) for i in range(0, 10, 2)]
    assert idx.query("T", "k", 64) == [i * 100 for i in range(9, -1, -1)]
    assert idx.query("T", "u3", 64) == [300]
    idx.close()


def test_record_with_more_keys_than_a_file_holds(tmp_path: Path) -> None:
    idx = make_index(tmp_path, entries=4)  # 3 entries per file
    idx.put_keys("T", ("a", "b", "c", "d", "e"), 0, T0)
    idx.put_keys("T", ("f",), 100, T0)
    assert idx.query("T", "c", 64) == [0]
    assert idx.query("T", "d", 64) == []
    assert idx.query("T", "f", 64) == [100]
    idx.close()


def test_bulk_writes_chain_like_single_writes(tmp_path: Path) -> None:
    bulk = make_index(tmp_path / "bulk", slots=7, entries=10_000)
    single = make_index(tmp_path / "single", slots=7, entries=10_000)
    n = DRAIN_AT + 300
    for i in range(n):
        keys = (f"u{i}", f"k{i % 11}")
        bulk.put_keys("T", keys, i * 10, T0 + i)
        single.put_keys("T", keys, i * 10, T0 + i)
        single.drain()
    bulk.drain()
    for f1, f2 in zip(bulk.files, single.files, strict=True):
        assert f1.count == f2.count == 2 * n + 1 and f1.slot_count == f2.slot_count == 7
        assert bytes(f1.mm) == bytes(f2.mm)
    bulk.close()
    single.close()


def _written(root: Path) -> int:
    """indexCount of the only index file, read from the file (0: none yet)."""
    files = list((root / "index").glob("*")) if (root / "index").exists() else []
    if not files:
        return 0
    [path] = files
    with path.open("rb") as f:
        return int(struct.unpack_from(">i", f.read(HEADER_SIZE), 36)[0])


def test_records_of_many_keys_are_written_once_enough_keys_are_queued(
        tmp_path: Path) -> None:
    """Trace messages carry hundreds of keys each: what waits for the bulk write is
    bounded by keys, not only by records (1024 of them would be 750,000 keys)."""
    per_record = 1000
    idx = make_index(tmp_path, slots=64, entries=3 * DRAIN_KEYS)
    records = DRAIN_KEYS // per_record
    for r in range(records):
        idx.put_keys("T", tuple(f"id{r:04}-{i:04}" for i in range(per_record)), r * 10, T0)
    assert _written(tmp_path) == 0  # below both bounds: queued
    idx.put_keys("T", tuple(f"id{records:04}-{i:04}" for i in range(per_record)),
                 records * 10, T0)
    assert _written(tmp_path) == 1 + (records + 1) * per_record  # entry numbers start at 1
    assert idx.query("T", "id0003-0999", 4) == [30]
    idx.close()


def test_reload_after_close(tmp_path: Path) -> None:
    idx = make_index(tmp_path, entries=5)
    for i in range(9):
        idx.put_keys("T", ("k",), i * 100, T0)
    idx.close()
    again = make_index(tmp_path, entries=5)
    assert again.query("T", "k", 64) == [i * 100 for i in range(8, -1, -1)]
    assert again.end_phys_offset == 800
    again.put_keys("T", ("k",), 800, T0)  # at the recorded end: skipped
    again.put_keys("T", ("k",), 900, T0)
    assert again.query("T", "k", 3) == [900, 800, 700]
    again.close()


def test_load_deletes_files_of_another_geometry(tmp_path: Path) -> None:
    idx = make_index(tmp_path, slots=8, entries=8)
    idx.put_keys("T", ("k",), 0, T0)
    idx.close()
    other = make_index(tmp_path, slots=16, entries=8)
    assert other.files == [] and not list((tmp_path / "index").iterdir())
    other.close()


# ---------------------------------------------------------------------- truncation and torn state


def test_truncate_drops_entries_and_rebuilds_slots(tmp_path: Path) -> None:
    idx = make_index(tmp_path, slots=3, entries=100)
    for i in range(30):
        idx.put_keys("T", (f"k{i % 4}",), i * 100, T0 + i * 1000)
    assert idx.truncate(1500) == 15
    assert idx.end_phys_offset == 1400
    assert idx.query("T", "k1", 64) == [1300, 900, 500, 100]
    for i in range(15, 20):  # the log goes on from the truncation point
        idx.put_keys("T", (f"k{i % 4}",), i * 100, T0 + i * 1000)
    assert idx.query("T", "k1", 64) == [1700, 1300, 900, 500, 100]
    f = idx.files[0]
    assert f.count == 21 and f.slot_count == 3
    idx.close()


def test_truncate_deletes_whole_later_files(tmp_path: Path) -> None:
    idx = make_index(tmp_path, entries=4)
    for i in range(9):
        idx.put_keys("T", ("k",), i * 100, T0)
    idx.drain()
    assert len(idx.files) == 3
    assert idx.truncate(300) == 6
    assert [f.begin_phys for f in idx.files] == [0]
    assert idx.query("T", "k", 64) == [200, 100, 0]
    assert idx.truncate(0) == 3
    assert idx.files == [] and idx.end_phys_offset == -1
    idx.put_keys("T", ("k",), 0, T0)
    assert idx.query("T", "k", 64) == [0]
    idx.close()


def test_torn_slots_never_loop_or_point_past_the_count(tmp_path: Path) -> None:
    idx = make_index(tmp_path, slots=4, entries=100)
    for i in range(10):
        idx.put_keys("T", ("k",), i * 100, T0)
    idx.drain()
    f = idx.files[0]
    slot = HEADER_SIZE + (index_hash("T#k") % 4) * 4
    struct.pack_into(">i", f.mm, slot, 99)  # past indexCount: treated as an empty slot
    assert idx.query("T", "k", 64) == []
    struct.pack_into(">i", f.mm, slot, 10)
    ent = np.frombuffer(f.mm, dtype=ENTRY_DTYPE, count=f.count, offset=f.entries_at)
    struct.pack_into(">i", f.mm, f.entries_at + 5 * 20 + 16, 7)  # prev forward: a cycle
    assert int(ent["prev"][5]) == 7 and int(ent["phys"][5]) == 400
    assert idx.query("T", "k", 64) == [900, 800, 700, 600, 500, 400]
    idx.close()


# ---------------------------------------------------------------------- retention


def test_delete_below_keeps_the_last_file_and_makes_no_holes(tmp_path: Path) -> None:
    idx = make_index(tmp_path, entries=3)  # 2 entries per file
    for i in range(8):
        idx.put_keys("T", ("k",), i * 100, T0)
    idx.drain()
    assert [f.end_phys for f in idx.files] == [100, 300, 500, 700]
    assert idx.delete_below(100) == 0
    assert idx.delete_below(101) == 1
    assert idx.delete_below(250) == 0  # the second file ends at 300
    assert idx.delete_below(10_000) == 2
    assert [f.begin_phys for f in idx.files] == [600]
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == [segment_name(600)]
    idx.close()


# ---------------------------------------------------------------------- the store


def test_store_query_by_key_checks_the_real_key(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_index_num=64)
    with MessageStore(cfg) as store:
        store.put("T", 0, keyed(b"one", "U1", "Aa"))
        store.put("T", 1, keyed(b"two", "U2", "BB"))  # same Java hash as "Aa"
        store.put("T", 0, keyed(b"three", "U3", "Aa", "x"))
        store.put("T2", 0, keyed(b"four", "U4", "Aa"))
        assert store.wait_dispatched()
        assert len(store.index.query("T", "Aa", 64)) == 3 if store.index else False
        bodies = [_body(v) for v in store.query_by_key("T", "Aa")]
        assert bodies == [b"three", b"one"]
        assert [_body(v) for v in store.query_by_key("T", "BB")] == [b"two"]
        assert [_body(v) for v in store.query_by_key("T", "U2")] == [b"two"]
        assert store.query_by_key("T", "U4") == []
        assert [_body(v) for v in store.query_by_key("T", "Aa", max_num=1)] == [b"three"]
        assert store.query_by_key("T", "") == []


def test_store_query_by_key_asks_for_more_when_candidates_collide(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path, max_index_num=64)) as store:
        store.put("T", 0, keyed(b"a1", "U1", "Aa"))
        store.put("T", 0, keyed(b"a2", "U2", "Aa"))
        for i in range(3):  # newer records under a key of the same hash
            store.put("T", 0, keyed(b"b", f"V{i}", "BB"))
        assert store.wait_dispatched()
        assert [_body(v) for v in store.query_by_key("T", "Aa", max_num=2)] == [b"a2", b"a1"]
        assert [_body(v) for v in store.query_by_key("T", "Aa", max_num=1)] == [b"a2"]
        assert store.query_by_key("T", "Aa", max_num=0) == []


def test_store_query_by_time_uses_exact_store_times(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with MessageStore(config(tmp_path, max_index_num=64),
                      clock=clock) as store:
        for i in range(5):
            clock.now = T0 + i * 300  # five records within two seconds
            store.put("T", 0, keyed(str(i).encode(), f"U{i}", "k"))
        assert store.wait_dispatched()
        got = [_body(v) for v in store.query_by_key("T", "k", begin=T0 + 300, end=T0 + 900)]
        assert got == [b"3", b"2", b"1"]


def test_store_without_index(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path, message_index_enable=False)) as store:
        store.put("T", 0, keyed(b"x", "U1"))
        assert store.wait_dispatched()
        assert store.index is None
        assert store.query_by_key("T", "U1") == []
    assert not (tmp_path / "index").exists()


def test_store_index_survives_clean_restart(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_index_num=8)
    with MessageStore(cfg) as store:
        for i in range(20):
            store.put("T", i % 2, keyed(b"x" * 200, f"U{i}", "k"))
    with MessageStore(cfg) as store:
        assert store.index is not None and store.index.entry_count == 40
        assert len(store.query_by_key("T", "k")) == 20
        assert len(store.query_by_key("T", "U19")) == 1


@pytest.mark.parametrize("drained", [False, True], ids=["queued", "written"])
def test_store_index_after_crash_is_rebuilt_without_duplicates(tmp_path: Path,
                                                                drained: bool) -> None:
    """Keys after the checkpoint were still queued, or written but not flushed: either way
    the restart cuts the index back to the checkpoint and recovery re-adds them once."""
    cfg = config(tmp_path / "live", max_index_num=16)
    store = MessageStore(cfg)
    store.start()
    try:
        for i in range(30):
            store.put("T", 0, keyed(b"x" * 100, f"U{i}", "k"))
        assert store.wait_dispatched()
        store._write_checkpoint()  # a checkpoint covers the first 30
        for i in range(30, 45):
            store.put("T", 0, keyed(b"x" * 100, f"U{i}", "k"))
        assert store.wait_dispatched()
        if drained:
            assert store.index is not None
            store.index.drain()
        crashed = crash_copy(store, tmp_path / "crashed")
    finally:
        store.shutdown()
    cfg2 = config(crashed, max_index_num=16)
    with MessageStore(cfg2) as again:
        assert again.recovery_report is not None and not again.recovery_report.clean
        assert again.index is not None and again.index.entry_count == 90
        assert len(again.query_by_key("T", "k")) == 45
        assert [_body(v) for v in again.query_by_key("T", "U44")] == [b"x" * 100]
        again.put("T", 0, keyed(b"new", "U45", "k"))
        assert again.wait_dispatched()
        assert [_body(v) for v in again.query_by_key("T", "U45")] == [b"new"]


def _body(view: memoryview) -> bytes:
    rec = decode_record(view)
    assert isinstance(rec, Record)
    return bytes(rec.body)


@pytest.mark.parametrize("slots", [1, 5])
def test_many_collisions_still_answer_exactly(tmp_path: Path, slots: int) -> None:
    idx = make_index(tmp_path, slots=slots, entries=5000)
    for i in range(3000):
        idx.put_keys("T", (f"u{i}",), i * 10, T0 + i)
    for i in (0, 1, 1500, 2999):
        assert idx.query("T", f"u{i}", 64) == [i * 10]
    idx.close()


@settings(deadline=None, max_examples=200)
@given(st.integers(1, 40).flatmap(lambda w: st.lists(
    st.text(st.characters(max_codepoint=127), min_size=w, max_size=w), min_size=1,
    max_size=30)))
def test_keys_of_one_width_hash_as_one_matrix(keys: list[str]) -> None:
    """ASCII keys all as long (a trace message's msgIds) take the one-buffer product."""
    assert index_hashes(keys).tolist() == [reference_index_hash(k) for k in keys]


def test_mixed_widths_with_an_even_total_are_not_taken_for_one_width() -> None:
    keys = ["ab", "c", "def"]  # 6 characters, as 3 keys of 2 would be
    assert index_hashes(keys).tolist() == [reference_index_hash(k) for k in keys]


@settings(deadline=None, max_examples=50)
@given(records=st.lists(st.tuples(st.sampled_from(["T", "U"]),
                                  st.lists(st.sampled_from(["a", "b", "", "k1"]), min_size=1,
                                           max_size=3).map(tuple)), min_size=1, max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=4), replay=st.integers(0, 5))
def test_key_rows_queued_together_index_as_one_by_one(
        records: list[tuple[str, tuple[str, ...]]], cuts: list[int], replay: int) -> None:
    """A dispatch round's records queued together (put_key_rows, in chunks, a replayed
    head skipped) give the index files put_keys gives them one by one."""
    rows = [(topic, keys, i * 100, T0 + i) for i, (topic, keys) in enumerate(records)]
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as many:
        a, b = make_index(Path(one), entries=16), make_index(Path(many), entries=16)
        for topic, keys, phys, ts in rows:
            a.put_keys(topic, keys, phys, ts)
        edges = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
        for start, end in itertools.pairwise(edges):
            b.put_key_rows(rows[max(0, start - replay):end])  # a replayed head is skipped
        a.drain()
        b.drain()
        assert (a.entry_count, a.end_phys_offset) == (b.entry_count, b.end_phys_offset)
        for topic, key in {(t, k) for t, ks, _p, _ts in rows for k in ks if k}:
            assert a.query(topic, key, 64) == b.query(topic, key, 64)
        a.close()
        b.close()
        files = sorted(p.name for p in (Path(one) / "index").glob("*"))
        assert files == sorted(p.name for p in (Path(many) / "index").glob("*"))
        for name in files:
            assert (Path(one) / "index" / name).read_bytes() == (
                Path(many) / "index" / name).read_bytes()


@settings(deadline=None, max_examples=40)
@given(st.lists(st.tuples(st.sampled_from(["T", "RMQ_SYS_TRACE_TOPIC"]),
                          st.lists(st.text("0123456789ABCDEF", min_size=1, max_size=33)
                                   | st.sampled_from(["é", "键", "\U0001F600"]),
                                   min_size=1, max_size=40),
                          st.booleans()),
                min_size=1, max_size=30))
def test_keys_given_as_words_index_as_the_keys_one_by_one(
        records: list[tuple[str, list[str], bool]]) -> None:
    """A trace message's keys handed over as their text (KeyWords) give the index files
    the same keys as a tuple give, byte for byte, and count as many keys towards a
    bulk write."""
    with tempfile.TemporaryDirectory() as plain, tempfile.TemporaryDirectory() as worded:
        a = make_index(Path(plain), slots=11, entries=64)
        b = make_index(Path(worded), slots=11, entries=64)
        for i, (topic, keys, rows) in enumerate(records):
            words = KeyWords.of("U" * 32, " ".join(keys))
            assert isinstance(words, KeyWords) and len(words) == len(keys) + 1
            a.put_keys(topic, ("U" * 32, *keys), i * 100, T0 + i)
            if rows:
                b.put_key_rows([(topic, words, i * 100, T0 + i)])
            else:
                b.put_keys(topic, words, i * 100, T0 + i)
        assert a._keys_in == b._keys_in
        a.drain()
        b.drain()
        for topic, keys, _ in records:
            for key in keys:
                assert a.query(topic, key, 64) == b.query(topic, key, 64) != []
        a.close()
        b.close()
        files = sorted(p.name for p in (Path(plain) / "index").glob("*"))
        assert files == sorted(p.name for p in (Path(worded) / "index").glob("*"))
        for name in files:
            assert (Path(plain) / "index" / name).read_bytes() == (
                Path(worded) / "index" / name).read_bytes()
