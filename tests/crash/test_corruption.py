"""Corrupt a crashed store by hand, reopen it, and check exactly the valid prefix survives."""

from __future__ import annotations

import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.store.conftest import records

from tidemq.formats.record import MIN_RECORD_SIZE, Record
from tidemq.store.checkpoint import Checkpoint
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageStore

from .conftest import check_store, recover_and_die
from .store_proc import CQ_FILE, SEGMENT, TOPIC, body_for, crash_config

Entry = tuple[int, int, int]  # queue offset, physical offset, size
Fill = Callable[[Path, int], list[Entry]]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def fill(crashed: Fill) -> Fill:
    """``fill(root, count)``: a store that took ``count`` acknowledged messages and then
    died by kill -9, at ``root`` (a copy of the module's one for that count)."""
    return crashed


def segment_path(root: Path, phys: int) -> Path:
    return StoreLayout(root).commitlog_segment(phys - phys % SEGMENT)


def patch_log(root: Path, phys: int, data: bytes) -> None:
    path = segment_path(root, phys)
    with open(path, "r+b") as f:
        f.seek(phys % SEGMENT)
        f.write(data)


def read_log(root: Path, phys: int, size: int) -> bytes:
    with open(segment_path(root, phys), "rb") as f:
        f.seek(phys % SEGMENT)
        return f.read(size)


def set_checkpoint(root: Path, dispatched: int | None) -> None:
    path = StoreLayout(root).checkpoint_file
    if dispatched is None:
        path.unlink(missing_ok=True)
    else:
        Checkpoint(flushed_phy_offset=dispatched, dispatched_phy_offset=dispatched).write(path)


def end_of(entries: list[Entry]) -> int:
    _, phys, size = entries[-1]
    return phys + size


def nonzero(rng: random.Random, n: int) -> bytes:
    return bytes(b or 0xFF for b in rng.randbytes(n))


# ---------------------------------------------------------------- torn and flipped tails

FLIPS = {
    "body": 88 + 3,            # covered by BODYCRC
    "magic": 4,                # unknown magic code
    "totalsize": 1,            # TOTALSIZE no longer fits or adds up
    "physical_offset": 28 + 7,  # PHYSICALOFFSET differs from the position
    "body_length": 84 + 3,     # lengths no longer add up to TOTALSIZE
}


@pytest.mark.parametrize("field", FLIPS)
@pytest.mark.parametrize("checkpoint", ["none", "earlier"])
def test_bit_flip_in_the_tail_record(root: Path, fill: Fill, field: str, checkpoint: str) -> None:
    entries = fill(root, 20)
    set_checkpoint(root, None if checkpoint == "none" else entries[12][1])
    _, tail_phys, tail_size = entries[-1]
    where = tail_phys + FLIPS[field]
    patch_log(root, where, bytes([read_log(root, where, 1)[0] ^ 0x10]))

    report, ids = check_store(root)
    assert report.end_offset == tail_phys
    assert report.bytes_dropped == tail_size
    assert report.reason
    assert ids[0] == list(range(19))  # the valid prefix, nothing else
    # The dropped tail is zeroed, so nothing of it can come back.
    assert read_log(root, tail_phys, tail_size) == bytes(tail_size)


def test_torn_write_of_the_last_record(root: Path, fill: Fill) -> None:
    entries = fill(root, 10)
    _, tail_phys, tail_size = entries[-1]
    patch_log(root, tail_phys + tail_size // 2, bytes(tail_size - tail_size // 2))
    set_checkpoint(root, None)
    report, ids = check_store(root)
    assert report.end_offset == tail_phys
    assert report.bytes_dropped == tail_size // 2
    assert ids[0] == list(range(9))


# ---------------------------------------------------------------- damage in the middle


MIDDLE_FLIPS = {**FLIPS, "properties": -3}  # negative: from the record's end


@pytest.mark.parametrize("field", MIDDLE_FLIPS)
@pytest.mark.parametrize("checkpoint", ["none", "earlier"])
def test_bit_flip_in_a_middle_record_drops_nothing_after_it(root: Path, fill: Fill,
                                                            field: str, checkpoint: str) -> None:
    entries = fill(root, 20)
    set_checkpoint(root, None if checkpoint == "none" else entries[4][1])
    _, phys, size = entries[10]
    where = phys + MIDDLE_FLIPS[field] % size
    patch_log(root, where, bytes([read_log(root, where, 1)[0] ^ 0x90]))

    store = MessageStore(crash_config(root))
    report = store.start()
    try:
        assert report.end_offset == end_of(entries) and report.bytes_dropped == 0
        assert [d.offset for d in report.damaged] == [phys]
        ids = [int(bytes(r.body[:8])) for r in queue_records_skipping(store)]
        assert ids == [i for i in range(20) if i != 10]
        assert store.max_offset(TOPIC, 0) == 20  # offsets stay dense past the damage
    finally:
        store.shutdown()
    assert read_log(root, phys + size, 8) != bytes(8)  # the records after it are intact


def queue_records_skipping(store: MessageStore) -> list[Record]:
    out: list[Record] = []
    offset = 0
    while offset < store.max_offset(TOPIC, 0):
        result = store.get(TOPIC, 0, offset, max_count=7)
        assert result.next_begin_offset > offset
        out += records(result)
        offset = result.next_begin_offset
    return out


# ---------------------------------------------------------------- garbage after the end


def test_garbage_after_the_end_is_zeroed_and_stays_gone(root: Path, fill: Fill) -> None:
    entries = fill(root, 10)
    end = end_of(entries)
    garbage = nonzero(random.Random(7), min(300, SEGMENT - end % SEGMENT))
    patch_log(root, end, garbage)

    first = recover_and_die(root)  # recovery truncates and zeroes, then a second crash
    assert (first["end_offset"], first["bytes_dropped"]) == (end, len(garbage))
    assert read_log(root, end, len(garbage)) == bytes(len(garbage))

    report, ids = check_store(root)  # reopen after the second crash: same state
    assert report.end_offset == end and report.bytes_dropped == 0
    assert ids[0] == list(range(10))


def test_stale_record_with_a_wrong_physical_offset_is_not_resurrected(root: Path,
                                                                     fill: Fill) -> None:
    entries = fill(root, 10)
    end = end_of(entries)
    _, phys3, size3 = entries[3]
    stale = read_log(root, phys3, size3)  # well formed, CRC fine, PHYSICALOFFSET = phys3
    patch_log(root, end, stale)
    report, ids = check_store(root)
    assert report.end_offset == end
    assert "PHYSICALOFFSET" in report.reason
    assert report.bytes_dropped == size3
    assert ids[0] == list(range(10))
    assert read_log(root, end, size3) == bytes(size3)


def test_valid_looking_record_behind_a_hole_is_dropped(root: Path, fill: Fill) -> None:
    entries = fill(root, 10)
    end = end_of(entries)
    _, phys9, size9 = entries[9]
    record = bytearray(read_log(root, phys9, size9))
    struct.pack_into(">q", record, 28, end + 64)  # even its PHYSICALOFFSET is right
    patch_log(root, end + 64, bytes(record))
    report, ids = check_store(root)
    assert report.end_offset == end
    assert report.bytes_dropped == 64 + size9
    assert ids[0] == list(range(10))


# ---------------------------------------------------------------- derived data in doubt


def cq_dir(root: Path) -> Path:
    return StoreLayout(root).queue_dir(TOPIC, 0)


@pytest.mark.parametrize("checkpoint", ["none", "at_end"])
def test_consume_queue_lost_tail_is_rebuilt(root: Path, fill: Fill, checkpoint: str) -> None:
    entries = fill(root, 40)  # two consume-queue files of 32 entries
    set_checkpoint(root, None if checkpoint == "none" else end_of(entries))
    files = sorted(cq_dir(root).iterdir())
    assert len(files) == 2
    files[1].write_bytes(bytes(CQ_FILE))  # entries 32..39 lost
    with open(files[0], "r+b") as f:
        f.seek(30 * 20)
        f.write(bytes(40))  # and 30, 31
    report, ids = check_store(root)
    assert ids[0] == list(range(40))
    if checkpoint == "at_end":  # from the end of the last entry left, not a full rescan
        assert report.start_offset == entries[29][1] + entries[29][2]


def test_deleted_consume_queues_are_rebuilt(root: Path, fill: Fill) -> None:
    entries = fill(root, 40)
    set_checkpoint(root, end_of(entries))
    shutil.rmtree(StoreLayout(root).consumequeue_dir)
    _, ids = check_store(root)
    assert ids[0] == list(range(40))


def test_consume_queue_file_of_a_wrong_size_is_rebuilt(root: Path, fill: Fill) -> None:
    entries = fill(root, 40)
    set_checkpoint(root, end_of(entries))
    first = sorted(cq_dir(root).iterdir())[0]
    first.write_bytes(first.read_bytes()[: CQ_FILE // 2])
    _, ids = check_store(root)
    assert ids[0] == list(range(40))


def test_consume_queue_hole_is_rebuilt(root: Path, fill: Fill) -> None:
    entries = fill(root, 40)
    set_checkpoint(root, end_of(entries))
    first = sorted(cq_dir(root).iterdir())[0]
    with open(first, "r+b") as f:
        f.seek(10 * 20)
        f.write(bytes(20))  # entry 10 lost, later ones intact
    _, ids = check_store(root)
    assert ids[0] == list(range(40))


def test_files_whose_creation_was_cut_short_are_discarded(root: Path, fill: Fill) -> None:
    entries = fill(root, 10)
    end = end_of(entries)
    set_checkpoint(root, end)
    layout = StoreLayout(root)
    segment = layout.commitlog_segment(SEGMENT * (end // SEGMENT + 1))
    segment.write_bytes(bytes(SEGMENT // 3))  # killed inside posix_fallocate
    queue_file = layout.queue_file(TOPIC, 0, CQ_FILE)
    queue_file.write_bytes(b"")  # killed between creating and sizing the file
    report, ids = check_store(root)
    assert not segment.exists() and not queue_file.exists()
    assert report.start_offset == end  # no rebuild was needed
    assert ids[0] == list(range(10))


# ---------------------------------------------------------------- checkpoints in doubt

GARBAGE_CHECKPOINTS = {
    "inside_a_record": lambda e: e[5][1] + 3,
    "inside_zeros_of_a_record": lambda e: e[0][1] + 20,  # QUEUEOFFSET 0: eight zero bytes
    "past_the_end_in_zeros": lambda e: end_of(e) + 100,
    "end_of_the_segment": lambda e: SEGMENT * (end_of(e) // SEGMENT + 1),
    "beyond_the_log": lambda e: 10 * SEGMENT + 5,
    "negative": lambda e: -1,
}


@pytest.mark.parametrize("where", GARBAGE_CHECKPOINTS)
@pytest.mark.parametrize("shutdown", ["crash", "clean"])
def test_checkpoint_pointing_at_garbage(root: Path, fill: Fill, where: str, shutdown: str) -> None:
    entries = fill(root, 45)  # spans two segments
    assert end_of(entries) > SEGMENT
    if shutdown == "clean":
        store = MessageStore(crash_config(root))
        store.start()
        store.shutdown()
    set_checkpoint(root, GARBAGE_CHECKPOINTS[where](entries))
    report, ids = check_store(root)
    assert report.end_offset == end_of(entries)
    assert report.bytes_dropped == 0
    assert ids[0] == list(range(45))


def test_torn_checkpoint_file(root: Path, fill: Fill) -> None:
    entries = fill(root, 12)
    StoreLayout(root).checkpoint_file.write_bytes(nonzero(random.Random(3), 40))
    report, ids = check_store(root)
    assert report.end_offset == end_of(entries)
    assert ids[0] == list(range(12))


def test_fill_bodies_are_what_the_checks_expect(root: Path, fill: Fill) -> None:
    entries = fill(root, 3)
    for qo, phys, size in entries:
        record = read_log(root, phys, size)
        assert size >= MIN_RECORD_SIZE and body_for(qo) in record
