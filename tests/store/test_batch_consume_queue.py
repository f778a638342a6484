"""BatchConsumeQueue (RIP-26): the 46-byte entry, floor lookups across files, whole-batch
reads, and recovery of batch consume queues from the commit log."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.errors import QueueGap
from tidemq.formats.batch import encode_batch
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import Record
from tidemq.store.batch_consume_queue import BCQ_DTYPE, BCQ_UNIT, BatchConsumeQueue
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageStore
from tidemq.types import GetStatus

from .conftest import FakeClock, OpenStore, crash_copy, msg, records

TOPIC = "Bcq"


def entry_bytes(phys: int, size: int, tags: int, store_ts: int, base: int, batch: int) -> bytes:
    return struct.pack(
        ">qiqqqhii",
        phys,      # 0   commit-log offset of the record
        size,      # 8   TOTALSIZE
        tags,      # 12  tags code
        store_ts,  # 20  store timestamp
        base,      # 28  msgBaseOffset: first queue offset covered
        batch,     # 36  batchSize (short)
        -1,        # 38  compactedOffset, written as -1
        0,         # 42  reserved
    )


def test_entry_golden_bytes(tmp_path: Path) -> None:
    bcq = BatchConsumeQueue(StoreLayout(tmp_path), TOPIC, 0, BCQ_UNIT * 8)
    bcq.append(0, [0, 500], [500, 120], [-7, 2**40], store_ts=[1_700_000_000_123, 5],
               batch_sizes=[100, 1])
    bcq.append(101, [620], [77], [0], store_ts=9, batch_sizes=[32767])
    bcq.flush()
    raw = (tmp_path / "batchconsumequeue" / TOPIC / "0" / "00000000000000000000").read_bytes()
    assert raw[: 3 * BCQ_UNIT] == (
        entry_bytes(0, 500, -7, 1_700_000_000_123, 0, 100)
        + entry_bytes(500, 120, 2**40, 5, 100, 1)
        + entry_bytes(620, 77, 0, 9, 101, 32767)
    )
    assert raw[3 * BCQ_UNIT :] == bytes(5 * BCQ_UNIT)
    assert (bcq.min_offset, bcq.max_offset, bcq.max_phys_end) == (0, 32868, 697)
    bcq.close()


def test_dtype_matches_the_spec_offsets() -> None:
    assert BCQ_UNIT == 46
    assert [BCQ_DTYPE.fields[name][1] for name in BCQ_DTYPE.names] == [
        0, 8, 12, 20, 28, 36, 38, 42]


def test_rejects_out_of_range_batch_sizes(tmp_path: Path) -> None:
    bcq = BatchConsumeQueue(StoreLayout(tmp_path), TOPIC, 0, BCQ_UNIT * 8)
    for bad in (0, -1, 32768):
        with pytest.raises(ValueError, match="batch sizes"):
            bcq.append(0, [0], [10], [0], batch_sizes=[bad])
    assert bcq.max_offset == 0 and not bcq.files


def test_rejects_out_of_range_batch_sizes_in_a_large_append(tmp_path: Path) -> None:
    bcq = BatchConsumeQueue(StoreLayout(tmp_path), TOPIC, 0, BCQ_UNIT * 32)
    with pytest.raises(ValueError, match="batch sizes"):
        bcq.append(0, list(range(0, 1200, 100)), [100] * 12, [0] * 12,
                   batch_sizes=[1] * 11 + [32768])
    assert bcq.max_offset == 0 and not bcq.files


# ---------------------------------------------------------------------- property tests


@settings(deadline=None, max_examples=100)
@given(entries=st.lists(st.tuples(st.integers(1, 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
                                  st.integers(0, 2**62), st.integers(1, 0x7FFF)),
                        min_size=1, max_size=40),
       chunks=st.lists(st.integers(1, 20), min_size=1, max_size=40),
       per_file=st.integers(1, 12), one_time=st.booleans())
def test_appends_of_any_size_write_the_entry_layout(
        tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[int, int, int, int]],
        chunks: list[int], per_file: int, one_time: bool) -> None:
    """Small appends (packed entry by entry) and large ones (columns) write the same
    bytes: the layout table's, across files."""
    root = tmp_path_factory.mktemp("bcq")
    bcq = BatchConsumeQueue(StoreLayout(root), TOPIC, 0, BCQ_UNIT * per_file)
    expected = b""
    phys_at, base, i = 0, 0, 0
    chunk_iter = iter(chunks)
    while i < len(entries):
        part = entries[i : i + next(chunk_iter, len(entries))]
        phys = []
        for size, _, _, _ in part:
            phys.append(phys_at)
            phys_at += size
        stamps: int | list[int] = 77 if one_time else [s for _, _, s, _ in part]
        assert bcq.append(base, phys, [p[0] for p in part], [p[1] for p in part],
                          store_ts=stamps, batch_sizes=[p[3] for p in part]) == (
            base + sum(p[3] for p in part))
        for at, (size, tags, stamp, count) in zip(phys, part, strict=True):
            expected += entry_bytes(at, size, tags, 77 if one_time else stamp, base, count)
            base += count
        i += len(part)
    bcq.flush()
    written = b"".join(mf.view[: mf.wrote].tobytes() for mf in bcq.files)
    assert written == expected
    assert (bcq.max_offset, bcq.max_phys_end) == (base, phys_at)
    assert bcq._first_bases == [int.from_bytes(expected[k + 28 : k + 36], "big")
                                for k in range(0, len(expected), per_file * BCQ_UNIT)]
    bcq.close()


def _outcome(append: Callable[..., int], *args: Any, **kwargs: Any) -> int | str:
    """What an append returned, or the text of the ValueError it raised."""
    try:
        return append(*args, **kwargs)
    except ValueError as exc:
        return str(exc)


@settings(deadline=None, max_examples=100)
@given(entries=st.lists(st.tuples(st.integers(1, 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
                                  st.integers(0, 2**62), st.integers(-2, 0x8001)),
                        min_size=1, max_size=30),
       per_file=st.integers(1, 6), first_base=st.sampled_from([0, 0, 7, 1000]),
       again=st.integers(0, 3))
def test_one_entry_appends_are_appends_of_one(
        tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[int, int, int, int]],
        per_file: int, first_base: int, again: int) -> None:
    """append_entry (a dispatch round of one inner batch) and append of one record: the
    same bytes across files, the same offsets, the same refusals (a batch size out of
    range, a gap) and the same skipping of records dispatched again."""
    queues = [BatchConsumeQueue(StoreLayout(tmp_path_factory.mktemp(name)), TOPIC, 0,
                                BCQ_UNIT * per_file) for name in ("many", "one")]
    many, one = queues
    phys_at, base = 0, first_base
    done: list[tuple[int, int, int, int, int, int]] = []
    for size, tags, stamp, count in entries:
        outcomes = [_outcome(many.append, base, [phys_at], [size], [tags], store_ts=stamp,
                             batch_sizes=[count]),
                    _outcome(one.append_entry, base, phys_at, size, tags, stamp, count)]
        assert outcomes[0] == outcomes[1]
        assert (one.min_offset, one.max_offset, one.max_phys_end) == (
            many.min_offset, many.max_offset, many.max_phys_end)
        if isinstance(outcomes[0], int):
            done.append((base, phys_at, size, tags, stamp, count))
            base += count
            phys_at += size
    for entry in done[-again:] if again else ():  # dispatched again: nothing changes
        b, p, size, tags, stamp, count = entry
        assert one.append_entry(b, p, size, tags, stamp, count) == one.max_offset
    if done:  # a queue that holds entries refuses one past a gap
        with pytest.raises(QueueGap):
            many.append(many.max_offset + 1, [phys_at], [10], [0], batch_sizes=[1])
        with pytest.raises(QueueGap):
            one.append_entry(one.max_offset + 1, phys_at, 10, 0, 0, 1)
    written = [b"".join(mf.view[: mf.wrote].tobytes() for mf in q.files) for q in queues]
    assert written[0] == written[1]
    assert many._first_bases == one._first_bases
    for q in queues:
        q.close()


def _build(root: Path, sizes: list[int], chunks: list[int], per_file: int,
           first_base: int) -> tuple[BatchConsumeQueue, list[int]]:
    """A queue with one entry per batch size, appended in chunks; returns the bases."""
    bcq = BatchConsumeQueue(StoreLayout(root), TOPIC, 0, BCQ_UNIT * per_file)
    bases = list(np.cumsum([first_base, *sizes[:-1]]))
    i = 0
    chunk_iter = iter(chunks)
    while i < len(sizes):
        n = min(next(chunk_iter, len(sizes)), len(sizes) - i) or 1
        phys = [1000 * k for k in range(i, i + n)]
        bcq.append(int(bases[i]), phys, [100] * n, [k for k in range(i, i + n)],
                   store_ts=[10 * k for k in range(i, i + n)], batch_sizes=sizes[i : i + n])
        i += n
    return bcq, [int(b) for b in bases]


@settings(deadline=None, max_examples=150)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=60),
    chunks=st.lists(st.integers(1, 9), max_size=30),
    per_file=st.integers(1, 7),
    first_base=st.sampled_from([0, 0, 5, 1000]),
)
def test_every_offset_finds_the_entry_containing_it(tmp_path_factory: pytest.TempPathFactory,
                                                   sizes: list[int], chunks: list[int],
                                                   per_file: int, first_base: int) -> None:
    root = tmp_path_factory.mktemp("bcq")
    bcq, bases = _build(root, sizes, chunks, per_file, first_base)
    end = bases[-1] + sizes[-1]
    assert (bcq.min_offset, bcq.max_offset) == (first_base, end)
    assert len(bcq.files) == -(-len(sizes) // per_file)

    def check(q: BatchConsumeQueue) -> None:
        for k, (base, size) in enumerate(zip(bases, sizes, strict=True)):
            for offset in range(base, base + size):
                got = q.entries(offset, 1000)
                assert len(got) >= 1
                assert (int(got["base"][0]), int(got["batch"][0])) == (base, size)
                assert int(got["phys"][0]) == 1000 * k
                assert int(got["store_ts"][0]) == 10 * k
                # the rest of that entry's file, and nothing of the next file
                assert len(got) == min(len(sizes), (k // per_file + 1) * per_file) - k
            assert q.store_time_at(base) == 10 * k
            assert q.offset_by_time(10 * k) == base
        assert not len(q.entries(end, 10))
        assert not len(q.entries(first_base - 1, 10)) if first_base else True
        assert q.offset_by_time(10 * len(sizes)) == end

    check(bcq)
    bcq.close()
    reloaded = BatchConsumeQueue(StoreLayout(root), TOPIC, 0, BCQ_UNIT * per_file)
    reloaded.load()
    assert (reloaded.min_offset, reloaded.max_offset) == (first_base, end)
    check(reloaded)
    # dropping the records from the k-th on leaves exactly the first k entries
    keep = len(sizes) // 2
    reloaded.truncate_phys(1000 * keep)
    assert reloaded.max_offset == (bases[keep] if keep < len(sizes) else end)
    reloaded.close()


@settings(deadline=None, max_examples=60)
@given(sizes=st.lists(st.integers(1, 30), min_size=2, max_size=40), per_file=st.integers(1, 5))
def test_redispatch_is_idempotent_and_gaps_refused(tmp_path_factory: pytest.TempPathFactory,
                                                   sizes: list[int], per_file: int) -> None:
    root = tmp_path_factory.mktemp("bcq")
    bcq, _ = _build(root, sizes, [], per_file, 0)
    before = [bytes(mf.view[: mf.wrote]) for mf in bcq.files]
    # the same records again (what recovery does): nothing changes
    bcq.append(0, [1000 * k for k in range(len(sizes))], [100] * len(sizes),
               list(range(len(sizes))), batch_sizes=sizes)
    assert [bytes(mf.view[: mf.wrote]) for mf in bcq.files] == before
    with pytest.raises(QueueGap):
        bcq.append(bcq.max_offset + 1, [10**9], [100], [0])
    bcq.close()


# ---------------------------------------------------------------------- the store


def inner(count: int, start: int = 0, size: int = 12) -> bytes:
    return encode_batch([
        ((b"%06d" % (start + i)) * (size // 6),
         encode_properties({"UNIQ_KEY": f"K{start + i}", "TAGS": "t"}), i)
        for i in range(count)
    ])


def put_inner(store: MessageStore, count: int, start: int = 0, queue_id: int = 0,
              tags: str = "t") -> int:
    result = store.put_inner_batch(
        TOPIC, queue_id, inner(count, start), encode_properties({"UNIQ_KEY": f"B{start}",
                                                                 "TAGS": tags}),
        count, tags_code=tags_code(tags))
    return result.queue_offset


def bcq_entries(store: MessageStore, queue_id: int = 0) -> list[tuple[int, ...]]:
    bcq = store.queues.get(TOPIC, queue_id)
    assert isinstance(bcq, BatchConsumeQueue)
    out: list[tuple[int, ...]] = []
    for mf in bcq.files:
        arr = np.frombuffer(mf.view, dtype=BCQ_DTYPE, count=mf.wrote // BCQ_UNIT)
        out += [tuple(int(x) for x in row) for row in arr.tolist()]
    return out


@pytest.fixture
def batch_store(open_store: OpenStore) -> MessageStore:
    store = open_store(clock=FakeClock(5000), mapper_file_size_batch_consume_queue=BCQ_UNIT * 4)
    store.set_batch_topic(TOPIC)
    return store


def test_inner_batches_take_consecutive_ranges(batch_store: MessageStore) -> None:
    store = batch_store
    assert [put_inner(store, n, s) for n, s in ((3, 0), (1, 3), (5, 4))] == [0, 3, 4]
    store.put(TOPIC, 0, msg(b"single"))  # an ordinary record: one entry of one message
    store.put_batch(TOPIC, 0, [msg(b"o1"), msg(b"o2")])  # outer batch: one entry each
    assert store.wait_dispatched()
    assert store.max_offset(TOPIC, 0) == 12
    assert [(e[4], e[5]) for e in bcq_entries(store)] == [
        (0, 3), (3, 1), (4, 5), (9, 1), (10, 1), (11, 1)]
    rec = records(store.get(TOPIC, 0, 0, max_count=1))[0]
    props = decode_properties(rec.properties)
    assert (props["INNER_NUM"], props["INNER_BASE"], rec.queue_offset) == ("3", "0", 0)
    assert rec.sys_flag & 0xC0 == 0xC0


def test_pulls_return_whole_batches(batch_store: MessageStore) -> None:
    store = batch_store
    for start, n in ((0, 10), (10, 10), (20, 10)):
        put_inner(store, n, start)
    assert store.wait_dispatched()
    mid = store.get(TOPIC, 0, 15, max_count=1)  # inside the second batch
    got = records(mid)
    assert [r.queue_offset for r in got] == [10]
    assert (mid.status, mid.next_begin_offset, mid.message_count) == (GetStatus.FOUND, 20, 10)
    # each entry counts as its batch size toward max_count; the first is always admitted
    two = store.get(TOPIC, 0, 0, max_count=25)
    assert [r.queue_offset for r in records(two)] == [0, 10]
    assert (two.next_begin_offset, two.message_count) == (20, 20)
    all_ = store.get(TOPIC, 0, 3, max_count=30)
    assert [r.queue_offset for r in records(all_)] == [0, 10, 20]
    assert all_.next_begin_offset == 30
    assert store.get(TOPIC, 0, 30).status is GetStatus.OFFSET_OVERFLOW_ONE
    # byte limit: the first batch alone is over it, it comes anyway
    small = store.get(TOPIC, 0, 29, max_bytes=10)
    assert ([r.queue_offset for r in records(small)], small.next_begin_offset) == ([20], 30)


def test_tag_filter_sees_the_outer_tags(batch_store: MessageStore) -> None:
    store = batch_store
    put_inner(store, 4, 0, tags="a")
    put_inner(store, 4, 4, tags="b")
    put_inner(store, 4, 8, tags="a")
    assert store.wait_dispatched()
    got = store.get(TOPIC, 0, 0, max_count=100, tag_codes=frozenset({tags_code("b")}))
    assert [r.queue_offset for r in records(got)] == [4]
    assert got.next_begin_offset == 12


def _state(store: MessageStore) -> tuple[object, ...]:
    assert store.wait_dispatched()
    return (bcq_entries(store), store.min_offset(TOPIC, 0), store.max_offset(TOPIC, 0),
            store.next_queue_offset(TOPIC, 0))


def _fill(store: MessageStore, clock: FakeClock) -> None:
    start = 0
    for i in range(14):  # crosses BCQ files (4 entries each) and commit-log segments
        clock.now += 1
        n = 1 + (i * 7) % 11
        put_inner(store, n, start)
        start += n


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage"])
def test_damaged_bcq_files_are_rebuilt(open_store: OpenStore, store_root: Path,
                                       tmp_path: Path, damage: str) -> None:
    clock = FakeClock(9000)
    store = open_store(clock=clock, mapper_file_size_batch_consume_queue=BCQ_UNIT * 4)
    store.set_batch_topic(TOPIC)
    _fill(store, clock)
    want = _state(store)
    store.shutdown()
    qdir = store_root / "batchconsumequeue" / TOPIC / "0"
    files = sorted(qdir.iterdir())
    assert len(files) >= 3
    if damage == "delete":
        for f in files[1:]:
            f.unlink()
    elif damage == "truncate":
        data = files[-1].read_bytes()
        files[-1].write_bytes(data[: BCQ_UNIT + 11] + bytes(len(data) - BCQ_UNIT - 11))
    else:
        with files[-2].open("r+b") as f:
            f.seek(2 * BCQ_UNIT)
            f.write(b"\xff" * BCQ_UNIT)  # a negative commit-log offset: not a valid entry
    (store_root / "abort").touch()  # make the restart distrust the derived files
    reopened = open_store(clock=clock, mapper_file_size_batch_consume_queue=BCQ_UNIT * 4)
    assert reopened.is_batch_topic(TOPIC)  # the directory says so
    assert _state(reopened) == want
    put_inner(reopened, 3, 10_000)
    assert reopened.wait_dispatched()
    assert bcq_entries(reopened)[-1][4:6] == (want[2], 3)


def test_crash_copy_recovers_the_same_entries(open_store: OpenStore, tmp_path: Path) -> None:
    clock = FakeClock(9000)
    store = open_store(clock=clock, mapper_file_size_batch_consume_queue=BCQ_UNIT * 4)
    store.set_batch_topic(TOPIC)
    _fill(store, clock)
    want = _state(store)
    copy = crash_copy(store, tmp_path / "crashed")
    reopened = open_store(copy, clock=clock, mapper_file_size_batch_consume_queue=BCQ_UNIT * 4)
    assert reopened.recovery_report is not None and not reopened.recovery_report.clean
    assert _state(reopened) == want


_WRITER = textwrap.dedent("""
    import json, os, signal, sys
    from tidemq.formats.batch import encode_batch
    from tidemq.formats.properties import encode_properties
    from tidemq.store.config import StoreConfig
    from tidemq.store.message_store import MessageStore
    from tidemq.types import FlushDiskType

    root, count = sys.argv[1], int(sys.argv[2])
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=4096,
                                     mapper_file_size_batch_consume_queue=46 * 4,
                                     flush_disk_type=FlushDiskType.SYNC_FLUSH))
    store.start()
    store.set_batch_topic("Bcq")
    acked = []
    for i in range(count):
        n = 1 + i % 9
        body = encode_batch([(b"m%d-%d" % (i, k), encode_properties({"UNIQ_KEY": f"K{i}-{k}"}),
                              0) for k in range(n)])
        r = store.put_inner_batch("Bcq", 0, body, encode_properties({"UNIQ_KEY": f"B{i}"}), n)
        r.wait_durable(10)
        acked.append([r.queue_offset, n, r.phys_offsets[0]])
    store.wait_dispatched()
    print(json.dumps(acked), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_kill9_writer_loses_no_acknowledged_batch(tmp_path: Path, open_store: OpenStore) -> None:
    root = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", _WRITER, str(root), "40"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    acked = json.loads(proc.stdout)
    store = open_store(root, mapper_file_size_batch_consume_queue=BCQ_UNIT * 4)
    assert store.is_batch_topic(TOPIC)
    assert store.recovery_report is not None and not store.recovery_report.clean
    assert store.wait_dispatched()
    entries = bcq_entries(store)
    assert [(e[4], e[5], e[0]) for e in entries] == [tuple(a) for a in acked]
    end = acked[-1][0] + acked[-1][1]
    assert store.max_offset(TOPIC, 0) == store.next_queue_offset(TOPIC, 0) == end
    got = store.get(TOPIC, 0, end - 1, max_count=1)
    (last,) = records(got)
    assert isinstance(last, Record) and last.queue_offset == acked[-1][0]


def test_a_wrong_sized_file_puts_the_queue_in_doubt(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path)
    bcq = BatchConsumeQueue(layout, TOPIC, 0, BCQ_UNIT * 4)
    bcq.append(0, [0, 10], [10, 10], [0, 0], batch_sizes=[2, 3])
    bcq.close()
    stray = layout.queue_dir(TOPIC, 0, batch=True) / "00000000000000000184"
    stray.write_bytes(b"short")
    again = BatchConsumeQueue(layout, TOPIC, 0, BCQ_UNIT * 4)
    again.load()
    assert again.damaged and not again.files and again.max_offset == 0
    assert not os.listdir(layout.queue_dir(TOPIC, 0, batch=True))


@pytest.mark.parametrize("size", [0, BCQ_UNIT, BCQ_UNIT * 4 - 1])
def test_a_file_whose_creation_a_crash_cut_short_is_set_aside(tmp_path: Path,
                                                              size: int) -> None:
    """A crash between a new file's creation and its allocation leaves it short and all
    zeros: the queue keeps its entries (no rebuild from the start of the log), as a
    consume queue does, and the file is removed."""
    layout = StoreLayout(tmp_path)
    bcq = BatchConsumeQueue(layout, TOPIC, 0, BCQ_UNIT * 4)
    bcq.append(0, [0, 10, 20, 30], [10, 10, 10, 10], [0, 0, 0, 0], batch_sizes=[2, 3, 1, 4])
    bcq.close()
    stray = layout.queue_dir(TOPIC, 0, batch=True) / "00000000000000000184"
    stray.write_bytes(bytes(size))
    again = BatchConsumeQueue(layout, TOPIC, 0, BCQ_UNIT * 4)
    again.load()
    assert not again.damaged and again.max_offset == 10
    assert not stray.exists()


def test_a_queue_in_doubt_is_rebuilt_from_the_log(open_store: OpenStore,
                                                 store_root: Path) -> None:
    clock = FakeClock(9000)
    store = open_store(clock=clock, mapper_file_size_batch_consume_queue=BCQ_UNIT * 4)
    store.set_batch_topic(TOPIC)
    _fill(store, clock)
    want = _state(store)
    store.shutdown()
    qdir = store_root / "batchconsumequeue" / TOPIC / "0"
    (qdir / sorted(os.listdir(qdir))[1]).unlink()  # a missing file in the middle
    reopened = open_store(clock=clock, mapper_file_size_batch_consume_queue=BCQ_UNIT * 4)
    assert _state(reopened) == want
