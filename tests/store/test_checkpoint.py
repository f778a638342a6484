"""The checkpoint file and atomic replacement of small metadata files."""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from itertools import zip_longest
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.store.conftest import OpenStore, checkpoint_head, crash_copy, msg, read_queue

from tidemq.formats.record import Record, decode_record
from tidemq.store.checkpoint import (
    CHECKPOINT_SIZE,
    Checkpoint,
    Origin,
    atomic_write,
    rocketmq_started,
)
from tidemq.store.inspect import verify
from tidemq.store.message_store import MessageStore, PutStatus

_OFFSETS = st.integers(-(2**63), 2**63 - 1)


def test_layout_and_round_trip(tmp_path: Path) -> None:
    cp = Checkpoint(physic_msg_timestamp=1, logics_msg_timestamp=2, index_msg_timestamp=3,
                    master_flushed_offset=5, confirm_phy_offset=4096,
                    flushed_phy_offset=4096, dispatched_phy_offset=4000)
    data = cp.encode()
    head = b"".join([
        struct.pack(">q", 1),     # physicMsgTimestamp
        struct.pack(">q", 2),     # logicsMsgTimestamp
        struct.pack(">q", 3),     # indexMsgTimestamp
        struct.pack(">q", 5),     # masterFlushedOffset
        struct.pack(">q", 4096),  # confirmPhyOffset
    ])
    section = b"".join([
        b"TDMQ",                             # magic
        struct.pack(">I", 1),                # sectionVersion
        struct.pack(">q", 4096),             # flushedPhyOffset
        struct.pack(">q", 4000),             # dispatchedPhyOffset
        struct.pack(">I", zlib.crc32(head)),  # headCrc
    ])
    assert data == head + bytes(4064 - 40) + section + struct.pack(">I", zlib.crc32(section))
    assert len(data) == CHECKPOINT_SIZE == 4096
    path = tmp_path / "checkpoint"
    cp.write(path)
    assert Checkpoint.read(path) == cp
    assert Checkpoint.read(path).origin is Origin.TIDEMQ
    assert not path.with_name("checkpoint.tmp").exists()


def checkpoint_of(fields: tuple[int, ...]) -> Checkpoint:
    names = [f.name for f in dataclasses.fields(Checkpoint)][:7]
    return Checkpoint(**dict(zip(names, fields, strict=True)))


@given(st.tuples(*[_OFFSETS] * 7))
def test_round_trip(fields: tuple[int, ...]) -> None:
    cp = checkpoint_of(fields)
    back = Checkpoint.decode(cp.encode())
    assert back == cp
    assert (back.origin, back.note) == (Origin.TIDEMQ, "")


@given(st.binary(max_size=CHECKPOINT_SIZE + 64), st.booleans())
def test_any_bytes_decode_and_unknown_offsets_read_as_none(data: bytes, rocketmq: bool) -> None:
    cp = Checkpoint.decode(data, rocketmq_started=rocketmq)
    if cp.origin not in (Origin.TIDEMQ, Origin.EARLIER_TIDEMQ):
        assert (cp.flushed_phy_offset, cp.dispatched_phy_offset) == (0, 0)
        assert cp.note
    if len(data) >= 40:
        assert cp.physic_msg_timestamp == struct.unpack_from(">q", data)[0]


@given(st.tuples(*[_OFFSETS] * 7), st.data())
def test_a_changed_bit_is_never_read_as_tidemq_offsets(fields: tuple[int, ...],
                                                       data: st.DataObject) -> None:
    """A bit changed in RocketMQ's fields reads as a RocketMQ broker having rewritten
    them; one in TideMQ's section as damage. Neither yields TideMQ offsets."""
    good = checkpoint_of(fields).encode()
    at = data.draw(st.one_of(st.integers(0, 39), st.integers(4064, 4095)))
    bit = data.draw(st.integers(0, 7))
    bad = bytearray(good)
    bad[at] ^= 1 << bit
    cp = Checkpoint.decode(bytes(bad))
    assert cp.origin is (Origin.ROCKETMQ if at < 40 else Origin.DAMAGED)
    assert (cp.flushed_phy_offset, cp.dispatched_phy_offset) == (0, 0)
    assert cp.master_flushed_offset == struct.unpack_from(">q", bad, 24)[0]
    assert cp.confirm_phy_offset == struct.unpack_from(">q", bad, 32)[0]


def test_an_earlier_tidemq_file_reads_its_offsets_at_24_and_32() -> None:
    data = checkpoint_head(1, 2, 3, 9000, 8000)
    cp = Checkpoint.decode(data)
    assert cp.origin is Origin.EARLIER_TIDEMQ
    assert cp == Checkpoint(1, 2, 3, flushed_phy_offset=9000, dispatched_phy_offset=8000)


@pytest.mark.parametrize(("at24", "at32", "rocketmq", "tail"), [
    (0, 8000, False, b""),      # a master: no master flush offset, a confirm offset
    (9000, 8000, True, b""),    # a replica's store: a RocketMQ broker started on it
    (-1, -1, False, b""),       # not an earlier TideMQ's offsets
    (9000, 8000, False, b"\x01"),  # more than RocketMQ's fields
])
def test_a_rocketmq_file_has_no_tidemq_offsets(at24: int, at32: int, rocketmq: bool,
                                               tail: bytes) -> None:
    data = bytearray(checkpoint_head(1, 2, 3, at24, at32))
    data[40:40 + len(tail)] = tail
    cp = Checkpoint.decode(bytes(data), rocketmq_started=rocketmq)
    assert cp.origin is Origin.ROCKETMQ
    assert cp == Checkpoint(1, 2, 3, master_flushed_offset=at24, confirm_phy_offset=at32)


def test_missing_or_short_file_reads_as_empty(tmp_path: Path) -> None:
    assert Checkpoint.read(tmp_path / "absent") == Checkpoint()
    assert Checkpoint.read(tmp_path / "absent").origin is Origin.MISSING
    (tmp_path / "short").write_bytes(b"\x01" * 39)
    assert Checkpoint.read(tmp_path / "short") == Checkpoint()
    assert Checkpoint.read(tmp_path / "short").origin is Origin.DAMAGED


def test_the_lock_file_tells_whether_rocketmq_started(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    assert not rocketmq_started(lock)
    lock.write_bytes(b"")
    assert not rocketmq_started(lock)
    lock.write_bytes(b"lock")
    assert rocketmq_started(lock)


def test_min_timestamp() -> None:
    assert Checkpoint(physic_msg_timestamp=10_000, logics_msg_timestamp=8000).min_timestamp == 5000
    assert Checkpoint(physic_msg_timestamp=1000, logics_msg_timestamp=2000).min_timestamp == 0


def test_crash_scan_stamp() -> None:
    """RocketMQ's abnormal-recovery stamp, bounded by the index stamp when there is one;
    unknown (0) without a flush or dispatch stamp."""
    def stamp(physic: int, logics: int, index: int) -> int:
        return Checkpoint(physic_msg_timestamp=physic, logics_msg_timestamp=logics,
                          index_msg_timestamp=index).crash_scan_stamp
    assert stamp(10_000, 8000, 0) == 5000
    assert stamp(10_000, 8000, 9000) == 5000
    assert stamp(10_000, 8000, 4000) == 4000
    assert stamp(0, 8000, 4000) == stamp(10_000, 0, 4000) == 0


def test_atomic_write_replaces_whole_files(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    atomic_write(path, b"old content that is longer")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topics.json"]


def test_a_crash_before_the_rename_keeps_the_old_file(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint"
    old = Checkpoint(flushed_phy_offset=100, dispatched_phy_offset=100)
    old.write(path)

    def crash(src: object, dst: object) -> None:
        raise OSError(5, "simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        Checkpoint(flushed_phy_offset=999, dispatched_phy_offset=999).write(path)
    monkeypatch.undo()
    assert Checkpoint.read(path) == old  # the half-written new version is only in .tmp
    # A leftover .tmp from that crash does not disturb the next write.
    assert path.with_name("checkpoint.tmp").exists()
    new = Checkpoint(flushed_phy_offset=5, dispatched_phy_offset=5)
    new.write(path)
    assert Checkpoint.read(path) == new


def test_a_failed_fsync_keeps_the_old_file(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint"
    Checkpoint(flushed_phy_offset=1).write(path)

    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError):
        Checkpoint(flushed_phy_offset=2).write(path)
    monkeypatch.undo()
    assert Checkpoint.read(path).flushed_phy_offset == 1


def test_an_idle_store_does_not_rewrite_its_checkpoint(open_store: OpenStore) -> None:
    """The housekeeper writes (and fsyncs) the checkpoint only when it changed: an idle
    broker does no disk work every second."""
    store = open_store()
    store.put("T", 0, msg(b"first"))
    assert store.wait_dispatched(10.0)
    path = store.layout.checkpoint_file
    store._write_checkpoint()
    written = path.stat().st_ino  # atomic_write replaces the file: a new inode each time
    store._write_checkpoint()
    assert path.stat().st_ino == written
    store.put("T", 0, msg(b"second"))
    assert store.wait_dispatched(10.0)
    store._write_checkpoint()
    assert path.stat().st_ino != written
    assert Checkpoint.read(path).flushed_phy_offset == store.commitlog.max_offset


# ------------------------------------------------------ stores whose checkpoint is not ours

BODIES = [f"m{i:03d}:".encode() * 60 for i in range(40)]  # ten segments of four records


def fill(store: MessageStore, first: int = 0, end: int = len(BODIES)) -> None:
    """Put ``BODIES[first:end]``, each keyed by its index, to queues T/0 and T/1 in turn."""
    for i, body in enumerate(BODIES[first:end], first):
        message = msg(body, "a", KEYS=f"k{i}")._replace(keys=(f"k{i}",))
        assert store.put("T", i % 2, message).status is PutStatus.PUT_OK
    assert store.wait_dispatched(10.0)


def stored(store: MessageStore) -> list[bytes]:
    """Every body in queues T/0 and T/1, in the order they were put."""
    q0, q1 = (read_queue(store, "T", q) for q in (0, 1))
    assert len(q0) - len(q1) in (0, 1)
    return [bytes(r.body) for pair in zip_longest(q0, q1) for r in pair if r is not None]


def assert_rewritten(root: Path, master_flushed: int, end: int) -> None:
    """The checkpoint a clean shutdown wrote: the current layout, RocketMQ's fields as
    TideMQ fills them, TideMQ's offsets at the end of the log."""
    cp = Checkpoint.read(root / "checkpoint")
    assert cp.origin is Origin.TIDEMQ
    assert (cp.master_flushed_offset, cp.confirm_phy_offset) == (master_flushed, end)
    assert (cp.flushed_phy_offset, cp.dispatched_phy_offset) == (end, end)


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_an_earlier_tidemq_checkpoint_opens_from_its_offsets(open_store: OpenStore,
                                                             tmp_path: Path, stop: str) -> None:
    store = open_store()
    fill(store, 0, 30)
    store._write_checkpoint()
    fill(store, 30)  # after the checkpoint: a crash re-dispatches these
    if stop == "clean":
        store.shutdown()
        root = store.layout.root
    else:
        root = crash_copy(store, tmp_path / "crashed")
    cp = Checkpoint.read(root / "checkpoint")
    (root / "checkpoint").write_bytes(checkpoint_head(
        cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
        cp.flushed_phy_offset, cp.dispatched_phy_offset))
    assert any("as an earlier TideMQ wrote them" in w for w in verify(root).warnings)
    again = open_store(root)
    report = again.recovery_report
    assert report is not None and report.bytes_dropped == 0
    assert report.start_offset == cp.dispatched_phy_offset > again.commitlog.min_offset
    assert stored(again) == BODIES
    assert [bytes(rec.body) for i in (0, 29, 39) for v in again.query_by_key("T", f"k{i}")
            if isinstance(rec := decode_record(v), Record)] == [BODIES[0], BODIES[29], BODIES[39]]
    end = again.commitlog.max_offset
    again.shutdown()
    assert_rewritten(root, 0, end)


@pytest.mark.parametrize("stop", ["clean", "crash"])
@pytest.mark.parametrize("writer", ["master", "replica", "after tidemq"])
def test_a_rocketmq_checkpoint_opens_with_nothing_lost(open_store: OpenStore, writer: str,
                                                       stop: str) -> None:
    """RocketMQ's offsets at 24 and 32 are not TideMQ's. After a clean stop the scan
    starts where RocketMQ's would, at the end of the newest consume-queue entry; after a
    crash at the newest segment 3 s older than the checkpoint's stamps, of which there is
    none here (every record was stored within 3 s of them): the whole log. Every record is
    found, none twice; RocketMQ's masterFlushedOffset stays."""
    store = open_store()
    fill(store)
    store.shutdown()
    root = store.layout.root
    cp = Checkpoint.read(root / "checkpoint")
    end = cp.flushed_phy_offset
    master_flushed = {"master": 0, "replica": end + 5000, "after tidemq": 0}[writer]
    if writer == "after tidemq":  # a RocketMQ broker ran the store and flushed its fields
        data = bytearray(cp.encode())
        data[0:8] = struct.pack(">q", cp.physic_msg_timestamp + 1000)
        data[32:40] = struct.pack(">q", end // 2)
    else:
        data = bytearray(checkpoint_head(cp.physic_msg_timestamp, cp.logics_msg_timestamp,
                                         cp.index_msg_timestamp, master_flushed, end // 2))
    if writer == "replica":
        (root / "lock").write_bytes(b"lock")
    if stop == "crash":
        store.layout.abort_file.touch()
    (root / "checkpoint").write_bytes(bytes(data))
    checked = verify(root)
    assert any(w.startswith("checkpoint: RocketMQ's fields") for w in checked.warnings)
    again = open_store(root)
    report = again.recovery_report
    assert report is not None and report.bytes_dropped == 0
    assert checked.recovery is not None
    assert report.start_offset == checked.recovery.start_offset
    if stop == "clean":
        assert (report.start_offset, report.records_scanned) == (end, 0)
    else:
        assert report.start_offset == again.commitlog.min_offset
        assert report.records_scanned == len(BODIES)
    assert stored(again) == BODIES
    again.shutdown()
    assert_rewritten(root, master_flushed, end)


@pytest.mark.parametrize("index", ["none", "older", "before the log"])
def test_a_crashed_rocketmq_store_scans_from_its_checkpoints_segment(
        open_store: OpenStore, index: str) -> None:
    """After a RocketMQ broker's crash the scan starts where RocketMQ's abnormal recovery
    does: at the newest segment whose first record is 3 s older than both the flush and
    the dispatch stamps, and not newer than the index stamp (the start of the log when
    none is) -- not always at the start of the log, which for a store migrated from
    RocketMQ is all of its data. The consume queues and every key before the start stay;
    the records after it are dispatched again, none twice."""
    base_ms = 1_700_000_000_000
    now = [base_ms]
    store = open_store(clock=lambda: now[0])
    for i in range(len(BODIES)):
        now[0] = base_ms + 1000 * i
        fill(store, i, i + 1)
    records = sorted((r for q in (0, 1) for r in read_queue(store, "T", q)),
                     key=lambda r: r.physical_offset)
    store.shutdown()
    size = store.config.mapped_file_size_commit_log
    firsts: dict[int, Record] = {}  # segment base: its first record
    for rec in records:
        firsts.setdefault(rec.physical_offset // size * size, rec)
    segments = sorted(firsts)
    assert len(segments) >= 3
    newest_but_one = segments[-2]
    flushed = firsts[newest_but_one].store_timestamp + 3500
    index_ms, start = {
        "none": (0, newest_but_one),
        "older": (firsts[segments[1]].store_timestamp, segments[1]),
        "before the log": (base_ms - 1, segments[0]),
    }[index]
    root = store.layout.root
    (root / "checkpoint").write_bytes(checkpoint_head(flushed, flushed, index_ms, 0, start))
    (root / "lock").write_bytes(b"lock")  # a RocketMQ broker ran the store
    store.layout.abort_file.touch()
    checked = verify(root)
    again = open_store(root)
    report = again.recovery_report
    assert report is not None and report.bytes_dropped == 0
    assert checked.recovery is not None
    assert report.start_offset == checked.recovery.start_offset == start
    assert report.records_scanned == sum(r.physical_offset >= start for r in records)
    assert stored(again) == BODIES
    keyed = [decode_record(v) for i in range(len(BODIES)) for v in again.query_by_key("T", f"k{i}")]
    assert [bytes(r.body) for r in keyed if isinstance(r, Record)] == BODIES


@pytest.mark.parametrize("damage", ["section", "magic", "short"])
def test_a_damaged_checkpoint_opens_with_a_scan_of_the_whole_log(open_store: OpenStore,
                                                                 damage: str) -> None:
    store = open_store()
    fill(store)
    store.shutdown()
    path = store.layout.checkpoint_file
    data = bytearray(path.read_bytes())
    if damage == "section":
        data[4080] ^= 0x40  # dispatchedPhyOffset
    elif damage == "magic":
        data[4064] ^= 0x01
    else:
        del data[20:]
    path.write_bytes(bytes(data))
    report = verify(store.layout.root)
    assert [p.kind for p in report.problems] == ["checkpoint"] * (2 if damage == "short" else 1)
    again = open_store()
    assert again.recovery_report is not None
    assert again.recovery_report.start_offset == again.commitlog.min_offset
    assert stored(again) == BODIES
    end = again.commitlog.max_offset
    again.shutdown()
    assert_rewritten(store.layout.root, 0, end)
