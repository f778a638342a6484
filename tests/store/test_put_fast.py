"""The single-record fast path: identical bytes, row hand-off to the dispatcher, group
commit waiters."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.formats.record import HostAddr, decode_record, encode_record
from tidemq.store.dispatch import DispatchBatch, Row, fold_rows
from tidemq.store.flush import FLUSHED_GROUP, FlushGroup, FlushStatus
from tidemq.store.message_store import MessageInput, PutResult, PutStatus
from tidemq.types import FlushDiskType

from .conftest import FakeClock, OpenStore, msg, records

SYNC = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "flush_interval_consume_queue": 60_000}
BORN = HostAddr(b"\x0a\x01\x02\x03", 40001)


def test_put_writes_the_bytes_encode_record_writes(open_store: OpenStore) -> None:
    clock = FakeClock(1_700_000_000_123)
    store = open_store(clock=clock, mapped_file_size_commit_log=1 << 20)
    store.put("Topic", 3, msg(b"first"))  # the topic's first put takes the general path
    m = MessageInput(b"body-bytes", b"TAGS\x01a\x02KEYS\x01k1\x02", flag=7, tags_code=97)
    first = store.put("Topic", 3, m, sys_flag=0x2, born_timestamp=42, born_host=BORN,
                      reconsume_times=2)
    second = store.put("Topic", 3, MessageInput(memoryview(b"x" * 300)))
    long_props = b"KEYS\x01" + b"k" * 5000 + b"\x02"  # past the cached length prefixes
    third = store.put("Topic", 3, MessageInput(b"z", long_props))
    cases: list[tuple[PutResult, dict[str, Any]]] = [
        (first, {"body": b"body-bytes", "properties": m.properties, "flag": 7, "sys_flag": 0x2,
                 "born_timestamp": 42, "born_host": BORN, "reconsume_times": 2}),
        (second, {"body": b"x" * 300, "properties": b"", "born_timestamp": clock.now,
                  "born_host": store.store_host}),
        (third, {"body": b"z", "properties": long_props, "born_timestamp": clock.now,
                 "born_host": store.store_host}),
    ]
    for res, kwargs in cases:
        stored = store.read_record(res.phys_offsets[0])
        assert stored is not None
        expected = encode_record(topic=b"Topic", queue_id=3, store_host=store.store_host,
                                 store_timestamp=clock.now, queue_offset=res.queue_offset,
                                 physical_offset=res.phys_offsets[0], **kwargs)
        assert bytes(stored) == bytes(expected)
        assert res.sizes == (len(expected),) and res.count == 1
    assert (first.queue_offset, second.queue_offset, third.queue_offset) == (1, 2, 3)


def test_a_store_host_set_after_start_is_what_puts_write(open_store: OpenStore) -> None:
    """The broker learns its port after the store starts (port 0 in tests): every put
    path, the fast one included, must write the host it is given then."""
    store = open_store()
    store.put("T", 0, msg(b"first"))  # the topic's first put takes the general path
    store.store_host = HostAddr(b"\x7f\x00\x00\x01", 45678)
    fast = store.put("T", 0, msg(b"fast"))
    general = store.put_batch("T", 0, [msg(b"batched")])
    for res in (fast, general):
        stored = store.read_record(res.phys_offsets[0])
        assert stored is not None
        assert decode_record(stored).store_host == HostAddr(b"\x7f\x00\x00\x01", 45678)
    store.store_host = HostAddr(b"\x00" * 15 + b"\x01", 45678)  # IPv6: the general path
    v6 = store.put("T", 0, msg(b"v6"))
    stored = store.read_record(v6.phys_offsets[0])
    assert stored is not None and decode_record(stored).store_host.port == 45678


def test_put_results_keep_their_fields(open_store: OpenStore) -> None:
    store = open_store()
    res = store.put("T", 0, msg(b"a"))
    assert isinstance(res, PutResult)
    assert res.status is PutStatus.PUT_OK and res.durable is None
    assert res.wait_durable() is PutStatus.PUT_OK
    batch = store.put_batch("T", 0, [msg(b"b"), msg(b"c")])
    assert batch.count == 2 and batch.queue_offset == 1


def test_rows_become_visible_in_every_queue(open_store: OpenStore) -> None:
    store = open_store()
    for i in range(40):
        store.put("T", i % 4, msg(b"m%d" % i, tags="t"))
        if i == 20:
            store.put_batch("T", 1, [msg(b"batch-1"), msg(b"batch-2")])  # breaks the run
    assert store.wait_dispatched()
    assert [store.max_offset("T", q) for q in range(4)] == [10, 12, 10, 10]
    got: list[bytes] = []
    while len(got) < 12:
        got += [bytes(r.body) for r in records(store.get("T", 1, len(got), 64))]
    assert got[4:8] == [b"m17", b"batch-1", b"batch-2", b"m21"]


def _row(end: int, ts: int, queue: int, qo: int, keys: tuple[str, ...] | None = None) -> Row:
    return (end, ts, ("T", queue), qo, end - 10, 10, 0, keys)


def test_fold_rows_one_batch_per_queue() -> None:
    rows = [_row(10 * (i + 1), 5 + i // 4, i % 2, i // 2) for i in range(8)]
    batches = fold_rows(rows)
    assert [(b.queue_id, b.queue_offset, list(b.phys)) for b in batches] == [
        (0, 0, [0, 20, 40, 60]), (1, 0, [10, 30, 50, 70])]
    assert batches[-1].end == 80 and batches[0].store_timestamp == 6  # the newest record's


def test_fold_rows_splits_per_millisecond_where_time_is_stored() -> None:
    rows = [_row(10 * (i + 1), 5 + i // 4, 0, i) for i in range(8)]
    timed = fold_rows(rows, timed=lambda topic, queue_id: True)
    assert [(b.queue_offset, b.store_timestamp, len(b.phys)) for b in timed] == [
        (0, 5, 4), (4, 6, 4)]
    keyed = fold_rows([(*r[:7], ("k",)) for r in rows])
    assert [b.store_timestamp for b in keyed] == [5, 6]
    assert keyed[0].keys is not None and list(keyed[0].keys) == [("k",)] * 4


def test_fold_rows_never_joins_offsets_that_do_not_follow() -> None:
    rows = [_row(10, 5, 0, 7), _row(20, 5, 0, 0)]  # the queue was reset in between
    assert [(b.queue_offset, len(b.phys)) for b in fold_rows(rows)] == [(7, 1), (0, 1)]


def test_fold_rows_neighbours_only_keeps_log_order() -> None:
    rows = [_row(10, 5, 0, 0), _row(20, 5, 0, 1), _row(30, 5, 1, 0), _row(40, 5, 0, 2)]
    batches = fold_rows(rows, across_queues=False)
    assert [list(b.phys) for b in batches] == [[0, 10], [20], [30]]
    assert all(isinstance(b, DispatchBatch) for b in batches)


def test_flush_group_wakes_every_member() -> None:
    group = FlushGroup()
    deadline = time.monotonic() + 10
    fut = group.future(deadline)
    assert group.future(deadline) is fut  # one future per member
    seen: list[FlushStatus] = []
    threads = [threading.Thread(target=lambda: seen.append(group.wait(deadline)))
               for _ in range(5)]
    for t in threads:
        t.start()
    group.finish(FlushStatus.FLUSHED)
    group.finish(FlushStatus.WRITE_ERROR)  # the first call wins
    for t in threads:
        t.join(10)
    assert seen == [FlushStatus.FLUSHED] * 5 and fut.result(0) is FlushStatus.FLUSHED
    assert FLUSHED_GROUP.wait(0.0) is FlushStatus.FLUSHED
    assert FLUSHED_GROUP.future(deadline).result(0) is FlushStatus.FLUSHED
    assert FLUSHED_GROUP.expire(time.monotonic()) is None  # keeps no futures


def test_flush_group_deadline_and_timeout() -> None:
    group = FlushGroup()
    past = time.monotonic() - 1
    assert group.wait(past) is FlushStatus.FLUSH_DISK_TIMEOUT
    assert group.future(past).result(0) is FlushStatus.FLUSH_DISK_TIMEOUT
    later = time.monotonic() + 60
    with pytest.raises(TimeoutError):
        group.wait(later, timeout=0.01)  # the caller's patience ran out, not the deadline
    fut = group.future(later)
    assert group.expire(time.monotonic()) == later and not fut.done()
    assert group.expire(later) is None and fut.result(0) is FlushStatus.FLUSH_DISK_TIMEOUT


def test_sync_puts_share_group_commits(open_store: OpenStore,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(**SYNC)
    results: list[PutStatus] = []
    # a slow disk: the first flush lasts until every writer has appended, as a real
    # fdatasync lasts while others append (on tmpfs each flush would end before the next
    # put arrives, and nothing would be shared)
    appended = threading.Semaphore(0)
    flush = store.commitlog.flush
    slowed = threading.Event()

    def slow_first_flush() -> int:  # the flusher's thread only
        if not slowed.is_set():
            slowed.set()
            for _ in range(8):
                assert appended.acquire(timeout=10)
        return flush()

    monkeypatch.setattr(store.commitlog, "flush", slow_first_flush)

    def worker(k: int) -> None:
        for i in range(20):
            put = store.put("T", k, msg(b"%d-%d" % (k, i)))
            if i == 0:
                appended.release()
            results.append(put.wait_durable(10))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [PutStatus.PUT_OK] * 160
    assert store.flusher is not None and store.flusher.flush_count < 160
    assert store.commitlog.flushed_offset == store.commitlog.max_offset
    res = store.put("T", 0, msg(b"last"))
    assert res.durable is res.durable  # the same future on every access
    assert res.durable is not None and res.durable.result(10) is FlushStatus.FLUSHED


def test_batches_write_the_bytes_encode_record_writes(open_store: OpenStore) -> None:
    clock = FakeClock(1_700_000_000_456)
    store = open_store(clock=clock, mapped_file_size_commit_log=1 << 20)
    for queue_id, born, grow in ((2, BORN, 0), (5, None, 0), (6, BORN, 1)):
        msgs = [MessageInput(b"%03d" % i + b"y" * (20 + grow * i),  # grow: not uniform
                             b"TAGS\x01t%d\x02" % (i % 10), flag=i % 3, tags_code=i)
                for i in range(12)]
        res = store.put_batch("Uniform", queue_id, msgs, sys_flag=0x2, born_timestamp=77,
                              born_host=born, reconsume_times=1)
        for i, (m, phys) in enumerate(zip(msgs, res.phys_offsets, strict=True)):
            stored = store.read_record(phys)
            assert stored is not None
            assert bytes(stored) == bytes(encode_record(
                topic=b"Uniform", queue_id=queue_id, body=m.body, properties=m.properties,
                flag=m.flag, sys_flag=0x2, born_timestamp=77,
                born_host=born or store.store_host, store_host=store.store_host,
                store_timestamp=clock.now, queue_offset=res.queue_offset + i,
                physical_offset=phys, reconsume_times=1))


def test_a_uniform_batch_writes_the_bytes_encode_record_writes(open_store: OpenStore) -> None:
    """Same-sized bodies and properties take the tiled-template path; every record is
    still exactly what encode_record makes, flags, offsets and store time included."""
    clock = FakeClock(1_700_000_000_500)
    store = open_store(clock=clock, mapped_file_size_commit_log=1 << 20)
    store.put("Topic", 2, msg(b"first"))  # queue offset 0, physical offset 0: patched ones
    msgs = [MessageInput(bytes([65 + i]) * 40, b"UNIQ_KEY\x01%02d\x02" % i, flag=i % 3,
                         tags_code=i) for i in range(12)]
    res = store.put_batch("Topic", 2, msgs, sys_flag=0x2, born_timestamp=77, born_host=BORN,
                          reconsume_times=1)
    assert res.queue_offset == 1 and res.count == 12
    for i, (phys, size) in enumerate(zip(res.phys_offsets, res.sizes, strict=True)):
        stored = store.read_record(phys)
        assert stored is not None
        expected = encode_record(topic=b"Topic", queue_id=2, body=msgs[i].body,
                                 properties=msgs[i].properties, flag=msgs[i].flag, sys_flag=0x2,
                                 born_timestamp=77, born_host=BORN, store_host=store.store_host,
                                 store_timestamp=clock.now, queue_offset=1 + i,
                                 physical_offset=phys, reconsume_times=1)
        assert bytes(stored) == bytes(expected) and size == len(expected)
    assert store.wait_dispatched()
    got = [r.body for r in records(store.get("Topic", 2, 1, 64))]
    assert got == [m.body for m in msgs]


def test_put_without_a_cached_layout_writes_the_same_bytes(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past LAYOUTS_PER_TOPIC shapes a topic's puts are packed and joined instead."""
    monkeypatch.setattr("tidemq.store.appender.LAYOUTS_PER_TOPIC", 1)
    clock = FakeClock(1_700_000_000_900)
    store = open_store(clock=clock)
    store.put("T", 0, msg(b"first"))
    results = [store.put("T", 0, MessageInput(b"y" * n, b"KEYS\x01k\x02", flag=n))
               for n in (3, 4, 5)]
    for n, res in zip((3, 4, 5), results, strict=True):
        stored = store.read_record(res.phys_offsets[0])
        assert stored is not None
        assert bytes(stored) == bytes(encode_record(
            topic=b"T", queue_id=0, body=b"y" * n, properties=b"KEYS\x01k\x02", flag=n,
            born_timestamp=clock.now, store_host=store.store_host, born_host=store.store_host,
            store_timestamp=clock.now, queue_offset=res.queue_offset,
            physical_offset=res.phys_offsets[0]))


def test_a_put_with_a_field_out_of_range_leaves_no_partial_record(
        open_store: OpenStore) -> None:
    store = open_store()
    store.put("T", 0, msg(b"first"))
    end = store.commitlog.max_offset
    with pytest.raises(Exception, match=r"format requires|out of range|argument"):
        store.put("T", 0, MessageInput(b"body", flag=1 << 40))
    assert store.commitlog.max_offset == end
    tail = store.commitlog.segments[-1].mm[end : end + 200]
    assert tail == bytes(200)  # nothing half-written past the end
    ok = store.put("T", 0, msg(b"after"))
    assert ok.queue_offset == 1 and ok.phys_offsets[0] == end


def test_memoryview_properties_write_the_same_bytes(open_store: OpenStore) -> None:
    clock = FakeClock(1_700_000_001_000)
    store = open_store(clock=clock)
    store.put("T", 0, msg(b"first"))
    store.put("T", 0, MessageInput(b"abc", b"KEYS\x01k\x02"))  # the shape gets a layout
    res = store.put("T", 0, MessageInput(b"abc", memoryview(b"KEYS\x01k\x02")))  # type: ignore[arg-type]
    stored = store.read_record(res.phys_offsets[0])
    assert stored is not None
    assert bytes(stored) == bytes(encode_record(
        topic=b"T", queue_id=0, body=b"abc", properties=b"KEYS\x01k\x02",
        born_timestamp=clock.now, store_host=store.store_host, born_host=store.store_host,
        store_timestamp=clock.now, queue_offset=2, physical_offset=res.phys_offsets[0]))


@given(end=st.integers(1, 2**62), ts=st.integers(0, 2**62), queue=st.integers(0, 7),
       qo=st.integers(0, 2**62), keys=st.none() | st.tuples(st.text(max_size=4)),
       across=st.booleans(), timed=st.booleans())
def test_fold_rows_of_one_row_is_the_batch_of_its_record(
        end: int, ts: int, queue: int, qo: int, keys: tuple[str] | None, across: bool,
        timed: bool) -> None:
    row: Row = (end, ts, ("T", queue), qo, end - 1, 1, 7, keys)
    other: Row = (end + 1, ts, ("T", queue + 8), 0, end, 1, 0, keys)  # another queue
    alone = fold_rows([row], across, lambda _topic, _queue: timed)
    # The same batch as the general path gives the row among others.
    among = fold_rows([row, other], across, lambda _topic, _queue: timed)
    assert alone == [among[0]] == [DispatchBatch(
        "T", queue, qo, [end - 1], [1], [7], ts, end, None if keys is None else [keys])]


def test_fold_rows_a_queue_of_one_row_is_that_row() -> None:
    rows = [_row(10, 5, 0, 3, ("a",)), _row(20, 6, 1, 0, ("b",)), _row(30, 6, 2, 9),
            _row(40, 7, 0, 4, ("c",))]
    batches = fold_rows(rows, timed=lambda topic, queue_id: True)
    assert [(b.queue_id, b.queue_offset, list(b.phys), list(b.sizes), b.store_timestamp,
             b.end, None if b.keys is None else list(b.keys)) for b in batches] == [
        (0, 3, [0], [10], 5, 10, [("a",)]), (1, 0, [10], [10], 6, 20, [("b",)]),
        (2, 9, [20], [10], 6, 30, None), (0, 4, [30], [10], 7, 40, [("c",)])]


def test_fold_rows_keyed_rows_of_one_millisecond_are_one_batch() -> None:
    rows = [_row(10 * (i + 1), 5, i % 2, i // 2, (f"k{i}",)) for i in range(6)]
    batches = fold_rows(rows, timed=lambda topic, queue_id: True)
    assert [(b.queue_id, b.queue_offset, list(b.phys), b.store_timestamp,
             list(b.keys or ())) for b in batches] == [
        (0, 0, [0, 20, 40], 5, [("k0",), ("k2",), ("k4",)]),
        (1, 0, [10, 30, 50], 5, [("k1",), ("k3",), ("k5",)])]


@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9),
                               st.one_of(st.none(), st.just(("k",)))), min_size=2,
                     max_size=12, unique_by=lambda r: r[1]),
       timed=st.booleans())
def test_fold_rows_of_a_row_a_queue_is_each_row_alone(
        rows: list[tuple[int, int, tuple[str] | None]], timed: bool) -> None:
    """A round whose rows each go to a queue of their own (a shared send parent's) folds
    to what folding only neighbours gives: a batch a row, in log order."""
    folded: list[Row] = [(10 * (i + 1), 5 + ts, ("T", queue), 3, 10 * i, 10, 7, keys)
                         for i, (ts, queue, keys) in enumerate(rows)]
    got = fold_rows(folded, timed=lambda _topic, _queue: timed)
    assert got == fold_rows(folded, across_queues=False)
    assert [b.end for b in got] == [r[0] for r in folded]


@given(queues=st.lists(st.integers(0, 3), min_size=2, max_size=16),
       resets=st.sets(st.integers(0, 15)), keyed=st.booleans())
def test_fold_rows_of_a_millisecond_a_row_is_each_row_alone(
        queues: list[int], resets: set[int], keyed: bool) -> None:
    """Rows of queues written once a millisecond (a round of several shared send
    parents) fold, where time or keys are stored per record, as folding only neighbours
    folds them: a batch a row, in log order, a reset queue offset included."""
    nexts = dict.fromkeys(queues, 0)
    rows: list[Row] = []
    for i, queue in enumerate(queues):
        qo = 0 if i in resets else nexts[queue]
        nexts[queue] = qo + 1
        rows.append((10 * (i + 1), 5 + i, ("T", queue), qo, 10 * i, 10, 7,
                     ("k",) if keyed else None))
    got = fold_rows(rows, timed=lambda _topic, _queue: not keyed)
    assert got == fold_rows(rows, across_queues=False)


@st.composite
def _column_parts(draw: st.DrawFn) -> list[list[int]]:
    """A queue's batches' columns: mostly one value repeated (the same int object in a
    batch, equal ints in others), sometimes other values in some."""
    v = draw(st.integers(250, 2**31))
    part = st.one_of(
        st.builds(lambda n: [v] * n, st.integers(1, 6)),
        st.builds(lambda n: [int(str(v)) for _ in range(n)], st.integers(1, 6)),
        st.lists(st.integers(0, 2**40), min_size=1, max_size=6),
        st.builds(lambda n, w: [v] * n + [w] + [v], st.integers(1, 3), st.integers(0, 300)),
    )
    return draw(st.lists(part, min_size=1, max_size=5))


@given(_column_parts())
def test_a_joined_column_is_its_parts_end_to_end(parts: list[list[int]]) -> None:
    """The dispatcher's column of one queue's batches, given what the dispatcher gives it:
    the one value every batch repeats, if any. A column of one repeated value is one int
    object (what consume_queue's test for a repeated value compares)."""
    from tidemq.store.dispatch import _joined, _one_value

    flat = [v for p in parts for v in p]
    joined = _joined(list(parts), _one_value(list(parts)))
    assert list(joined) == flat
    if len(set(flat)) == 1:
        assert len({id(v) for v in joined}) == 1
