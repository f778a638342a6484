"""Retention: the pure plan, segment ages, and passes over a real store with a fake disk."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidemq.errors import StoreReadOnly
from tidemq.formats.record import BLANK_MAGIC, Record, decode_record
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.retention import (
    HOUR_MS,
    LostRange,
    RetentionPolicy,
    SegmentAge,
    _last_record_by_walk,
    last_record_timestamp,
    local_hour,
    plan_retention,
)
from tidemq.types import GetStatus

from .conftest import FakeClock, small_config

T0 = 1_700_000_000_000
MINUTE = 60_000


# ---------------------------------------------------------------------- the plan (pure)


def ages(*hours_old: float | None, now: int = T0) -> list[SegmentAge]:
    """Segments 1000 bytes apart whose last record is that many hours old (None: unknown)."""
    return [SegmentAge(i * 1000, -1 if h is None else now - int(h * HOUR_MS))
            for i, h in enumerate(hours_old)]


POLICY = RetentionPolicy(file_reserved_ms=72 * HOUR_MS, delete_hours=frozenset({4}),
                         max_used_ratio=0.75, clean_forcibly_ratio=0.85, warning_ratio=0.90,
                         batch_max=10)


def plan(segs: list[SegmentAge], *, hour: int = 4, usage: float = 0.5,
         policy: RetentionPolicy = POLICY, manual: bool = False) -> tuple[int, ...]:
    return plan_retention(segs, now_ms=T0, hour=hour, usage=usage, policy=policy,
                          manual=manual).delete


def test_time_trigger_deletes_expired_segments_only_in_the_delete_hour() -> None:
    segs = ages(100, 80, 72, 71, 1)
    assert plan(segs) == (0, 1000, 2000)
    assert plan(segs, hour=5) == ()
    assert plan(segs, hour=5, manual=True) == (0, 1000, 2000)


def test_space_trigger_deletes_expired_segments_at_any_hour() -> None:
    segs = ages(100, 80, 1)
    p = plan_retention(segs, now_ms=T0, hour=13, usage=0.80, policy=POLICY)
    assert p.delete == (0, 1000) and p.triggers == ("space",) and not p.forced
    assert not p.disk_full


def test_forced_mode_deletes_young_segments_but_never_the_last() -> None:
    segs = ages(3, 2, 1, 0)
    p = plan_retention(segs, now_ms=T0, hour=13, usage=0.86, policy=POLICY)
    assert p.forced and p.delete == (0, 1000, 2000)
    no_force = RetentionPolicy(clean_forcibly_enable=False)
    assert plan(segs, hour=13, usage=0.86, policy=no_force) == ()


def test_never_the_last_segment() -> None:
    assert plan(ages(500)) == ()
    assert plan(ages(500, 400)) == (0,)
    assert plan([]) == ()


def test_no_holes_stop_at_the_first_kept_segment() -> None:
    assert plan(ages(100, 1, 100, 100)) == (0,)
    assert plan(ages(None, 100, 100)) == ()  # an unknown age is kept
    assert plan(ages(None, 100, 100), usage=0.9) == (0, 1000)  # ... unless forced


def test_batch_max_limits_one_pass() -> None:
    policy = RetentionPolicy(batch_max=2)
    assert plan(ages(100, 100, 100, 100), policy=policy) == (0, 1000)


def test_disk_full_above_the_warning_ratio() -> None:
    assert plan_retention(ages(1), now_ms=T0, hour=0, usage=0.91, policy=POLICY).disk_full
    assert not plan_retention(ages(1), now_ms=T0, hour=0, usage=0.90, policy=POLICY).disk_full


def test_policy_from_config_clamps_like_upstream() -> None:
    cfg = StoreConfig(file_reserved_time=48, delete_when="04;16", disk_max_used_space_ratio=70,
                      disk_space_clean_forcibly_ratio=95, disk_space_warning_level_ratio=20,
                      delete_file_batch_max=3)
    p = RetentionPolicy.from_config(cfg)
    assert p.file_reserved_ms == 48 * HOUR_MS and p.delete_hours == frozenset({4, 16})
    assert (p.max_used_ratio, p.clean_forcibly_ratio, p.warning_ratio) == (0.70, 0.85, 0.35)
    assert p.batch_max == 3


# ---------------------------------------------------------------------- a real store


class FakeDisk:
    """``disk_usage`` for the store: a settable ratio; ``calls`` wakes waiters."""

    def __init__(self, ratio: float = 0.10) -> None:
        self.ratio = ratio
        self.calls = 0
        self._cond = threading.Condition()

    def __call__(self, path: Path) -> float:
        assert path.name == "commitlog"
        with self._cond:
            self.calls += 1
            self._cond.notify_all()
        return self.ratio

    def wait_calls(self, n: int, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.calls >= n, timeout)


NOW = T0 + 90 * MINUTE  # records are one minute apart from T0; one hour is reserved


@pytest.fixture
def disk() -> FakeDisk:
    return FakeDisk()


@pytest.fixture
def make_store(tmp_path: Path, disk: FakeDisk) -> Iterator[Any]:
    opened: list[MessageStore] = []

    def _make(**overrides: Any) -> tuple[MessageStore, FakeClock]:
        values: dict[str, Any] = {"file_reserved_time": 1,
                                  "delete_when": f"{local_hour(NOW):02d}",
                                  "max_hash_slot_num": 16, "max_index_num": 8}
        values.update(overrides)
        clock = FakeClock(T0)
        store = MessageStore(small_config(tmp_path / "store", **values), clock=clock,
                             disk_usage=disk)
        store.start()
        opened.append(store)
        return store, clock

    yield _make
    for store in opened:
        store.shutdown()


def fill(store: MessageStore, clock: FakeClock, n: int = 60) -> None:
    """``n`` 400-byte messages one minute apart: about ten per segment. Queue 1 gets only
    the first three; queue 0 everything."""
    for i in range(n):
        clock.now = T0 + i * MINUTE
        props = f"UNIQ_KEY\x01U{i}\x02".encode()
        store.put("T", 1 if i < 3 else 0, MessageInput(b"x" * 400, props, keys=(f"U{i}",)))
    assert store.wait_dispatched()


def segment_last_times(store: MessageStore) -> dict[int, int]:
    """Store time of each segment's last record, found by reading every record."""
    out: dict[int, int] = {}
    for seg in store.commitlog.segments:
        pos = 0
        while pos + 8 <= seg.wrote:
            rec = decode_record(seg.view, pos)
            if not isinstance(rec, Record):
                break
            out[seg.base] = rec.store_timestamp
            pos += rec.total_size
    return out


def expired_prefix(store: MessageStore, now: int) -> list[int]:
    last = segment_last_times(store)
    bases = [s.base for s in store.commitlog.segments][:-1]
    out = []
    for base in bases:
        if last[base] + HOUR_MS > now:
            break
        out.append(base)
    return out


def test_segment_age_is_the_last_record_store_time(make_store: Any) -> None:
    store, clock = make_store()
    fill(store, clock)
    truth = segment_last_times(store)
    segs = store.commitlog.segments
    assert len(segs) >= 5
    for seg in segs[:-1]:
        assert last_record_timestamp(seg) == truth[seg.base]
        assert seg.base + _last_record_by_walk(seg) < seg.end
    assert last_record_timestamp(segs[-1]) == T0 + 59 * MINUTE


def test_segment_age_with_magic_bytes_in_bodies(make_store: Any) -> None:
    store, clock = make_store()
    blank = BLANK_MAGIC.to_bytes(4, "big", signed=True)
    tricky = (b"\xda\xa3\x20\xa7" + b"\xda\xa3\x20\xab" + blank + b"\x00\x00\x01\x00") * 40
    for i in range(40):
        clock.now = T0 + i
        store.put("T", 0, MessageInput(tricky))
    for seg in store.commitlog.segments[:-1]:
        assert last_record_timestamp(seg) == segment_last_times(store)[seg.base]


def test_time_trigger_deletes_and_corrects_queues_and_index(make_store: Any) -> None:
    store, clock = make_store()
    fill(store, clock)
    expect = expired_prefix(store, NOW)
    assert len(expect) >= 2
    keep_first = store.commitlog.segments[len(expect)].base
    assert store.index is not None
    store.index.drain()
    index_files = len(store.index.files)
    report = store.run_retention(NOW)
    assert report.triggers == ("time",) and not report.forced and not report.disk_full
    assert report.deleted_segments == expect
    assert store.commitlog.min_offset == keep_first == report.min_offset_after
    assert not any((store.layout.commitlog_segment(b)).exists() for b in expect)
    # queue 0: its min offset moved past the deleted records; pulls below get OFFSET_TOO_SMALL
    low = store.min_offset("T", 0)
    assert low > 0 and report.queues_corrected >= 1
    first = store.get("T", 0, low, max_count=1)
    assert first.found
    rec = decode_record(first.buffers[0])
    assert isinstance(rec, Record) and rec.physical_offset >= keep_first
    too_small = store.get("T", 0, 0)
    assert too_small.status is GetStatus.OFFSET_TOO_SMALL
    assert too_small.next_begin_offset == low
    # queue 1 (only early records): logically empty but it keeps its offsets
    assert store.min_offset("T", 1) == store.max_offset("T", 1) == 3
    # index files wholly below the new minimum are gone; lookups of deleted data find nothing
    assert report.index_files_deleted >= 1
    assert len(store.index.files) == index_files - report.index_files_deleted
    assert all(f.end_phys >= keep_first for f in store.index.files)
    assert store.query_by_key("T", "U0") == []
    assert len(store.query_by_key("T", "U59")) == 1
    # nothing more to do in a second pass
    assert store.run_retention(NOW).deleted_segments == []


def test_outside_delete_hour_nothing_unless_space_is_short(make_store: Any,
                                                          disk: FakeDisk) -> None:
    other_hour = (local_hour(NOW) + 12) % 24
    store, clock = make_store(delete_when=f"{other_hour:02d}")
    fill(store, clock)
    expect = expired_prefix(store, NOW)
    assert store.run_retention(NOW).deleted_segments == []
    disk.ratio = 0.80  # above diskMaxUsedSpaceRatio 75
    report = store.run_retention(NOW)
    assert report.triggers == ("space",) and report.deleted_segments == expect


def test_manual_trigger(make_store: Any) -> None:
    store, clock = make_store(delete_when="")
    fill(store, clock)
    expect = expired_prefix(store, NOW)
    assert store.run_retention(NOW).deleted_segments == []
    report = store.run_retention(NOW, manual=True)
    assert report.triggers == ("manual",) and report.deleted_segments == expect


def test_forced_mode_ignores_age_never_deletes_the_last(make_store: Any,
                                                        disk: FakeDisk) -> None:
    store, clock = make_store(delete_file_batch_max=3)
    fill(store, clock)
    n = len(store.commitlog.segments)
    disk.ratio = 0.87
    early = T0  # nothing is an hour old yet
    report = store.run_retention(early)
    assert report.forced and len(report.deleted_segments) == 3
    while len(store.commitlog.segments) > 1:
        before = len(store.commitlog.segments)
        store.run_retention(early)
        assert len(store.commitlog.segments) < before
    assert store.run_retention(early).deleted_segments == []
    assert len(store.commitlog.segments) == 1 and n > 3
    assert store.min_offset("T", 0) == store.max_offset("T", 0) - _records_in_last(store)


def test_forced_deletion_of_unconsumed_messages_is_a_warning_naming_the_ranges(
        make_store: Any, disk: FakeDisk, caplog: pytest.LogCaptureFixture) -> None:
    store, clock = make_store(delete_file_batch_max=2)
    fill(store, clock)
    # Queue 0 was consumed up to offset 5 by its slowest group; queue 1 by nobody.
    store.retention.consumed_offsets = lambda: {("T", 0): 5}
    disk.ratio = 0.87
    with caplog.at_level(logging.INFO, logger="tidemq.store.retention"):
        report = store.run_retention(T0)  # nothing is old: only forced mode deletes
    assert report.forced and len(report.deleted_segments) == 2
    new_min = store.min_offset("T", 0)
    assert new_min > 5
    assert sorted(report.lost, key=str) == [LostRange("T", 0, 5, new_min),
                                            LostRange("T", 1, 0, 3)]
    assert store.retention.unconsumed_deleted == new_min - 5 + 3
    [warning] = [r for r in caplog.records if "no consumer group had consumed" in r.message]
    assert warning.levelno == logging.WARNING
    assert f"T/0 offsets 5..{new_min - 1}" in warning.message
    assert "T/1 offsets 0..2" in warning.message
    assert f"deleted {new_min - 5 + 3} messages" in warning.message
    segment_lines = [r for r in caplog.records if "deleted commit-log segment" in r.message]
    assert len(segment_lines) == 2 and all(r.levelno == logging.WARNING for r in segment_lines)


def test_an_unforced_pass_loses_nothing_it_should_warn_about(
        make_store: Any, caplog: pytest.LogCaptureFixture) -> None:
    store, clock = make_store()
    fill(store, clock)
    store.retention.consumed_offsets = dict  # no group consumed anything
    with caplog.at_level(logging.INFO, logger="tidemq.store.retention"):
        report = store.run_retention(NOW, manual=True)  # expired data: policy, not loss
    assert report.deleted_segments and not report.forced and report.lost == []
    assert store.retention.unconsumed_deleted == 0
    assert not [r for r in caplog.records
                if r.name == "tidemq.store.retention" and r.levelno >= logging.WARNING]


def _records_in_last(store: MessageStore) -> int:
    seg = store.commitlog.segments[-1]
    return sum(1 for base, _ in _record_starts(store) if base == seg.base)


def _record_starts(store: MessageStore) -> list[tuple[int, int]]:
    out = []
    for seg in store.commitlog.segments:
        pos = 0
        while pos + 8 <= seg.wrote:
            rec = decode_record(seg.view, pos)
            if not isinstance(rec, Record):
                break
            out.append((seg.base, pos))
            pos += rec.total_size
    return out


def test_disk_full_rejects_writes_until_usage_drops(make_store: Any, disk: FakeDisk) -> None:
    store, clock = make_store(delete_when="")
    fill(store, clock, 5)
    disk.ratio = 0.95
    report = store.run_retention(T0)
    assert report.disk_full and store.status == "DISK_FULL"
    with pytest.raises(StoreReadOnly) as err:
        store.put("T", 0, MessageInput(b"y"))
    assert err.value.status == "DISK_FULL"
    with pytest.raises(StoreReadOnly):
        store.put_batch("T", 0, [MessageInput(b"y")] * 3)
    disk.ratio = 0.50
    assert not store.run_retention(T0).disk_full
    assert store.status == "RUNNING"
    assert store.put("T", 0, MessageInput(b"y")).queue_offset == 2  # refused puts took none


def test_remove_expired_queues_on_request(make_store: Any) -> None:
    store, clock = make_store()
    fill(store, clock)
    report = store.run_retention(NOW, remove_expired_queues=True)
    assert report.queues_removed == [("T", 1)]
    assert store.queues.get("T", 1) is None and store.queues.get("T", 0) is not None
    assert not store.layout.queue_dir("T", 1).exists()
    clock.now = NOW
    assert store.put("T", 1, MessageInput(b"again")).queue_offset == 0
    assert store.wait_dispatched()
    assert store.get("T", 1, 0).found


def test_housekeeper_runs_retention_and_disk_full(make_store: Any, disk: FakeDisk) -> None:
    store, clock = make_store(delete_when="", clean_resource_interval=20,
                              flush_interval_consume_queue=10)
    fill(store, clock, 3)
    disk.ratio = 0.95
    seen = disk.calls
    assert disk.wait_calls(seen + 2)  # a whole pass ran after the ratio changed
    with pytest.raises(StoreReadOnly):
        store.put("T", 0, MessageInput(b"y"))
    disk.ratio = 0.10
    seen = disk.calls
    assert disk.wait_calls(seen + 2)
    store.put("T", 0, MessageInput(b"y"))


def test_restart_corrects_min_offsets_on_first_pass(tmp_path: Path, disk: FakeDisk) -> None:
    clock = FakeClock(T0)
    cfg = small_config(tmp_path, file_reserved_time=1, delete_when=f"{local_hour(NOW):02d}")
    with MessageStore(cfg, clock=clock, disk_usage=disk) as store:
        fill(store, clock)
        store.run_retention(NOW)
        low = store.min_offset("T", 0)
        assert low > 0
    with MessageStore(cfg, clock=clock, disk_usage=disk) as store:
        # corrected at start, before any retention pass (docs/reference/store.md §6.4 step 9)
        assert store.min_offset("T", 0) == low
        assert store.get("T", 0, 0).status is GetStatus.OFFSET_TOO_SMALL
