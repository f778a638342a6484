"""The read path: statuses and next offsets, filters, limits, coalesced runs."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

import pytest

import tidemq.store.reader as reader_module
from tidemq.formats.hashing import tags_code
from tidemq.store.commitlog import CommitLog
from tidemq.store.message_store import MessageStore
from tidemq.store.reader import GetResult
from tidemq.types import GetStatus

from .conftest import SEGMENT, OpenStore, msg, records


def filled(open_store: OpenStore, n: int = 5, **config: object) -> MessageStore:
    store = open_store(**config)
    for i in range(n):
        store.put("T", 0, msg(f"body-{i}".encode(), tags="A" if i % 2 == 0 else "B"))
    assert store.wait_dispatched()
    return store


def test_found(open_store: OpenStore) -> None:
    store = filled(open_store)
    r = store.get("T", 0, 1, max_count=2)
    assert (r.status, r.found, r.next_begin_offset, r.min_offset, r.max_offset) == (
        GetStatus.FOUND, True, 3, 0, 5)
    assert [bytes(x.body) for x in records(r)] == [b"body-1", b"body-2"]
    assert r.message_count == 2 and r.total_bytes == sum(len(b) for b in r.buffers)


def test_unknown_queue(open_store: OpenStore) -> None:
    store = filled(open_store)
    r = store.get("T", 7, 3)
    assert (r.status, r.next_begin_offset, r.message_count) == (
        GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0)
    assert store.get("Nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE


def test_empty_queue(open_store: OpenStore) -> None:
    store = open_store()
    store.queues.get_or_create("T", 0)  # a queue that exists but holds nothing
    r = store.get("T", 0, 0)
    assert (r.status, r.next_begin_offset, r.max_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0)
    assert store.get("T", 0, 4).next_begin_offset == 0


def test_offset_overflow(open_store: OpenStore) -> None:
    store = filled(open_store)
    one = store.get("T", 0, 5)
    assert (one.status, one.next_begin_offset, one.buffers) == (
        GetStatus.OFFSET_OVERFLOW_ONE, 5, [])
    badly = store.get("T", 0, 9)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)


def test_offset_too_small(open_store: OpenStore) -> None:
    store = filled(open_store)
    cq = store.queues.get("T", 0)
    assert cq is not None
    entry = cq.entry(2)
    assert entry is not None
    cq.correct_min_offset(entry[0])  # as retention does once the log start passed offset 2
    r = store.get("T", 0, 1)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (
        GetStatus.OFFSET_TOO_SMALL, 2, 2, 5)
    assert store.get("T", 0, 2).found
    # Past the max with a non-zero min: the consumer is sent to the max.
    assert store.get("T", 0, 9).next_begin_offset == 5


def test_tag_filter(open_store: OpenStore) -> None:
    store = filled(open_store, n=6)
    a = store.get("T", 0, 0, tag_codes=frozenset({tags_code("A")}))
    assert a.status is GetStatus.FOUND
    assert [bytes(x.body) for x in records(a)] == [b"body-0", b"body-2", b"body-4"]
    assert len(a.buffers) == 3  # not adjacent: one view each
    assert a.next_begin_offset == 6
    none = store.get("T", 0, 0, tag_codes=frozenset({tags_code("C")}))
    assert (none.status, none.next_begin_offset, none.buffers) == (
        GetStatus.NO_MATCHED_MESSAGE, 6, [])
    # A filtered pull that hits max_count stops right after the last match.
    one = store.get("T", 0, 1, max_count=1, tag_codes=frozenset({tags_code("B")}))
    assert [bytes(x.body) for x in records(one)] == [b"body-1"]
    assert one.next_begin_offset == 2


def test_selective_filter_makes_progress(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=256 * 1024,
                       mapped_file_size_consume_queue=20 * 1000)
    store.put_batch("T", 0, [msg(b"n", tags="B")] * 700 + [msg(b"hit", tags="A")])
    assert store.wait_dispatched()
    codes = frozenset({tags_code("A")})
    offset, statuses = 0, []
    for _ in range(10):
        r = store.get("T", 0, offset, max_count=1, tag_codes=codes)
        statuses.append(r.status)
        assert r.next_begin_offset > offset
        offset = r.next_begin_offset
        if r.found:
            assert [bytes(x.body) for x in records(r)] == [b"hit"]
            break
    assert statuses[-1] is GetStatus.FOUND
    assert GetStatus.NO_MATCHED_MESSAGE in statuses  # the scan budget ran out at least once
    assert offset == 701


def test_max_count_and_max_bytes(open_store: OpenStore) -> None:
    store = filled(open_store, n=10)
    size = len(store.read_record(0) or b"")
    r = store.get("T", 0, 0, max_count=3)
    assert (r.message_count, r.next_begin_offset) == (3, 3)
    r = store.get("T", 0, 0, max_bytes=int(size * 2.5))
    assert (r.message_count, r.next_begin_offset, r.total_bytes) == (2, 2, 2 * size)
    r = store.get("T", 0, 4, max_bytes=size * 3)
    assert (r.message_count, r.next_begin_offset) == (3, 7)
    r = store.get("T", 0, 4, max_bytes=1)  # the first message is always admitted
    assert (r.message_count, r.next_begin_offset) == (1, 5)


def test_runs_are_coalesced(open_store: OpenStore) -> None:
    store = open_store()
    for i in range(6):
        store.put("T", 0, msg(b"q0-%d" % i))
    for i in range(3):
        store.put("T", 0, msg(b"i0-%d" % i))
        store.put("T", 1, msg(b"i1-%d" % i))
    assert store.wait_dispatched()
    r = store.get("T", 0, 0, max_count=100)
    assert r.message_count == 9
    # Seven back-to-back records make one view; the interleaved ones are one view each.
    per_view = [len(records(GetResult(GetStatus.FOUND, 0, 0, 0, [b]))) for b in r.buffers]
    assert per_view == [7, 1, 1]
    assert bytes(r.buffers[0]) == bytes(store.commitlog.read(0, r.buffers[0].nbytes) or b"")


def test_run_breaks_at_segment_end(open_store: OpenStore) -> None:
    store = open_store()
    body = b"x" * 900
    for _ in range(6):  # records of 992 bytes: four fit in a 4096-byte segment
        store.put("T", 0, msg(body))
    assert store.wait_dispatched()
    r = store.get("T", 0, 0, max_count=10)
    assert r.message_count == 6
    assert [len(b) for b in r.buffers] == [4 * 992, 2 * 992]
    assert records(r)[4].physical_offset == SEGMENT


def _same_read(store: MessageStore, offset: int, max_count: int, max_bytes: int,
               monkeypatch: pytest.MonkeyPatch) -> GetResult:
    """The entry-by-entry read and the numpy read give the same answer."""
    small = store.get("T", 0, offset, max_count, max_bytes)
    with monkeypatch.context() as m:
        m.setattr(reader_module, "SMALL_READ", 0)
        vector = store.get("T", 0, offset, max_count, max_bytes)
    assert (small.status, small.next_begin_offset, small.min_offset, small.max_offset,
            small.message_count, small.total_bytes) == (
        vector.status, vector.next_begin_offset, vector.min_offset, vector.max_offset,
        vector.message_count, vector.total_bytes), (offset, max_count, max_bytes)
    assert b"".join(small.buffers) == b"".join(vector.buffers)
    return small


def test_small_read_matches_vectorised(open_store: OpenStore,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    for i in range(60):  # queue 1 interleaved: runs break; 16 entries per CQ file
        store.put("T", 0, msg(b"b" * (i % 7 + 1)))
        if i % 3 == 0:
            store.put("T", 1, msg(b"other"))
    assert store.wait_dispatched()
    for offset in (0, 1, 15, 16, 31, 40, 59, 60, 61):
        for max_count in (1, 2, 5, 16, 33, 64):
            for max_bytes in (1, 150, 400, 1 << 20):
                _same_read(store, offset, max_count, max_bytes, monkeypatch)
    cq = store.queues.get("T", 0)
    assert cq is not None
    entry = cq.entry(20)
    assert entry is not None
    # Records below the commit log's minimum are skipped the same way.
    monkeypatch.setattr(CommitLog, "min_offset", property(lambda _self: entry[0]))
    for offset in (0, 5, 19, 20):
        for max_count in (1, 8, 64):
            r = _same_read(store, offset, max_count, 1 << 20, monkeypatch)
            assert r.found


def test_small_read_of_back_to_back_records_matches_vectorised(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    for i in range(70):  # one queue: records back to back, across CQ files and segments
        store.put("T", 0, msg(b"c" * (i % 5 + 1)))
    assert store.wait_dispatched()
    for offset in (0, 3, 15, 16, 30, 47, 69):
        for max_count in (1, 2, 16, 17, 40, 64):
            for max_bytes in (1, 200, 1500, 1 << 20):
                r = _same_read(store, offset, max_count, max_bytes, monkeypatch)
                assert r.message_count >= 1


def _numpy_calls(read: Callable[[], GetResult]) -> list[str]:
    """The numpy functions ``read`` calls, seen through the profiler's C-call events."""
    calls: list[str] = []

    def profile(_frame: types.FrameType, event: str, arg: object) -> None:
        if event == "c_call" and "numpy" in (getattr(arg, "__module__", None) or ""):
            calls.append(getattr(arg, "__name__", repr(arg)))
        elif event == "call" and "numpy" in _frame.f_code.co_filename:
            calls.append(_frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        read()
    finally:
        sys.setprofile(None)
    return calls


def test_pull_of_a_large_batch_from_a_short_tail_reads_entry_by_entry(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer that keeps up asks for a large batch and finds a few entries: the read
    skips numpy as a read asking for few does, with the same answer."""
    store = open_store()
    for i in range(100):
        store.put("T", 0, msg(b"d" * (i % 5 + 1)))
        if i % 4 == 0:
            store.put("T", 1, msg(b"other"))
    assert store.wait_dispatched()
    for offset in (36, 50, 90, 99):
        for max_count in (65, 1000, 1 << 16):
            for max_bytes in (1, 300, 1 << 20):
                r = _same_read(store, offset, max_count, max_bytes, monkeypatch)
                assert r.message_count >= 1
    assert _numpy_calls(lambda: store.get("T", 0, 40, 1000)) == []
    assert _numpy_calls(lambda: store.get("T", 0, 30, 1000))  # 70 entries: vectorised
