"""Offline verify and dumps: clean stores, damaged ones, and agreement with real recovery."""

from __future__ import annotations

import json
import os
import shutil
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Options, Rdict

from tidemq.formats.properties import encode_properties
from tidemq.store import log_scan, spool
from tidemq.store.checkpoint import Checkpoint
from tidemq.store.config import StoreConfig
from tidemq.store.inspect import (
    InspectError,
    dump_checkpoint,
    dump_queue,
    dump_records,
    verify,
)
from tidemq.store.message_store import MessageInput, MessageStore

from .conftest import SEGMENT, crash_copy, small_config

N = 60  # records; 300-byte bodies put about ten in each 4 KiB segment


def config(root: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {"max_hash_slot_num": 64,
                              "max_index_num": 256}
    values.update(overrides)
    return small_config(root, **values)


def message(i: int) -> MessageInput:
    return MessageInput(b"%03d" % i * 100, encode_properties({"UNIQ_KEY": f"U{i}"}),
                        keys=(f"U{i}",))


def build(root: Path, n: int = N, **overrides: Any) -> Path:
    with MessageStore(config(root, **overrides)) as store:
        for i in range(n):
            store.put("T", i % 3, message(i))
    return root


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def record_starts(root: Path) -> list[int]:
    return [r.phys for r in dump_records(root, None, 10_000).records]


def last_segment(root: Path) -> Path:
    return sorted((root / "commitlog").iterdir())[-1]


def recover_copy(root: Path, dest: Path) -> Any:
    """Start a real store on a copy of ``root``; returns its recovery report."""
    shutil.copytree(root, dest)
    with MessageStore(config(dest)) as store:
        return store.recovery_report


# ---------------------------------------------------------------------- clean stores


def test_clean_store_verifies_and_nothing_changes(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    before = snapshot(root)
    report = verify(root)
    assert snapshot(root) == before
    assert report.ok and report.warnings == []
    assert report.records == N and report.segment_size == SEGMENT and report.segments >= 5
    assert report.queues == 3 and report.queue_entries == N and report.expired_entries == 0
    rec = report.recovery
    assert rec is not None and rec.clean
    assert rec.start_offset == rec.end_offset and rec.reason == "end of data"
    assert (rec.bytes_truncated, rec.segments_deleted, rec.records_lost) == (0, 0, 0)
    assert report.checkpoint is not None
    assert report.checkpoint.flushed_phy_offset == rec.end_offset
    assert report.to_dict()["ok"] is True


def test_progress_reports_every_byte_and_queue(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    calls: list[tuple[str, int, int]] = []
    verify(root, progress=lambda *a: calls.append(a))
    log_calls = [c for c in calls if c[0] == "commitlog"]
    assert log_calls[-1][1] == log_calls[-1][2] == sum(
        p.stat().st_size for p in (root / "commitlog").iterdir())
    assert [c for c in calls if c[0] == "queues"][-1] == ("queues", 3, 3)


def test_expired_data_after_retention_is_not_a_problem(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(config(root, file_reserved_time=0, delete_when="")) as store:
        for i in range(N):
            store.put("T", i % 3, message(i))
        assert store.wait_dispatched()
        assert store.run_retention(manual=True).deleted_segments
        low = store.min_offset("T", 0)
    report = verify(root)
    assert report.ok, report.problems
    assert report.min_offset > 0 and report.expired_entries > 0
    entries = dump_queue(root, "T", 0, None, 100)  # from the first entry still on disk
    first = entries[0].offset
    assert first < low and entries[-1].offset == N // 3 - 1
    assert [e.status for e in entries] == ["expired"] * (low - first) + ["ok"] * (N // 3 - low)


# ---------------------------------------------------------------------- damage


def test_torn_tail_matches_what_recovery_drops(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    end = verify(root).recovery.end_offset  # type: ignore[union-attr]
    seg = last_segment(root)
    garbage = min(100, SEGMENT - (end - int(seg.name)))
    assert garbage > 8
    with seg.open("r+b") as f:
        f.seek(end - int(seg.name))
        f.write(b"\x55" * garbage)
    report = verify(root)
    assert not report.ok
    assert any("torn tail" in p.detail for p in report.problems)
    rec = report.recovery
    assert rec is not None and rec.end_offset == end and rec.bytes_truncated == garbage
    real = recover_copy(root, tmp_path / "copy")
    assert (real.end_offset, real.bytes_dropped) == (rec.end_offset, rec.bytes_truncated)


@pytest.mark.parametrize("with_checkpoint", [True, False])
def test_bit_flip_mid_log(tmp_path: Path, with_checkpoint: bool) -> None:
    root = build(tmp_path / "s")
    starts = record_starts(root)
    victim = starts[25]
    seg_base = victim - victim % SEGMENT
    path = root / "commitlog" / f"{seg_base:020d}"
    data = bytearray(path.read_bytes())
    data[victim - seg_base + 100] ^= 0x01  # a body byte: the CRC no longer matches
    path.write_bytes(data)
    if not with_checkpoint:
        (root / "checkpoint").unlink()
        (root / "abort").touch()
    report = verify(root)
    crc = [p for p in report.problems if p.detail.startswith("body CRC mismatch")]
    assert [(p.offset, p.where) for p in crc] == [(victim, path.name)]
    assert [(d.offset, d.reason) for d in report.damaged] == [(victim, "body CRC mismatch")]
    assert report.records == N - 1  # the damaged one is skipped, the rest still checked
    rec = report.recovery
    assert rec is not None and rec.records_lost == 0  # a damaged middle record drops nothing
    assert rec.end_offset > victim
    if with_checkpoint:  # recovery starts at the checkpoint, after the damage
        assert rec.end_offset == rec.start_offset and rec.damaged_skipped == 0
    else:  # recovery scans from the start, skips the damage and goes on to the end
        assert rec.start_offset == 0 and rec.damaged_skipped == 1
    real = recover_copy(root, tmp_path / "copy")
    assert (real.start_offset, real.end_offset) == (rec.start_offset, rec.end_offset)
    assert real.segments_deleted == rec.segments_deleted
    assert [d.offset for d in real.damaged] == ([] if with_checkpoint else [victim])


def test_damaged_queue_entries(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    starts = record_starts(root)
    cq = root / "consumequeue" / "T" / "1" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    struct.pack_into(">i", data, 2 * 20 + 8, 17)  # offset 2: wrong size
    struct.pack_into(">q", data, 3 * 20, starts[10] + 4)  # offset 3: inside a record
    struct.pack_into(">q", data, 4 * 20, starts[12])  # offset 4: a record of T/0
    struct.pack_into(">q", data, 5 * 20, starts[3])  # offset 5: goes backwards
    cq.write_bytes(data)
    report = verify(root)
    found = {(p.where, p.offset, p.detail.split(" ")[0]) for p in report.problems}
    assert ("T/1", 2, "size") in found
    assert ("T/1", 3, "no") in found
    assert any(p.offset == 4 and "another queue" in p.detail for p in report.problems)
    assert any(p.offset == 5 and "physical offsets do not increase" in p.detail
               for p in report.problems)
    statuses = [e.status for e in dump_queue(root, "T", 1, 1, 4)]
    assert statuses[0] == "ok" and statuses[1].startswith("size mismatch")
    assert statuses[2] == "no record starts here" and statuses[3] == "belongs to T/0"


def test_records_no_queue_entry_names_are_reported_per_queue(tmp_path: Path) -> None:
    """One pass over the records (chunk by chunk) finds, for each queue, the records past
    its last entry, and the records of a queue that has no directory at all."""
    root = build(tmp_path / "s")  # T/0, T/1, T/2 get 20 records each
    cq = root / "consumequeue" / "T" / "1" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    data[15 * 20 : 16 * 20] = bytes(20)  # T/1 ends at offset 15: offsets 15..19 unnamed
    cq.write_bytes(data)
    shutil.rmtree(root / "consumequeue" / "T" / "2")
    found = [(p.kind, p.where, p.offset, p.detail) for p in verify(root).problems]
    assert ("queue", "T/1", 15, "5 records of the commit log (queue offsets 15..19) have no "
            "entry: the queue ends at 15 (file 00000000000000000000)") in found
    assert ("queue", "T/2", -1, "20 records in the commit log but no consume queue: a start "
            "does not rebuild it unless its queues are in doubt (run verify --repair)") in found
    assert not [f for f in found if f[1] == "T/0"]


def test_the_records_of_a_deleted_topic_are_not_a_missing_queue(tmp_path: Path) -> None:
    """A topic deleted from the broker's topic table loses its consume queues while its
    records stay in the commit log until retention: not a problem, and no advice to
    rebuild the queues. A topic the table still has and whose queue is gone is one."""
    root = build(tmp_path / "s")
    shutil.rmtree(root / "consumequeue" / "T" / "2")
    table = root / "config" / "topics.json"
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(json.dumps({"topicConfigTable": {"Other": {"topicName": "Other"}}}))
    assert verify(root).problems == []
    table.write_text(json.dumps({"topicConfigTable": {"T": {"topicName": "T"}}}))
    assert [(p.kind, p.where) for p in verify(root).problems] == [("queue", "T/2")]


FANOUT = tuple(f"%LMQ%m{k}" for k in range(8))


def build_keyed(root: Path, n: int) -> Path:
    """``n`` messages with ten index keys each, fanned out to eight LMQs."""
    cfg = small_config(root, mapped_file_size_commit_log=1 << 20, enable_lmq=True,
                       enable_multi_dispatch=True, max_hash_slot_num=1024, max_index_num=4096)
    with MessageStore(cfg) as store:
        for i in range(n):
            keys = tuple(f"K{i}-{k}" for k in range(9))
            props = encode_properties({"UNIQ_KEY": f"U{i}", "KEYS": " ".join(keys),
                                       "INNER_MULTI_DISPATCH": ",".join(FANOUT)})
            store.put_multi_dispatch("T", i % 4, MessageInput(b"x" * 64, props,
                                                              keys=(f"U{i}", *keys)), FANOUT)
        assert store.wait_dispatched()
    return root


def test_verify_memory_does_not_grow_with_the_keys_and_lmq_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What verify collects per record, key and LMQ entry is spilled to disk a chunk at a
    time: ten times the keys and LMQ entries leave its peak of traced memory where it was
    (holding them all took ~1 kB a message), and the findings are still all there."""
    monkeypatch.setattr(spool, "CHUNK", 256)
    peaks = []
    for n in (150, 1500):
        root = build_keyed(tmp_path / f"s{n}", n)
        shutil.rmtree(root / "consumequeue" / "T" / "3")
        with Rdict(str(root / "lmq"), Options(raw_mode=True)) as db:
            gone = [k for k in db.keys(from_key=b"E%LMQ%m5\x00")
                    if k.startswith(b"E%LMQ%m5\x00")]
            for k in gone:
                del db[k]
        tracemalloc.start()
        try:
            report = verify(root)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert (report.index_entries, report.lmq_entries) == (10 * n, 7 * n)
        found = {(p.kind, p.where, p.detail) for p in report.problems}
        assert found == {
            ("queue", "T/3", f"{n // 4} records in the commit log but no consume queue: a "
             "start does not rebuild it unless its queues are in doubt (run verify --repair)"),
            ("lmq", "%LMQ%m5", f"{n} entries of records below the LMQ checkpoint "
             f"{report.recovery.end_offset if report.recovery else -1} are missing")}
    assert peaks[1] < peaks[0] + 256 * 1024, peaks


def build_long_queue(root: Path, n: int) -> Path:
    """``n`` small messages in one queue, each with a key: a consume queue and an index
    file of ``n`` entries."""
    cfg = small_config(root, mapped_file_size_commit_log=1 << 22,
                       mapped_file_size_consume_queue=20 * 4096, max_hash_slot_num=8192,
                       max_index_num=32768)
    with MessageStore(cfg) as store:
        for i in range(n):
            store.put("T", 0, MessageInput(b"x" * 16, encode_properties({"UNIQ_KEY": f"U{i}"}),
                                           keys=(f"U{i}",)))
    return root


def test_verify_memory_does_not_grow_with_one_queue_or_one_index_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consume queue and an index file are read a chunk of entries at a time: ten times
    the entries of one queue and one index file leave the peak of traced memory where it
    was (reading each whole took memory in proportion to its entries), and a damaged
    entry far past the first chunk of each is still found where it is."""
    monkeypatch.setattr(spool, "CHUNK", 256)
    monkeypatch.setattr(log_scan, "_CHUNK", 1 << 14)  # its buffer is fixed: keep it small
    peaks = []
    for n in (1000, 10_000):
        root = build_long_queue(tmp_path / f"s{n}", n)
        cq = sorted((root / "consumequeue" / "T" / "0").iterdir())[-1]
        data = bytearray(cq.read_bytes())
        last = (n - 1) % 4096
        (phys,) = struct.unpack_from(">q", data, last * 20)
        struct.pack_into(">i", data, last * 20 + 8, 17)  # the last entry: wrong size
        cq.write_bytes(data)
        index = next((root / "index").iterdir())
        data = bytearray(index.read_bytes())
        entry = 40 + 8192 * 4 + (n - 1) * 20  # entry number n - 1
        struct.pack_into(">i", data, entry + 16, n + 5)  # its chain link points forward
        index.write_bytes(data)
        if not peaks:
            verify(root)  # what a first call allocates once (imports, caches) is not its peak
        tracemalloc.start()
        try:
            report = verify(root)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert (report.queue_entries, report.index_entries) == (n, n)
        found = {(p.kind, p.where, p.offset, p.detail) for p in report.problems}
        assert found == {
            ("queue", "T/0", n - 1, f"size differs from record at {phys} (file {cq.name})"),
            ("index", index.name, n - 1, f"chain link {n + 5} does not point back")}
    assert peaks[1] < peaks[0] + 128 * 1024, peaks


def test_checkpoint_past_the_valid_log(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    cp = Checkpoint.read(root / "checkpoint")
    end = cp.flushed_phy_offset
    Checkpoint(cp.physic_msg_timestamp + 10_000, cp.logics_msg_timestamp, 0,
               flushed_phy_offset=end + 500, dispatched_phy_offset=end + 7,
               ).write(root / "checkpoint")
    report = verify(root)
    assert any(p.kind == "checkpoint" and "acknowledged data" in p.detail
               for p in report.problems)
    assert any("newer than the last record" in w for w in report.warnings)


def test_segment_of_the_wrong_size_would_stop_a_start(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    first = sorted((root / "commitlog").iterdir())[0]
    with first.open("r+b") as f:
        f.truncate(SEGMENT // 2)
    report = verify(root)
    assert report.recovery is not None and first.name in report.recovery.start_fails
    assert any(p.where == first.name and "bytes, expected" in p.detail for p in report.problems)


def test_trailing_empty_segment_is_not_damage(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    last = last_segment(root)
    nxt = root / "commitlog" / f"{int(last.name) + SEGMENT:020d}"
    nxt.write_bytes(bytes(SEGMENT))  # prepared ahead of the writer, never used
    report = verify(root)
    assert report.ok, report.problems
    assert report.recovery is not None and report.recovery.segments_deleted == 1
    real = recover_copy(root, tmp_path / "copy")
    assert real.segments_deleted == 1


# ---------------------------------------------------------------------- live or crashed


def test_running_store_gives_a_warning_and_a_crash_copy_another(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(config(root)) as store:
        for i in range(10):
            store.put("T", 0, message(i))
        assert store.wait_dispatched()
        live = verify(root)
        copy = crash_copy(store, tmp_path / "crashed")
    assert any("holds the store lock" in w for w in live.warnings)
    crashed = verify(copy)
    assert any("abort marker" in w for w in crashed.warnings)
    assert crashed.recovery is not None and not crashed.recovery.clean
    assert crashed.records == 10


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InspectError):
        verify(tmp_path / "missing")


# ---------------------------------------------------------------------- dumps


def test_dump_records(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    starts = record_starts(root)
    dump = dump_records(root, None, 3)
    assert [r.phys for r in dump.records] == starts[:3]
    first = dump.records[0]
    assert (first.topic, first.queue_id, first.queue_offset) == ("T", 0, 0)
    assert first.properties == {"UNIQ_KEY": "U0"} and first.body_size == 300
    assert dump.next_offset == starts[3] and dump.end_reason == ""
    tail = dump_records(root, starts[-2], 10)
    assert [r.phys for r in tail.records] == starts[-2:]
    assert tail.end_reason == "end of data"
    assert dump_records(root, starts[5], 0).records == []
    with pytest.raises(InspectError) as err:
        dump_records(root, starts[5] + 3, 1)
    assert err.value.offset == starts[5] + 3
    assert dump.to_dict()["records"][0]["topic"] == "T"


def test_dump_queue(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    starts = record_starts(root)
    entries = dump_queue(root, "T", 2, None, 100)
    assert [e.offset for e in entries] == list(range(N // 3))
    assert [e.phys for e in entries] == starts[2::3]
    assert {e.status for e in entries} == {"ok"}
    assert [e.offset for e in dump_queue(root, "T", 2, 18, 5)] == [18, 19]
    with pytest.raises(InspectError):
        dump_queue(root, "T", 7)


def test_dump_checkpoint(tmp_path: Path) -> None:
    root = build(tmp_path / "s")
    dump = dump_checkpoint(root)
    assert dump.exists and dump.size == 4096 and not dump.abort_marker and not dump.in_use
    assert dump.checkpoint == Checkpoint.read(root / "checkpoint")
    os.unlink(root / "checkpoint")
    missing = dump_checkpoint(root)
    assert not missing.exists and missing.checkpoint == Checkpoint()
    assert missing.to_dict()["checkpoint"]["flushed_phy_offset"] == 0


@pytest.mark.parametrize("batch", [False, True])
def test_a_queue_file_whose_creation_a_crash_cut_short_puts_nothing_in_doubt(
        tmp_path: Path, batch: bool) -> None:
    """A crash between a queue file's creation and its allocation leaves it short and all
    zeros: verify previews, and a start does, that the queue keeps its entries (no
    rebuild from the start of the log), for consume queues and batch ones alike. A disk
    that emptied a file looks the same, so the scan starts at the end of the queue's
    last entry: here only the records after it, of the other queues."""
    root = tmp_path / "s"
    with MessageStore(config(root)) as store:
        if batch:
            store.set_batch_topic("T")
        for i in range(N):
            store.put("T", i % 3, message(i))
    qdir = root / ("batchconsumequeue" if batch else "consumequeue") / "T" / "1"
    last = sorted(qdir.iterdir())[-1]
    (qdir / f"{int(last.name) + last.stat().st_size:020d}").write_bytes(bytes(100))
    stray = f"{int(last.name) + last.stat().st_size:020d}"
    report = verify(root)
    rec = report.recovery
    assert rec is not None and not rec.queues_rebuilt
    assert report.queue_entries == N
    started = recover_copy(root, tmp_path / "c")
    assert (started.start_offset, started.end_offset) == (rec.start_offset, rec.end_offset)
    assert started.records_scanned == 1  # the last record (T/2) follows T/1's last
    assert not (tmp_path / "c" / qdir.relative_to(root) / stray).exists()
