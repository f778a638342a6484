"""Consume queues: entries across files, idempotent writes, refused gaps, late starts."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.errors import QueueGap
from tidemq.formats.hashing import tags_code
from tidemq.store import consume_queue
from tidemq.store.consume_queue import BLANK_UNIT_SIZE, CQ_UNIT, ConsumeQueue
from tidemq.store.layout import StoreLayout

from .conftest import OpenStore, msg, read_queue

PER_FILE = 4
FILE_SIZE = PER_FILE * CQ_UNIT


def make_cq(tmp_path: Path) -> ConsumeQueue:
    return ConsumeQueue(StoreLayout(tmp_path), "T", 0, FILE_SIZE)


def entries(n: int, first_phys: int = 0, size: int = 100) -> tuple[list[int], list[int],
                                                                   list[int]]:
    phys = [first_phys + i * size for i in range(n)]
    return phys, [size] * n, [tags_code(f"tag{i}") for i in range(n)]


def as_tuples(cq: ConsumeQueue, start: int, count: int) -> list[tuple[int, int, int]]:
    out = []
    for off in range(start, start + count):
        e = cq.entry(off)
        assert e is not None, off
        out.append(e)
    return out


def test_entries_across_file_boundaries(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    phys, sizes, tags = entries(10)
    assert cq.append(0, phys, sizes, tags) == 10
    assert cq.max_offset == 10 and cq.min_offset == 0
    names = sorted(p.name for p in cq.dir.iterdir())
    assert names == ["00000000000000000000", "00000000000000000080", "00000000000000000160"]
    assert as_tuples(cq, 0, 10) == list(zip(phys, sizes, tags, strict=True))
    # A bulk read stops at a file end; the next read continues in the next file.
    assert len(cq.entries(2, 100)) == 2
    assert len(cq.entries(4, 100)) == 4
    assert len(cq.entries(10, 1)) == 0
    # The on-disk entry is (phys 8, size 4, tags 8), tags sign-extended.
    raw = (cq.dir / "00000000000000000080").read_bytes()
    assert raw[20:40] == struct.pack(">qiq", phys[5], 100, tags[5])
    neg = tags_code("polygenelubricants")
    cq.append(10, [1000], [100], [neg])
    assert cq.entry(10) == (1000, 100, neg)
    cq.close()


def test_reload_finds_the_end(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    cq.append(0, *entries(6))
    cq.close()
    again = make_cq(tmp_path)
    again.load()
    assert (again.min_offset, again.max_offset, again.max_phys_end) == (0, 6, 600)
    assert again.append(6, [600], [50], [0]) == 7
    again.close()


def test_re_append_is_idempotent(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    phys, sizes, tags = entries(6)
    cq.append(0, phys, sizes, tags)
    before = [p.read_bytes() for p in sorted(cq.dir.iterdir())]
    assert cq.append(0, phys, sizes, tags) == 6       # the same entries again
    assert cq.append(2, phys[2:4], sizes[2:4], tags[2:4]) == 6  # a slice of them
    assert [p.read_bytes() for p in sorted(cq.dir.iterdir())] == before
    # An overlapping run only adds what is new.
    more_phys, more_sizes, more_tags = entries(9)
    assert cq.append(0, more_phys, more_sizes, more_tags) == 9
    assert as_tuples(cq, 0, 9) == list(zip(more_phys, more_sizes, more_tags, strict=True))
    cq.close()


def test_gap_is_refused(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    cq.append(0, *entries(3))
    with pytest.raises(QueueGap) as info:
        cq.append(5, [1000], [10], [0])
    assert (info.value.topic, info.value.queue_id) == ("T", 0)
    assert (info.value.expected, info.value.got) == (3, 5)
    assert cq.max_offset == 3  # nothing was written
    assert cq.append(3, [1000], [10], [0]) == 4
    cq.close()


def test_queue_starting_late_fills_blank_units(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    assert cq.append(6, *entries(3, first_phys=5000)) == 9
    assert (cq.min_offset, cq.max_offset) == (6, 9)
    assert cq.entry(5) is None
    # Slots 4 and 5 of the file holding offset 6 hold the blank unit.
    raw = (cq.dir / "00000000000000000080").read_bytes()
    assert raw[:20] == struct.pack(">qiq", 0, BLANK_UNIT_SIZE, 0)
    assert raw[20:40] == struct.pack(">qiq", 0, BLANK_UNIT_SIZE, 0)
    cq.close()
    again = make_cq(tmp_path)
    again.load()
    assert (again.min_offset, again.max_offset) == (6, 9)
    assert again.entry(6) == (5000, 100, tags_code("tag0"))
    again.close()


def test_truncate_phys(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    cq.append(0, *entries(10))
    cq.truncate_phys(550)  # entries starting at 600 and later go
    assert cq.max_offset == 6 and cq.max_phys_end == 600
    assert len(list(cq.dir.iterdir())) == 2
    assert cq.append(6, [600], [7], [0]) == 7
    cq.truncate_phys(0)
    assert cq.max_offset == 0
    cq.close()


def test_store_queue_across_files(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_consume_queue=5 * CQ_UNIT)
    for i in range(12):
        store.put("T", 0, msg(f"m{i}".encode()))
    store.put_batch("T", 0, [msg(f"m{i}".encode()) for i in range(12, 23)])
    assert store.wait_dispatched()
    assert store.max_offset("T", 0) == 23
    result = store.get("T", 0, 3, max_count=100)
    assert result.message_count == 20 and result.next_begin_offset == 23
    got = read_queue(store, "T", 0)
    assert [bytes(r.body) for r in got] == [f"m{i}".encode() for i in range(23)]
    files = sorted(p.name for p in store.layout.queue_dir("T", 0).iterdir())
    assert files == [f"{n * 100:020d}" for n in range(5)]


@settings(deadline=None, max_examples=60,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 2**31 - 1), min_size=1, max_size=12),
       tags=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=12, max_size=12),
       start=st.integers(0, 9), split=st.integers(0, 12))
def test_one_entry_at_a_time_writes_the_bytes_of_one_append(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int], tags: list[int],
        start: int, split: int) -> None:
    """A single entry is packed, not made an array: the files hold the same bytes."""
    phys = [sum(sizes[:i]) for i in range(len(sizes))]
    tags = tags[:len(sizes)]
    whole = make_cq(tmp_path_factory.mktemp("whole"))
    whole.append(start, phys, sizes, tags)
    single = make_cq(tmp_path_factory.mktemp("single"))
    if split:  # some at once first, then one at a time
        single.append(start, phys[:split], sizes[:split], tags[:split])
    for i in range(min(split, len(phys)), len(phys)):
        single.append(start + i, [phys[i]], [sizes[i]], [tags[i]])
    assert single.max_offset == whole.max_offset == start + len(phys)
    assert [bytes(f.mm[:f.wrote]) for f in single.files] == [
        bytes(f.mm[:f.wrote]) for f in whole.files]
    assert as_tuples(single, start, len(phys)) == list(zip(phys, sizes, tags, strict=True))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=3 * PER_FILE + 1),
       start=st.integers(0, 2 * PER_FILE), again=st.integers(0, 3))
def test_append_one_writes_what_append_writes(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int], start: int,
        again: int) -> None:
    """One entry at a time through the dispatcher's single-entry path -- across file
    ends, from a late start, with entries dispatched again -- leaves the bytes one
    append leaves."""
    phys = [sum(sizes[:i]) for i in range(len(sizes))]
    tags = [tags_code(f"t{i}") for i in range(len(sizes))]
    whole = make_cq(tmp_path_factory.mktemp("whole"))
    whole.append(start, phys, sizes, tags)
    single = make_cq(tmp_path_factory.mktemp("single"))
    for i in range(len(phys)):
        assert single.append_one(start + i, phys[i], sizes[i], tags[i]) == start + i + 1
        j = max(0, i - again)  # dispatched again after a crash: skipped
        assert single.append_one(start + j, phys[j], sizes[j], tags[j]) == start + i + 1
    assert single.max_offset == whole.max_offset == start + len(phys)
    assert [bytes(f.mm[:f.wrote]) for f in single.files] == [
        bytes(f.mm[:f.wrote]) for f in whole.files]
    with pytest.raises(QueueGap):
        single.append_one(start + len(phys) + 1, phys[-1] + 10_000, 10, 0)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 2**31 - 1), min_size=2, max_size=40),
       cuts=st.lists(st.integers(1, 40), max_size=6), start=st.integers(0, 9))
def test_small_appends_write_the_bytes_of_one_array_append(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int], cuts: list[int],
        start: int) -> None:
    """A few entries are packed one by one, many go through an array: the same bytes."""
    phys = [sum(sizes[:i]) for i in range(len(sizes))]
    tags = [tags_code(f"t{i}") for i in range(len(sizes))]
    whole = make_cq(tmp_path_factory.mktemp("whole"))
    whole.append(start, phys, sizes, tags)
    parts = make_cq(tmp_path_factory.mktemp("parts"))
    bounds = sorted({0, len(phys), *(c for c in cuts if c < len(phys))})
    for a, b in itertools.pairwise(bounds):
        parts.append(start + a, phys[a:b], sizes[a:b], tags[a:b])
    assert [bytes(f.mm[:f.wrote]) for f in parts.files] == [
        bytes(f.mm[:f.wrote]) for f in whole.files]


def test_the_compiled_run_entries_are_built_and_used() -> None:
    """The C module is built wherever the project runs; a silent fallback would hide a
    slower dispatch thread."""
    _crecords = compiled()
    assert consume_queue.NATIVE_RUN_ENTRIES
    assert consume_queue.run_entries is _crecords.queue_entries


@settings(max_examples=300, deadline=None)
@given(start=st.integers(0, 2**62), step=st.integers(1, 2**20), n=st.integers(0, 300),
       size=st.integers(-2**31, 2**31 - 1), tags=st.integers(-2**63, 2**63 - 1))
def test_run_entries_are_the_entries_packed_one_by_one(start: int, step: int, n: int,
                                                       size: int, tags: int) -> None:
    """The compiled run and its numpy twin write each entry as the format packs it."""
    expected = b"".join(struct.pack(">qiq", start + i * step, size, tags) for i in range(n))
    assert consume_queue.py_run_entries(start, step, n, size, tags) == expected
    assert consume_queue.run_entries(start, step, n, size, tags) == expected


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 60), size=st.integers(1, 4096), tags=st.integers(-2**63, 2**63 - 1),
       base=st.integers(0, 2**40), skip=st.integers(0, 70), start=st.integers(0, 9))
def test_a_uniform_run_appends_the_bytes_of_its_listed_entries(
        tmp_path_factory: pytest.TempPathFactory, n: int, size: int, tags: int, base: int,
        skip: int, start: int) -> None:
    """A uniform batch's columns (a range of offsets, one size and one tags code repeated)
    append what the same entries given as lists append, entries dispatched again
    included."""
    phys = range(base, base + n * size, size)
    listed = make_cq(tmp_path_factory.mktemp("listed"))
    run = make_cq(tmp_path_factory.mktemp("run"))
    for cq, offsets in ((listed, list(phys)), (run, phys)):
        assert cq.append(start, offsets, [size] * n, [tags] * n) == start + n
        again = min(skip, n - 1)  # a re-dispatch from entry ``again`` on: skipped
        assert cq.append(start + again, offsets[again:], [size] * (n - again),
                         [tags] * (n - again)) == start + n
    assert [bytes(f.mm[:f.wrote]) for f in run.files] == [
        bytes(f.mm[:f.wrote]) for f in listed.files]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=5),
       gaps=st.lists(st.integers(0, 5000), min_size=5, max_size=5),
       size=st.integers(1, 4096), tags=st.integers(-2**63, 2**63 - 1),
       base=st.integers(0, 2**40), start=st.integers(0, 9), again=st.integers(0, 3))
def test_runs_append_the_bytes_of_their_listed_entries(
        tmp_path_factory: pytest.TempPathFactory, lengths: list[int], gaps: list[int],
        size: int, tags: int, base: int, start: int, again: int) -> None:
    """A round's uniform batches to one queue (runs of offsets, apart in the log) append
    what their entries as lists append: into an empty queue, after earlier entries,
    across files, and again (a re-dispatch after a crash, skipped)."""
    runs, at = [], base
    for n, gap in zip(lengths, gaps, strict=False):
        runs.append(range(at, at + n * size, size))
        at += n * size + gap
    phys = [p for r in runs for p in r]
    total = len(phys)
    listed = make_cq(tmp_path_factory.mktemp("listed"))
    run = make_cq(tmp_path_factory.mktemp("run"))
    for offset in (start, start + total):  # the second round continues the first
        shift = 0 if offset == start else at + size - base
        moved = [range(r.start + shift, r.stop + shift, r.step) for r in runs]
        assert listed.append(offset, [p + shift for p in phys], [size] * total,
                             [tags] * total) == offset + total
        assert run.append_runs(offset, moved, size, tags) == offset + total
    first = runs[min(again, len(runs) - 1):]  # the first round dispatched again, in part
    done = start + total
    assert run.append_runs(start + total - sum(map(len, first)), first, size, tags) == (
        done + total)
    assert run.max_offset == listed.max_offset
    assert [bytes(f.mm[:f.wrote]) for f in run.files] == [
        bytes(f.mm[:f.wrote]) for f in listed.files]
    with pytest.raises(QueueGap):
        run.append_runs(done + total + 1, [range(10**13, 10**13 + size, size)], size, tags)
