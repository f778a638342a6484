"""A replica's log: the master's bytes, cut anywhere, give the replica the master's
commit log and the same consume queues, batch consume queues, LMQ entries and index."""

from __future__ import annotations

import contextlib
import functools
import itertools
import mmap
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.errors import StoreReadOnly
from tidemq.formats.batch import encode_batch as encode_entries
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    MIN_RECORD_SIZE,
    OFF_SYSFLAG,
    SYSFLAG_COMPRESSED,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_INNER_BATCH,
    SYSFLAG_NEED_UNWRAP,
    HostAddr,
    decode_record,
)
from tidemq.store.append import MessageInput, UniformBatch
from tidemq.store.message_store import MessageStore
from tidemq.store.replica_log import ReplicaGap, SegmentSizeMismatch, _common_run

from .conftest import FakeClock, OpenStore, small_config

V6 = HostAddr(bytes(range(16)), 40002)
SEGMENT = 8192
LMQ = {"enable_lmq": True, "enable_multi_dispatch": True}
QUEUES = [("T", 0), ("T", 1), ("T", 2), ("Bcq", 0)]


def fill(store: MessageStore, rounds: int = 60) -> None:
    """Every kind of put: single (V4 and V6 hosts), batch, uniform batch, inner batch, LMQ
    fan-out, across several segment rolls."""
    store.set_batch_topic("Bcq")
    for i in range(rounds):
        props = encode_properties({"TAGS": "a", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i:04d}"})
        keys = (f"U{i:04d}", f"k{i}")  # as the broker reads them from the properties
        store.put("T", i % 3, MessageInput(b"m%d" % i * (1 + i % 9), props, keys=keys),
                  born_host=V6 if i % 7 == 0 else None)
        if i % 10 == 0:
            store.put_batch("T", 0, [MessageInput(b"b" * (i % 5 + 1), props, keys=keys)] * 12)
            data = bytes(encode_entries([(b"e%03d" % j, b"", 0) for j in range(16)]))
            store.put_batch("T", 1, UniformBatch(data, 16, len(data) // 16, 4, b"", 0, None))
            store.put_inner_batch("Bcq", 0, data, props, 16, keys=keys)
            store.put_multi_dispatch("T", 2, MessageInput(
                b"lmq%d" % i, props + b"INNER_MULTI_DISPATCH\x01%LMQ%x,%LMQ%y\x02", keys=keys),
                ["%LMQ%x", "%LMQ%y"])


def master_runs(root: Path) -> tuple[bytes, dict[str, object]]:
    """The master's whole log, and what its queues hold."""
    store = MessageStore(small_config(root, mapped_file_size_commit_log=SEGMENT, **LMQ),
                         clock=FakeClock(1_700_000_000_000))
    store.start()
    try:
        runs: list[bytes] = []
        store.add_append_hook(lambda _start, view: runs.append(bytes(view)))
        fill(store)
        assert len(store.commitlog.segments) >= 3
        return b"".join(runs), snapshot(store)
    finally:
        store.shutdown()


def snapshot(store: MessageStore) -> dict[str, object]:
    assert store.wait_dispatched()
    out: dict[str, object] = {"end": store.commitlog.max_offset}
    for topic, qid in QUEUES:
        got = store.get(topic, qid, 0, max_count=10_000, max_bytes=1 << 30)
        out[f"{topic}/{qid}"] = (store.max_offset(topic, qid),
                                 b"".join(bytes(b) for b in got.buffers))
    for name in ("%LMQ%x", "%LMQ%y"):
        got = store.get(name, 0, 0, max_count=10_000, max_bytes=1 << 30)
        out[name] = (store.max_offset(name, 0), b"".join(bytes(b) for b in got.buffers))
    out["keys"] = [bytes(v) for v in store.query_by_key("T", "k30")]
    out["uniq"] = [bytes(v) for v in store.query_by_key("T", "U0041")]
    assert out["keys"] and out["uniq"]
    return out


@functools.cache
def master() -> tuple[bytes, dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        return master_runs(Path(tmp))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(0, 10**6), max_size=40))
def test_any_cut_of_the_master_log_gives_the_masters_queues(cuts: list[int]) -> None:
    wire, expected = master()
    points = sorted({c % len(wire) for c in cuts} | {0, len(wire)})
    with tempfile.TemporaryDirectory() as tmp:
        replica = MessageStore(small_config(Path(tmp), mapped_file_size_commit_log=SEGMENT,
                                            **LMQ), clock=FakeClock(1_700_000_000_000))
        replica.start()
        try:
            replica.set_batch_topic("Bcq")
            for a, b in itertools.pairwise(points):
                assert replica.append_replicated(a, wire[a:b]) == b
            assert snapshot(replica) == expected
            replica_log = replica.replica_log
            assert replica_log is not None
            # both ways of dispatching were taken: runs as columns, the rest one by one
            assert 0 < replica_log.column_records < replica_log.records
            # what a promoted replica would put next continues the master's queues
            assert replica.next_queue_offset("T", 2) == expected["T/2"][0]  # type: ignore[index]
            assert replica.next_queue_offset("Bcq", 0) == expected["Bcq/0"][0]  # type: ignore[index]
        finally:
            replica.shutdown()


def record_bytes_before(wire: bytes, end: int) -> int:
    """The bytes of the master's records (not its BLANK ends of segment) before ``end``."""
    pos = total_bytes = 0
    while pos < end:
        seg_end = (pos // SEGMENT + 1) * SEGMENT
        total, magic = struct.unpack_from(">ii", wire, pos) if seg_end - pos >= 8 else (0, 0)
        if seg_end - pos < 8 or magic == BLANK_MAGIC:
            pos = seg_end
            continue
        assert pos + total <= end, "the replica keeps whole records"
        total_bytes += total
        pos += total
    return total_bytes


def queue_bytes(store: MessageStore) -> dict[str, bytes]:
    assert store.wait_dispatched()
    out = {}
    for topic, qid in QUEUES:
        got = store.get(topic, qid, 0, max_count=10_000, max_bytes=1 << 30)
        out[f"{topic}/{qid}"] = b"".join(bytes(b) for b in got.buffers)
    return out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(factor=st.sampled_from([0.5, 2, 4]), cuts=st.lists(st.integers(0, 10**6), max_size=30))
def test_a_replica_whose_segments_end_elsewhere_keeps_its_log_up_to_where_they_part(
        factor: float, cuts: list[int]) -> None:
    """Runs cut anywhere, except across the master's segment ends (a master's frames
    never cross them). A replica with another segment size stops where the two logs part
    -- a record that would cross its segment end, or the master's BLANK that ends inside
    its segment -- and keeps every whole record before: in its queues, and after a
    restart."""
    wire, expected = master()
    size = int(SEGMENT * factor)
    points = sorted({c % len(wire) for c in cuts} | set(range(0, len(wire), SEGMENT))
                    | {len(wire)})
    clock = FakeClock(1_700_000_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        config = small_config(Path(tmp), mapped_file_size_commit_log=size, **LMQ)
        replica = MessageStore(config, clock=clock)
        replica.start()
        try:
            replica.set_batch_topic("Bcq")
            with pytest.raises(SegmentSizeMismatch) as err:
                for a, b in itertools.pairwise(points):
                    assert replica.append_replicated(a, wire[a:b]) == b
            cut = err.value.offset
            assert (err.value.segment_size, replica.commitlog.max_offset) == (size, cut)
            assert "mappedFileSizeCommitLog" in str(err.value)
            with pytest.raises(SegmentSizeMismatch):  # and every later run
                replica.append_replicated(cut, wire[cut:])
            kept = queue_bytes(replica)
        finally:
            replica.shutdown()
        for name, got in kept.items():  # each queue: the master's first entries
            master_queue = expected[name][1]  # type: ignore[index]
            assert master_queue.startswith(got)
        assert sum(map(len, kept.values())) == record_bytes_before(wire, cut)
        again = MessageStore(config, clock=clock)
        again.start()
        try:
            again.set_batch_topic("Bcq")
            assert again.commitlog.max_offset == cut
            assert queue_bytes(again) == kept
        finally:
            again.shutdown()


def test_a_replica_without_lmq_says_so_once_and_builds_them_when_restarted_with_lmq(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wire, expected = master()
    clock = FakeClock(1_700_000_000_000)
    replica = MessageStore(small_config(tmp_path, mapped_file_size_commit_log=SEGMENT),
                           clock=clock)
    replica.start()
    try:
        replica.set_batch_topic("Bcq")
        replica.append_replicated(0, wire)
        assert replica.wait_dispatched()
        assert replica.max_offset("T", 2) == expected["T/2"][0]  # type: ignore[index]
    finally:
        replica.shutdown()
    said = [r.getMessage() for r in caplog.records if "light message queues" in r.getMessage()]
    assert len(said) == 1 and "enableLmq" in said[0]
    again = MessageStore(small_config(tmp_path, mapped_file_size_commit_log=SEGMENT, **LMQ),
                         clock=clock)
    again.start()
    try:
        again.set_batch_topic("Bcq")
        assert snapshot(again) == expected
    finally:
        again.shutdown()


def test_a_gap_is_refused_and_a_restarted_replica_continues(open_store: OpenStore) -> None:
    wire, expected = master()
    clock = FakeClock(1_700_000_000_000)
    replica = open_store(clock=clock, mapped_file_size_commit_log=SEGMENT, **LMQ)
    replica.set_batch_topic("Bcq")
    half = len(wire) // 2 + 3  # inside a record
    replica.append_replicated(0, wire[:half])
    with pytest.raises(ReplicaGap) as err:
        replica.append_replicated(half + 1, wire[half + 1 :])
    assert (err.value.expected, err.value.got) == (half, half + 1)
    replica.shutdown()  # a torn record at the end: recovery cuts it, the master resends it
    again = open_store(clock=clock, mapped_file_size_commit_log=SEGMENT, **LMQ)
    again.set_batch_topic("Bcq")
    end = again.commitlog.max_offset
    assert end < half
    again.append_replicated(end, wire[end:])
    assert snapshot(again) == expected


def test_a_replica_store_refuses_every_put(open_store: OpenStore) -> None:
    store = open_store(**LMQ)
    store.set_batch_topic("Bcq")
    store.put("T", 0, MessageInput(b"before"))
    store.replica = True
    for attempt in (
        lambda: store.put("T", 0, MessageInput(b"x")),
        lambda: store.put_batch("T", 0, [MessageInput(b"x")]),
        lambda: store.put_inner_batch("Bcq", 0, b"x", b"", 1),
        lambda: store.put_multi_dispatch("T", 0, MessageInput(
            b"x", b"INNER_MULTI_DISPATCH\x01%LMQ%a\x02"), ["%LMQ%a"]),
    ):
        with pytest.raises(StoreReadOnly) as err:
            attempt()
        assert err.value.status == "SLAVE"
    store.replica = False  # promoted: puts continue the queue
    assert store.put("T", 0, MessageInput(b"after")).queue_offset == 1


def test_bytes_are_held_before_they_are_dispatched(open_store: OpenStore) -> None:
    wire, expected = master()
    replica = open_store(clock=FakeClock(1_700_000_000_000),
                         mapped_file_size_commit_log=SEGMENT, **LMQ)
    replica.set_batch_topic("Bcq")
    assert replica.append_replicated(0, wire, dispatch=False) == len(wire)
    assert replica.wait_dispatched()
    assert replica.max_offset("T", 0) == 0  # held, not yet in a queue
    replica.dispatch_replicated()
    assert snapshot(replica) == expected


def _walked_run(mm: mmap.mmap, pos: int, limit: int) -> list[int]:
    """The record starts :func:`_common_run` walks past, record by record (its end is the
    last of them)."""
    starts = [pos]
    while pos + OFF_SYSFLAG + 4 <= limit:
        total, magic = struct.unpack_from(">ii", mm, pos)
        flags = struct.unpack_from(">i", mm, pos + OFF_SYSFLAG)[0]
        if (magic != MAGIC_V1 or total < MIN_RECORD_SIZE or pos + total > limit
                or flags & (SYSFLAG_HOSTS_V6 | SYSFLAG_COMPRESSED | SYSFLAG_INNER_BATCH
                            | SYSFLAG_NEED_UNWRAP | 0xC)):
            break
        pos += total
        starts.append(pos)
    return starts


@settings(max_examples=60, deadline=None)
@given(a=st.integers(0, 10**6), b=st.integers(0, 10**6))
def test_a_common_run_is_found_as_record_by_record(a: int, b: int) -> None:
    wire, _ = master()
    starts = [0]  # record starts, to begin the run on one
    while starts[-1] + 8 <= len(wire) and struct.unpack_from(">i", wire, starts[-1])[0] > 0:
        starts.append(starts[-1] + struct.unpack_from(">i", wire, starts[-1])[0])
    pos = starts[a % len(starts)]
    limit = pos + b % (len(wire) - pos + 1)
    mm = mmap.mmap(-1, len(wire))
    mm[:] = wire
    try:
        assert _common_run(mm, pos, limit) == _walked_run(mm, pos, limit)[-1]
    finally:
        mm.close()


def test_a_common_run_stops_at_an_ipv6_record_as_long_as_the_others(
        open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=1 << 16)
    props = encode_properties({"UNIQ_KEY": "U0"})
    store.put_batch("T", 0, [MessageInput(b"x" * 40, props, keys=("U0",))] * 40)
    store.put("T", 0, MessageInput(b"x" * 28, props, keys=("U0",)), born_host=V6)
    store.put("T", 0, MessageInput(b"x" * 40, props, keys=("U0",)))
    seg = store.commitlog.segments[0]
    size = struct.unpack_from(">i", seg.mm, 0)[0]
    limit = store.commitlog.max_offset
    assert limit == 42 * size  # all the records are as long
    assert _walked_run(seg.mm, 0, limit) == [size * i for i in range(41)]
    assert _common_run(seg.mm, 0, limit) == 40 * size



@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, 10**6))
def test_a_promoted_replica_continues_after_its_last_whole_record(cut: int) -> None:
    """A replica promoted while a frame was arriving (its records not yet dispatched, the
    last one perhaps half there): every whole record is in its queues, the half record is
    cut, and its puts continue the master's queues right after them, in a log whose
    restart finds nothing damaged."""
    wire, _ = master()
    cut %= len(wire) + 1
    with tempfile.TemporaryDirectory() as tmp:
        config = functools.partial(small_config, mapped_file_size_commit_log=SEGMENT, **LMQ)
        clock = FakeClock(1_700_000_000_000)
        with running(MessageStore(config(Path(tmp) / "reference"), clock=clock)) as reference:
            reference.append_replicated(0, wire[:cut])  # dispatched as the bytes come
            whole = reference.replica_log.parsed if reference.replica_log else 0
            assert reference.wait_dispatched()
            queues = {q: reference.max_offset(*q) for q in QUEUES}
        root = Path(tmp) / "promoted"
        with running(MessageStore(config(root), clock=clock)) as replica:
            replica.replica = True
            assert replica.append_replicated(0, wire[:cut], dispatch=False) == cut
            replica.replica = False
            assert replica.commitlog.max_offset == whole
            assert replica.wait_dispatched()
            assert {q: replica.max_offset(*q) for q in QUEUES} == queues
            after = replica.put("T", 0, MessageInput(b"after"))
            assert after.queue_offset == queues[("T", 0)]
        with running(MessageStore(config(root), clock=clock)) as again:
            report = again.recovery_report
            assert report is not None and not report.damaged and not report.bytes_dropped
            got = again.get("T", 0, after.queue_offset, max_count=1, max_bytes=1 << 20)
            assert [decode_record(b).body for b in got.buffers] == [b"after"]


@contextlib.contextmanager
def running(store: MessageStore) -> Iterator[MessageStore]:
    store.start()
    try:
        store.set_batch_topic("Bcq")
        yield store
    finally:
        store.shutdown()
