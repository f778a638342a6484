"""Damaged records in the middle of the log: a start goes on, reads skip them, nothing
after them is lost, and verify says what a start will do."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.errors import StoreReadOnly
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store.inspect import dump_records, verify
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.types import GetStatus

from .conftest import CQ_FILE, SEGMENT, small_config

N = 48


def message(i: int) -> MessageInput:
    return MessageInput(b"%04d" % i + bytes(200), encode_properties(
        {"UNIQ_KEY": f"U{i:04d}", "TAGS": "a"}), keys=(f"U{i:04d}",))


def build(root: Path, n: int = N) -> list[tuple[int, int]]:
    """``n`` messages in queue T/0, stopped cleanly; ``(phys, size)`` of each."""
    out = []
    with MessageStore(small_config(root)) as store:
        for i in range(n):
            r = store.put("T", 0, message(i))
            out.append((r.phys_offsets[0], r.sizes[0]))
    return out


Pristine = tuple[Path, list[tuple[int, int]]]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    """One store as :func:`build` leaves it, made once; tests damage copies of it."""
    root = tmp_path_factory.mktemp("pristine") / "s"
    return root, build(root)


def copy_of(pristine: Pristine, root: Path) -> list[tuple[int, int]]:
    """A copy of the pristine store at ``root``; ``(phys, size)`` of each message."""
    shutil.copytree(pristine[0], root)
    return pristine[1]


def patch(root: Path, phys: int, data: bytes) -> None:
    with StoreLayout(root).commitlog_segment(phys - phys % SEGMENT).open("r+b") as f:
        f.seek(phys % SEGMENT)
        f.write(data)


def props_at(root: Path, phys: int, size: int) -> int:
    """Where the properties of the record at ``phys`` start."""
    with StoreLayout(root).commitlog_segment(phys - phys % SEGMENT).open("rb") as f:
        f.seek(phys % SEGMENT)
        rec = decode_record(f.read(size))
    assert isinstance(rec, Record)
    return phys + size - len(rec.properties)


def crashed(root: Path) -> None:
    """As if the broker died: no checkpoint to start from, the abort marker left."""
    StoreLayout(root).checkpoint_file.unlink()
    StoreLayout(root).abort_file.touch()


def bodies(store: MessageStore, max_count: int, **kw: Any) -> tuple[list[int], int]:
    """Every message of T/0 read in pulls of ``max_count``: body ids and pulls that came
    back empty although the queue went on."""
    out: list[int] = []
    offset, empty = 0, 0
    while offset < store.max_offset("T", 0):
        result = store.get("T", 0, offset, max_count=max_count, **kw)
        assert result.next_begin_offset > offset, result.status
        if not result.found:
            empty += 1
        for buf in result.buffers:
            pos = 0
            while pos < len(buf):
                rec = decode_record(buf, pos, check_crc=True)
                assert isinstance(rec, Record)
                rec.properties.decode("utf-8")
                out.append(int(bytes(rec.body[:4])))
                pos += rec.total_size
        offset = result.next_begin_offset
    return out, empty


@pytest.mark.parametrize("max_count", [1, 32, 100])
def test_properties_damaged_on_disk_are_skipped_by_reads(tmp_path: Path, pristine: Pristine,
                                                         max_count: int) -> None:
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    victim = 20
    patch(root, props_at(root, *records[victim]) + 2, b"\xff")  # not UTF-8 any more
    with MessageStore(small_config(root)) as store:
        got, empty = bodies(store, max_count)
        assert got == [i for i in range(N) if i != victim]
        assert store.reader.damaged.skipped >= 1
        assert empty == (1 if max_count == 1 else 0)
        again, _ = bodies(store, 5)  # a second reader of records checked already
        assert again == got
        assert store.read_record(records[victim][0]) is None
        assert store.read_record(records[victim + 1][0]) is not None
        only = store.get("T", 0, victim, max_count=1)
        assert only.status is GetStatus.NO_MATCHED_MESSAGE
        assert only.next_begin_offset == victim + 1


@pytest.mark.parametrize("where", ["body", "physical offset", "body crc"])
def test_records_from_before_the_start_are_checked_when_read(tmp_path: Path, pristine: Pristine,
                                                             where: str) -> None:
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    victim = 33
    phys, _ = records[victim]
    patch(root, phys + {"body": 150, "physical offset": 30, "body crc": 9}[where], b"\x99")
    with MessageStore(small_config(root)) as store:  # a clean start: nothing rescanned
        assert store.recovery_report is not None and not store.recovery_report.damaged
        got, _ = bodies(store, 32)
        assert got == [i for i in range(N) if i != victim]
        assert store.reader.damaged.skipped == 1


def test_sound_records_from_before_the_start_are_all_served(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(small_config(root)) as store:
        for i in range(N):  # every third one with UTF-8 beyond ASCII in its properties
            props = {"UNIQ_KEY": f"U{i:04d}", "TAGS": "é" if i % 3 == 0 else "a"}
            store.put("T", 0, MessageInput(b"%04d" % i + bytes(i), encode_properties(props)))
    with MessageStore(small_config(root)) as store:
        for max_count in (1, 7, 32, 100):
            got, empty = bodies(store, max_count)
            assert got == list(range(N)) and empty == 0
        assert store.reader.damaged.skipped == 0


@pytest.mark.parametrize("max_count", [1, 7, 32, 64])
def test_a_first_read_of_interleaved_queues_skips_only_the_damaged_record(
        tmp_path: Path, max_count: int) -> None:
    """Queues written round robin (no two records of a queue back to back, pulls that
    span segments), UTF-8 beyond ASCII in some properties, one body flipped on disk:
    a first read after the start serves every other record of every queue."""
    root = tmp_path / "s"
    queues, per_queue = 3, 20
    where: dict[tuple[int, int], tuple[int, int]] = {}
    with MessageStore(small_config(root)) as store:
        for i in range(per_queue):
            for q in range(queues):
                props = {"UNIQ_KEY": f"U{q}{i:04d}", "TAGS": "\u00e9" if i % 4 == 1 else "a"}
                r = store.put("T", q, MessageInput(b"%04d" % i + bytes(100 + q),
                                                   encode_properties(props)))
                where[(q, i)] = (r.phys_offsets[0], r.sizes[0])
    victim = (1, 9)
    patch(root, where[victim][0] + 120, b"\x5a")
    with MessageStore(small_config(root)) as store:
        for q in range(queues):
            got: list[int] = []
            offset = 0
            while offset < store.max_offset("T", q):
                result = store.get("T", q, offset, max_count=max_count)
                assert result.next_begin_offset > offset
                for buf in result.buffers:
                    pos = 0
                    while pos < len(buf):
                        rec = decode_record(buf, pos, check_crc=True)
                        assert isinstance(rec, Record) and rec.queue_id == q
                        got.append(int(bytes(rec.body[:4])))
                        pos += rec.total_size
                offset = result.next_begin_offset
            assert got == [i for i in range(per_queue) if (q, i) != victim]
        assert store.reader.damaged.skipped == 1


def test_a_batch_consume_queue_reads_past_a_damaged_record(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(small_config(root)) as store:
        store.set_batch_topic("T")
        records = [(r.phys_offsets[0], r.sizes[0]) for r in
                   (store.put("T", 0, message(i)) for i in range(N))]
    victim = 25
    patch(root, records[victim][0] + 150, b"\x99")  # the body: the CRC no longer matches
    with MessageStore(small_config(root)) as store:
        for max_count in (1, 10, 64):
            got, empty = bodies(store, max_count)
            assert got == [i for i in range(N) if i != victim]
            assert empty == (1 if max_count == 1 else 0)


def test_body_damaged_mid_log_is_not_a_reason_to_truncate(tmp_path: Path,
                                                          pristine: Pristine) -> None:
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    victim = 17
    phys, _ = records[victim]
    patch(root, phys + 100, b"\x5a")  # the body: the CRC no longer matches
    crashed(root)
    with MessageStore(small_config(root)) as store:
        report = store.recovery_report
        assert report is not None
        assert [(d.offset, d.reason) for d in report.damaged] == [(phys, "body CRC mismatch")]
        assert report.end_offset == records[-1][0] + records[-1][1]
        assert report.bytes_dropped == 0
        assert store.max_offset("T", 0) == N
        got, _ = bodies(store, 32)
        assert got == [i for i in range(N) if i != victim]
        res = store.put("T", 0, message(N))  # the queue goes on
        assert res.queue_offset == N


def test_header_damaged_with_its_queue_lost_leaves_a_hole(tmp_path: Path,
                                                          pristine: Pristine) -> None:
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    victim = 9
    phys, _ = records[victim]
    patch(root, phys + 4, b"\x00")  # the magic code: nothing of the record decodes
    shutil.rmtree(StoreLayout(root).consumequeue_dir)
    with MessageStore(small_config(root)) as store:
        report = store.recovery_report
        assert report is not None and [d.offset for d in report.damaged] == [phys]
        assert store.max_offset("T", 0) == N
        got, _ = bodies(store, 32)
        assert got == [i for i in range(N) if i != victim]
        got1, _ = bodies(store, 1)
        assert got1 == got


def test_damaged_properties_and_a_truncated_queue_still_start(tmp_path: Path,
                                                              pristine: Pristine) -> None:
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    victim = 5
    patch(root, props_at(root, *records[victim]) + 1, b"\xfe")
    cq = sorted(StoreLayout(root).queue_dir("T", 0).iterdir())[0]
    cq.write_bytes(cq.read_bytes()[: CQ_FILE - 7])  # not a whole number of entries
    with MessageStore(small_config(root)) as store:
        got, _ = bodies(store, 32)
        assert got == [i for i in range(N) if i != victim]


# ---------------------------------------------------------------------- verify


def test_verify_reports_a_queue_file_cut_short(tmp_path: Path, pristine: Pristine) -> None:
    root = tmp_path / "s"
    copy_of(pristine, root)
    cq = sorted(StoreLayout(root).queue_dir("T", 0).iterdir())[-1]
    cq.write_bytes(cq.read_bytes()[:47])  # two entries and a bit
    report = verify(root, cq_file_size=CQ_FILE)
    assert not report.ok
    assert any(p.where == "T/0" and "47 bytes" in p.detail and cq.name in p.detail
               for p in report.problems), report.problems
    assert report.recovery is not None and report.recovery.queues_rebuilt


def test_verify_reports_queue_entries_that_are_missing(tmp_path: Path, pristine: Pristine) -> None:
    root = tmp_path / "s"
    copy_of(pristine, root)
    files = sorted(StoreLayout(root).queue_dir("T", 0).iterdir())
    files[-1].write_bytes(bytes(CQ_FILE))  # a whole file of entries gone, sizes intact
    report = verify(root)
    lost = N - (len(files) - 1) * (CQ_FILE // 20)
    assert any(p.where == "T/0" and f"{lost} records of the commit log" in p.detail
               for p in report.problems), report.problems


def test_verify_finds_damaged_properties(tmp_path: Path, pristine: Pristine) -> None:
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    patch(root, props_at(root, *records[30]) + 3, b"\xff")
    report = verify(root)
    assert [(d.offset, d.reason) for d in report.damaged] == [
        (records[30][0], "properties are not UTF-8")]
    assert report.recovery is not None and report.recovery.records_lost == 0


FLIPS = {"magic": 4, "totalsize": 2, "physical offset": 35, "body": 120, "body length": 87}


@pytest.mark.parametrize("flip", FLIPS)
@pytest.mark.parametrize("where", ["middle", "tail"])
@pytest.mark.parametrize("checkpoint", [True, False])
def test_verify_previews_what_a_start_does(tmp_path: Path, pristine: Pristine, flip: str,
                                           where: str, checkpoint: bool) -> None:
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    phys, _ = records[N // 2 if where == "middle" else -1]
    patch(root, phys + FLIPS[flip], b"\x80")
    if not checkpoint:
        crashed(root)
    shutil.rmtree(StoreLayout(root).queue_dir("T", 0) / f"{CQ_FILE:020d}",
                  ignore_errors=True)  # a lost queue file: the queue is in doubt
    preview = verify(root).recovery
    assert preview is not None
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    if checkpoint and where == "tail":
        # a clean stop, then its last record damaged: the start stops rather than drop an
        # acknowledged message as a torn tail, and verify says it would
        segment = StoreLayout(copy).commitlog_segment(phys - phys % SEGMENT)
        before = segment.read_bytes()
        with pytest.raises(StoreReadOnly) as refused:
            MessageStore(small_config(copy)).start()
        assert refused.value.cause == preview.start_fails
        assert f"valid records end at offset {phys}, in segment {segment.name}" in (
            preview.start_fails)
        assert segment.read_bytes() == before
        return
    with MessageStore(small_config(copy)) as store:
        real = store.recovery_report
    assert real is not None
    assert (real.start_offset, real.end_offset, real.reason) == (
        preview.start_offset, preview.end_offset, preview.reason)
    assert real.segments_deleted == preview.segments_deleted
    assert real.bytes_dropped == preview.bytes_truncated
    assert len(real.damaged) == preview.damaged_skipped


def test_verify_checks_batch_consume_queues(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(small_config(root)) as store:
        store.set_batch_topic("T")
        for i in range(N):
            store.put("T", 0, message(i))
    clean = verify(root)
    assert clean.ok, clean.problems
    assert clean.queues == 1 and clean.queue_entries == N
    bcq = sorted(StoreLayout(root).queue_dir("T", 0, batch=True).iterdir())[0]
    data = bytearray(bcq.read_bytes())
    data[7 * 46 + 11] ^= 0x01  # entry 7: its size
    data[20 * 46 : N * 46] = bytes((N - 20) * 46)  # entries 20.. lost
    bcq.write_bytes(data)
    report = verify(root)
    details = [(p.kind, p.where, p.offset, p.detail) for p in report.problems]
    assert ("batch queue", "T/0", 7, f"size differs from record at {records_of(root)[7]}"
            ) in details, details
    assert any(d[3] == f"{N - 20} records of the commit log after the last entry have no "
               "entry" for d in details), details


def records_of(root: Path) -> list[int]:
    return [r.phys for r in dump_records(root, None, 10_000).records]


def test_verify_reports_a_queue_file_cut_to_whole_entries(tmp_path: Path,
                                                          pristine: Pristine) -> None:
    root = tmp_path / "s"
    copy_of(pristine, root)
    cq = sorted(StoreLayout(root).queue_dir("T", 0).iterdir())[-1]
    cq.write_bytes(cq.read_bytes()[: 2 * 20])  # file size inferred from the others
    report = verify(root)
    details = [p.detail for p in report.problems if p.where == "T/0"]
    assert any("40 bytes" in d and cq.name in d for d in details), details
    assert any(f"{N - 34} records of the commit log" in d for d in details), details


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, N - 1), at=st.integers(0, 300), bit=st.integers(0, 7),
       checkpoint=st.booleans(), lost_queue=st.booleans())
def test_verify_preview_equals_a_start_for_any_flip(
        pristine: Pristine, index: int, at: int, bit: int,
        checkpoint: bool, lost_queue: bool) -> None:
    source, records = pristine
    phys, size = records[index]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "s"
        shutil.copytree(source, root)
        patch(root, phys + at % size, bytes([_byte(root, phys + at % size) ^ (1 << bit)]))
        if not checkpoint:
            crashed(root)
        if lost_queue:
            for f in sorted(StoreLayout(root).queue_dir("T", 0).iterdir())[1:]:
                f.unlink()
        preview = verify(root).recovery
        assert preview is not None
        with MessageStore(small_config(root)) as store:
            real = store.recovery_report
        assert real is not None
        assert (real.start_offset, real.end_offset, real.reason, real.segments_deleted,
                real.bytes_dropped, len(real.damaged)) == (
            preview.start_offset, preview.end_offset, preview.reason,
            preview.segments_deleted, preview.bytes_truncated, preview.damaged_skipped)


def _byte(root: Path, phys: int) -> int:
    with StoreLayout(root).commitlog_segment(phys - phys % SEGMENT).open("rb") as f:
        f.seek(phys % SEGMENT)
        return f.read(1)[0]


@pytest.mark.parametrize("flip", [(20, 0x01), (27, 0x01), (27, 0x02)],
                         ids=["far ahead", "one off", "behind"])
def test_a_damaged_queue_offset_becomes_a_hole_on_rebuild(tmp_path: Path, pristine: Pristine,
                                                          flip: tuple[int, int]) -> None:
    """QUEUEOFFSET has no checksum: a flipped one is found when the queue is rebuilt
    (it does not follow its queue), its slot becomes a hole, the queue goes on."""
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    victim = 10 if flip[1] == 0x01 else 11  # 11 ^ 2 = 9: behind its queue
    phys, _ = records[victim]
    at, mask = flip
    patch(root, phys + at, bytes([_byte(root, phys + at) ^ mask]))
    shutil.rmtree(StoreLayout(root).consumequeue_dir)  # rebuilt from the whole log
    with MessageStore(small_config(root)) as store:
        report = store.recovery_report
        assert report is not None and [d.offset for d in report.misplaced] == [phys]
        assert store.max_offset("T", 0) == N
        got, _ = bodies(store, 32)
        assert got == [i for i in range(N) if i != victim]


@pytest.mark.parametrize("damage", ["zeroed", "emptied"])
def test_a_segment_the_disk_lost_after_a_clean_stop_stops_the_start(
        tmp_path: Path, pristine: Pristine, damage: str) -> None:
    """A clean stop, then the last segment zeroed or emptied: the start names it and
    stops, the segment and the queues as they were, rather than take the log for one
    that ends earlier and cut every queue back to it."""
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    last = records[-1][0]
    segment = StoreLayout(root).commitlog_segment(last - last % SEGMENT)
    segment.write_bytes(bytes(SEGMENT) if damage == "zeroed" else b"")
    queue = StoreLayout(root).queue_dir("T", 0)
    queues = {p.name: p.read_bytes() for p in queue.iterdir()}
    with pytest.raises(StoreReadOnly) as refused:
        MessageStore(small_config(root)).start()
    assert refused.value.status == "LOAD_FAILED"
    assert f"segment {segment.name}" in refused.value.cause, refused.value.cause
    assert segment.read_bytes() == (bytes(SEGMENT) if damage == "zeroed" else b"")
    assert {p.name: p.read_bytes() for p in queue.iterdir()} == queues
    if damage == "zeroed":
        preview = verify(root).recovery
        assert preview is not None and preview.start_fails == refused.value.cause
