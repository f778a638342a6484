"""Commit-log segments: the BLANK marker, the ``L + 8`` rule, whole batches, size limits."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tidemq.errors import MessageTooLarge
from tidemq.formats.record import BLANK_MAGIC, Record, decode_record
from tidemq.store.commitlog import CommitLog
from tidemq.store.layout import StoreLayout, parse_segment_name, segment_name
from tidemq.store.message_store import MessageInput, MessageStore, PutResult

from .conftest import SEGMENT, OpenStore, msg, read_queue

TOPIC = "T"
OVERHEAD = 91 + len(TOPIC)  # record size = OVERHEAD + body (no properties)

Putter = Callable[[MessageStore, MessageInput], PutResult]
PUTTERS: dict[str, Putter] = {
    "put": lambda s, m: s.put(TOPIC, 0, m),
    "put_batch": lambda s, m: s.put_batch(TOPIC, 0, [m]),
}


def sized(size: int, fill: bytes = b"x") -> MessageInput:
    """A message whose record is exactly ``size`` bytes."""
    return msg(fill * (size - OVERHEAD))


def segment_bytes(root: Path, base: int) -> bytes:
    return StoreLayout(root).commitlog_segment(base).read_bytes()


def test_segment_names() -> None:
    assert segment_name(0) == "00000000000000000000"
    assert segment_name(1073741824) == "00000000001073741824"
    assert parse_segment_name("00000000000000004096") == 4096
    assert parse_segment_name("4096") is None
    assert parse_segment_name("0000000000000000409x") is None


@pytest.mark.parametrize("putter", PUTTERS.values(), ids=PUTTERS.keys())
def test_record_filling_remaining_minus_8_stays(open_store: OpenStore, store_root: Path,
                                                putter: Putter) -> None:
    store = open_store()
    first = putter(store, sized(100))
    exact = putter(store, sized(SEGMENT - 100 - 8))  # L + 8 == remaining: it fits
    after = putter(store, sized(200))
    assert list(first.phys_offsets) == [0]
    assert list(exact.phys_offsets) == [100] and list(exact.sizes) == [SEGMENT - 108]
    assert list(after.phys_offsets) == [SEGMENT]
    store.shutdown()
    seg0 = segment_bytes(store_root, 0)
    assert len(seg0) == SEGMENT
    assert seg0[SEGMENT - 8 :] == struct.pack(">ii", 8, BLANK_MAGIC)  # the marker still fits
    assert decode_record(seg0, 100) == decode_record(seg0, 100, check_crc=True)


@pytest.mark.parametrize("putter", PUTTERS.values(), ids=PUTTERS.keys())
def test_one_byte_more_rolls_with_blank(open_store: OpenStore, store_root: Path,
                                        putter: Putter) -> None:
    store = open_store()
    putter(store, sized(100))
    rolled = putter(store, sized(SEGMENT - 100 - 8 + 1))
    assert list(rolled.phys_offsets) == [SEGMENT]
    assert [r.queue_offset for r in read_queue(store, TOPIC, 0)] == [0, 1]
    store.shutdown()
    seg0 = segment_bytes(store_root, 0)
    assert seg0[100:108] == b"".join([
        struct.pack(">i", SEGMENT - 100),  # the BLANK covers the rest of the segment
        struct.pack(">i", BLANK_MAGIC),    # BLANK_MAGIC 0xCBD43194
    ])
    assert seg0[108:] == bytes(SEGMENT - 108)  # the rest stays zero
    seg1 = segment_bytes(store_root, SEGMENT)
    rec = decode_record(seg1, 0, check_crc=True, expected_physical_offset=SEGMENT)
    assert isinstance(rec, Record) and rec.queue_offset == 1


def test_batch_is_never_split(open_store: OpenStore) -> None:
    store = open_store()
    store.put(TOPIC, 0, sized(1000))
    # Four records of 780 bytes: 3120 > 4096 - 1000 - 8, so the whole batch moves.
    moved = store.put_batch(TOPIC, 0, [sized(780, bytes([65 + i])) for i in range(4)])
    assert moved.queue_offset == 1
    assert list(moved.phys_offsets) == [SEGMENT + 780 * i for i in range(4)]
    assert list(moved.sizes) == [780] * 4
    # A batch exactly filling remaining - 8 stays in its segment.
    remaining = SEGMENT - 4 * 780
    fits = store.put_batch(TOPIC, 0, [sized((remaining - 8) // 2)] * 2)
    assert list(fits.phys_offsets) == [SEGMENT + 3120, SEGMENT + 3120 + 484]
    assert fits.phys_offsets[1] + fits.sizes[1] == 2 * SEGMENT - 8
    got = read_queue(store, TOPIC, 0)
    assert [r.physical_offset for r in got] == [0, *moved.phys_offsets, *fits.phys_offsets]
    assert [bytes(r.body[:1]) for r in got[1:5]] == [b"A", b"B", b"C", b"D"]


def test_message_too_large(open_store: OpenStore) -> None:
    store = open_store(max_message_size=SEGMENT)
    store.put(TOPIC, 0, sized(100))
    with pytest.raises(MessageTooLarge) as info:
        store.put(TOPIC, 0, sized(SEGMENT - 8 + 1))  # can never fit one segment
    assert info.value.limit == SEGMENT - 8
    assert info.value.size == SEGMENT - 7
    with pytest.raises(MessageTooLarge):
        store.put_batch(TOPIC, 0, [sized(2048), sized(2048)])
    # A record of exactly segment - 8 bytes is fine (in a fresh segment).
    ok = store.put(TOPIC, 0, sized(SEGMENT - 8))
    assert ok.queue_offset == 1 and list(ok.phys_offsets) == [SEGMENT]
    assert store.wait_dispatched()
    assert store.max_offset(TOPIC, 0) == 2  # the refused puts took no offset


def test_body_over_max_message_size(open_store: OpenStore) -> None:
    store = open_store(max_message_size=1000)
    with pytest.raises(MessageTooLarge) as info:
        store.put(TOPIC, 0, msg(b"x" * 1001))
    assert (info.value.size, info.value.limit) == (1001, 1000)
    with pytest.raises(MessageTooLarge):
        store.put_batch(TOPIC, 0, [msg(b"ok"), msg(b"x" * 1001)])
    assert store.put(TOPIC, 0, msg(b"x" * 1000)).queue_offset == 0
    assert store.commitlog.max_offset == OVERHEAD + 1000


def test_the_warmer_tops_up_the_prefaulted_run_in_steps_of_at_least_warm_min(
        tmp_path: Path) -> None:
    """A step for the few pages written since the last one would wake the warmer (and
    take the GIL) every time: it waits until the writer used ``WARM_MIN`` of the run."""
    log = CommitLog(StoreLayout(tmp_path), 4 << 20)
    log.warm_ahead = log.WARM_CHUNK = 1 << 20
    log.WARM_MIN = 256 << 10
    try:
        seg = log.new_segment(0)
        seg.write_at(0, b"x" * 100)
        if not log.warm_step():
            pytest.skip("the kernel lacks MADV_POPULATE_WRITE")
        assert seg.populated == 100 + (1 << 20)
        assert not log.warm_step()  # the run is warm_ahead long
        seg.write_at(seg.wrote, b"x" * 200_000)
        assert not log.warm_step()  # 200,000 bytes used: less than WARM_MIN
        assert seg.populated == 100 + (1 << 20)
        seg.write_at(seg.wrote, b"x" * 100_000)
        assert log.warm_step()
        assert seg.populated == seg.wrote + (1 << 20)
        seg.write_at(seg.wrote, b"x" * (seg.size - (1 << 20) - seg.wrote + 10))
        assert log.warm_step()  # the end of the segment: the rest, however little
        assert seg.populated == seg.size
    finally:
        log.close()


def _mapping_kib(path: Path) -> dict[str, int]:
    """``/proc/self/smaps`` sizes in KiB (``Rss``, ``Shared_Dirty``...) of the mapping of
    ``path``."""
    fields: dict[str, int] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:  # a mapping's first line
            inside = line.endswith(str(path))
        elif inside and line.endswith(" kB"):
            fields[head[0].rstrip(":")] = fields.get(head[0].rstrip(":"), 0) + int(head[1])
    return fields


def test_the_warmer_maps_pages_ahead_without_dirtying_them(disk_path: Path) -> None:
    """A dirty zero page ahead of the writer is written to disk by the next flush, then
    write-protected, so the records later written into it fault again and are written a
    second time: the warmer leaves the pages it pre-faults clean. (On a disk: a tmpfs's
    pages are dirty from the start.)"""
    log = CommitLog(StoreLayout(disk_path), 4 << 20, warm_ahead=1 << 20)
    log.WARM_CHUNK = 1 << 20
    try:
        seg = log.new_segment(0)
        seg.write_at(0, b"x" * 100)
        seg.flush()
        if not log.warm_step():
            pytest.skip("the kernel lacks MADV_POPULATE_WRITE")
        assert seg.populated == 100 + (1 << 20)
        mapped = _mapping_kib(seg.path)
        assert mapped["Rss"] >= 1024  # the run is in the page cache and mapped ...
        assert mapped["Shared_Dirty"] + mapped["Private_Dirty"] == 0  # ... and clean
        seg.write_at(seg.wrote, b"y" * 8192)  # the writer's stores still land
        assert bytes(seg.view[100:8292]) == b"y" * 8192
        after = _mapping_kib(seg.path)
        assert after["Shared_Dirty"] + after["Private_Dirty"] >= 8
    finally:
        log.close()


def test_commit_log_warm_ahead_zero_runs_no_warmer(open_store: OpenStore) -> None:
    """``commitLogWarmAhead=0``: the appends fault their pages in themselves."""
    def warmers() -> set[threading.Thread]:  # other tests' stores may be open as well
        return {t for t in threading.enumerate() if t.name == "tidemq-warm"}

    before = warmers()
    warmed = open_store(commit_log_warm_ahead=1 << 20)
    assert len(warmers() - before) == 1
    warmed.shutdown()
    before = warmers()
    store = open_store(commit_log_warm_ahead=0)
    assert warmers() - before == set()
    assert store.put(TOPIC, 0, msg(b"x" * 1000)).queue_offset == 0
    assert [r.body for r in read_queue(store, TOPIC, 0)] == [b"x" * 1000]


def test_an_idle_warmer_sleeps_longer_the_longer_the_writer_stands_still(
        tmp_path: Path) -> None:
    """An idle broker's warmer must not wake sixty times a second; a writer that moves
    brings it back to naps as short as its rate needs at once."""
    log = CommitLog(StoreLayout(tmp_path), 4 << 20)
    try:
        pause, naps = log.WARM_IDLE_MIN, []
        for _ in range(12):  # the writer stands still
            pause = log.warm_pause(pause, 0, pause)
            naps.append(pause)
        assert naps == sorted(naps) and naps[-1] == log.WARM_IDLE_DEEP
        assert sum(1 / n for n in naps[-3:]) / 3 <= 4  # wake-ups per second, idle
        fast = log.warm_pause(pause, 1 << 30, 1.0)  # a gigabyte a second
        assert fast == log.WARM_IDLE_MIN  # nothing pre-faulted ahead (no segment)
    finally:
        log.close()


def test_a_slow_writer_leaves_the_warmer_asleep_as_long_as_its_run_lasts(
        tmp_path: Path) -> None:
    """One send at a time writes a few megabytes a second: the warmer, which has nothing
    to do until the writer used ``WARM_MIN`` of the run ahead of it, sleeps the longest
    nap; a fast writer brings it back in the time it takes to use half of that run.
    A warmer waking sixty times a second took the GIL from the event loop in the middle
    of one request in a hundred."""
    log = CommitLog(StoreLayout(tmp_path), 64 << 20)
    try:
        seg = log.new_segment(0)
        seg.wrote, seg.populated = 1000, 1000 + log.warm_ahead
        slow = log.warm_pause(log.WARM_IDLE_MIN, 30_000, 0.01)  # 3 MB/s
        assert slow == log.WARM_IDLE_DEEP
        fast = log.warm_pause(log.WARM_IDLE_MIN, 1 << 24, 0.016)  # a gigabyte a second
        assert fast == pytest.approx(0.016)  # the time to write half of the 32 MiB ahead
        seg.populated = seg.wrote  # nothing pre-faulted (a kernel without the advice)
        assert log.warm_pause(log.WARM_IDLE_MIN, 1 << 24, 0.016) == log.WARM_IDLE_MIN
    finally:
        log.close()
