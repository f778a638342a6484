"""Retention: which commit-log segments to delete, and deleting them.

See docs/reference/store.md §6.5-6.6.

Decide synchronously, then do I/O. :func:`plan_retention` is a pure function of the
segments' ages, the time, the disk usage and the :class:`RetentionPolicy`; it returns a
:class:`RetentionPlan`. :class:`RetentionService` measures (through an injected disk-usage
function), asks for the plan and carries it out: it deletes the planned segments oldest
first, moves every consume queue's minimum offset past the deleted data, deletes index
files wholly below the new commit-log minimum and raises or clears the disk-full state
that makes the commit log refuse appends.

A forced pass deletes data younger than ``fileReservedTime``: what no consumer group had
consumed yet is lost. Such a pass logs at WARNING, naming the queue-offset ranges lost
(:class:`LostRange`: from the lowest offset any group committed on the queue, or from
the queue's old minimum if none did), and adds their messages to
:attr:`RetentionService.unconsumed_deleted` (the broker exports it). Committed offsets
live above the store: the owner injects ``consumed_offsets``.

Rules of the plan, as upstream:

* A pass deletes only if a trigger holds: **time** (the local hour is in ``deleteWhen``),
  **space** (usage above ``diskMaxUsedSpaceRatio``) or **manual** (an admin request).
* Usage above ``diskSpaceCleanForciblyRatio`` (clamped to 30-85 %) with
  ``cleanFileForciblyEnable`` sets **forced** mode: segments go regardless of age. Usage
  above ``diskSpaceWarningLevelRatio`` (clamped to 35-90 %) marks the disk full.
* Segments are considered oldest first; a segment goes when the store time of its last
  record is at least ``fileReservedTime`` hours old (or in forced mode). The scan stops at
  the first segment kept, so no hole is ever made, and after ``deleteFileBatchMax``
  deletions. The last segment is never deleted.

Ages come from the store timestamp of a segment's last record, not from the file's
mtime as upstream (docs/reference/store.md §10.21): a backup, copy or ``touch`` changes an mtime
and would keep data far too long (or, restored from an archive with old mtimes, delete it
at once), while the store timestamp is written inside the append lock and never goes
backwards along the log, so it is exactly "when the newest data of this segment
arrived". It is found in O(size of the last record): a closed segment ends with the
BLANK marker, and the record just before it is located by searching backwards for a
magic code whose TOTALSIZE reaches the marker and whose PHYSICALOFFSET matches.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tidemq.formats.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    OFF_MAGIC,
    OFF_PHYSICAL_OFFSET,
    OFF_SYSFLAG,
)
from tidemq.formats.record import store_timestamp_offset as _ts_offset
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import StoreConfig
from tidemq.store.index import KeyIndex
from tidemq.store.mapped_file import MappedFile
from tidemq.store.queues import ConsumeQueueSet

__all__ = [
    "ConsumedOffsets",
    "DiskUsage",
    "LostRange",
    "RetentionPlan",
    "RetentionPolicy",
    "RetentionReport",
    "RetentionService",
    "SegmentAge",
    "disk_usage_ratio",
    "last_record_timestamp",
    "local_hour",
    "plan_retention",
]

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
UNKNOWN = -1

#: ``disk_usage(path) -> used fraction 0.0..1.0`` of the partition holding ``path``.
DiskUsage = Callable[[Path], float]
#: ``consumed_offsets() -> {(topic, queue_id): offset}``: the lowest offset any consumer
#: group committed on each queue; queues no group committed on are absent.
ConsumedOffsets = Callable[[], Mapping[tuple[str, int], int]]
#: Lost ranges named in one warning; the rest are counted.
_LOST_SHOWN = 20


def disk_usage_ratio(path: Path) -> float:
    """Used fraction of the partition holding ``path``, as ``df`` reports it:
    ``used / (used + available)``. Blocks reserved for root, or otherwise unavailable on
    a shared volume, count neither way (``(total - free) / total`` can read far fuller
    than ``df`` shows)."""
    usage = shutil.disk_usage(path)
    size = usage.used + usage.free
    return usage.used / size if size else 0.0


def local_hour(now_ms: int) -> int:
    """The local wall-clock hour of ``now_ms``, as ``deleteWhen`` is read upstream."""
    return time.localtime(now_ms / 1000).tm_hour


# ---------------------------------------------------------------------- the decision


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """The retention settings, ratios as fractions, clamped as upstream clamps them."""

    file_reserved_ms: int = 72 * HOUR_MS
    delete_hours: frozenset[int] = frozenset({4})
    max_used_ratio: float = 0.75
    clean_forcibly_ratio: float = 0.85
    warning_ratio: float = 0.90
    clean_forcibly_enable: bool = True
    batch_max: int = 10

    @classmethod
    def from_config(cls, config: StoreConfig) -> RetentionPolicy:
        return cls(
            file_reserved_ms=config.file_reserved_time * HOUR_MS,
            delete_hours=config.delete_hours,
            max_used_ratio=config.disk_max_used_space_ratio / 100,
            clean_forcibly_ratio=min(max(config.disk_space_clean_forcibly_ratio, 30), 85) / 100,
            warning_ratio=min(max(config.disk_space_warning_level_ratio, 35), 90) / 100,
            clean_forcibly_enable=config.clean_file_forcibly_enable,
            batch_max=max(1, config.delete_file_batch_max),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentAge:
    """A segment's base offset and the store time of its last record (-1: unknown)."""

    base: int
    last_store_timestamp: int


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionPlan:
    delete: tuple[int, ...]  # base offsets, oldest first
    triggers: tuple[str, ...]  # "time", "space", "manual"
    forced: bool
    disk_full: bool
    usage: float


def plan_retention(segments: Sequence[SegmentAge], *, now_ms: int, hour: int, usage: float,
                   policy: RetentionPolicy, manual: bool = False) -> RetentionPlan:
    """Which of ``segments`` (oldest first, all of the log) to delete now; see the module doc.

    Pure: no I/O, no clock. A segment of unknown age is kept unless the pass is forced.
    """
    triggers: list[str] = []
    if hour in policy.delete_hours:
        triggers.append("time")
    if usage > policy.max_used_ratio:
        triggers.append("space")
    if manual:
        triggers.append("manual")
    forced = policy.clean_forcibly_enable and usage > policy.clean_forcibly_ratio
    disk_full = usage > policy.warning_ratio
    delete: list[int] = []
    if triggers or forced:
        for seg in segments[:-1]:
            if len(delete) >= policy.batch_max:
                break
            ts = seg.last_store_timestamp
            expired = ts != UNKNOWN and ts + policy.file_reserved_ms <= now_ms
            if not (expired or forced):
                break  # no holes: everything after a kept segment is newer
            delete.append(seg.base)
    return RetentionPlan(tuple(delete), tuple(triggers), forced, disk_full, usage)


# ---------------------------------------------------------------------- segment ages

_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BLANK_BYTES = _I32.pack(BLANK_MAGIC)
_MAGIC_PREFIX = _I32.pack(MAGIC_V1)[:3]  # V1 and V2 differ only in the last byte
assert _I32.pack(MAGIC_V2)[:3] == _MAGIC_PREFIX
_MAGIC_LAST = frozenset({_I32.pack(MAGIC_V1)[3], _I32.pack(MAGIC_V2)[3]})


def _last_record_by_marker(seg: MappedFile) -> int:
    """Start of the record before the BLANK marker of a closed segment, or -1."""
    mm = seg.mm
    marker = mm.rfind(_BLANK_BYTES) - 4
    if marker < 0 or _I32.unpack_from(mm, marker)[0] != seg.size - marker:
        return -1
    end = marker + 1  # exclusive bound for rfind: a magic must start before the marker
    while True:
        m = mm.rfind(_MAGIC_PREFIX, 0, end)
        if m < OFF_MAGIC:
            return -1
        start = m - OFF_MAGIC
        if (mm[m + 3] in _MAGIC_LAST
                and _I32.unpack_from(mm, start)[0] == marker - start
                and _I64.unpack_from(mm, start + OFF_PHYSICAL_OFFSET)[0] == seg.base + start):
            return start
        end = m + 2


def _last_record_by_walk(seg: MappedFile) -> int:
    """Start of the last well-formed record, walking TOTALSIZE from the segment start."""
    view, pos, last, limit = seg.view, 0, -1, seg.wrote
    while pos + 8 <= limit:
        total, magic = _HEAD.unpack_from(view, pos)
        if magic not in (MAGIC_V1, MAGIC_V2) or total < MIN_RECORD_SIZE or pos + total > limit:
            break
        last = pos
        pos += total
    return last


def last_record_timestamp(seg: MappedFile) -> int:
    """Store time of the last record of ``seg`` (-1 when it holds none)."""
    start = _last_record_by_marker(seg) if seg.wrote >= seg.size else -1
    if start < 0:
        start = _last_record_by_walk(seg)
    if start < 0:
        return UNKNOWN
    (sys_flag,) = _I32.unpack_from(seg.mm, start + OFF_SYSFLAG)
    (ts,) = _I64.unpack_from(seg.mm, start + _ts_offset(sys_flag))
    return int(ts)


# ---------------------------------------------------------------------- carrying it out


@dataclasses.dataclass(frozen=True, slots=True)
class LostRange:
    """Queue offsets ``start`` .. ``end - 1`` of ``topic``/``queue_id``, deleted by a
    forced pass before any consumer group consumed them."""

    topic: str
    queue_id: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id} offsets {self.start}..{self.end - 1}"


@dataclasses.dataclass(slots=True)
class RetentionReport:
    now_ms: int
    usage: float
    triggers: tuple[str, ...] = ()
    forced: bool = False
    disk_full: bool = False
    deleted_segments: list[int] = dataclasses.field(default_factory=list)
    min_offset_before: int = 0
    min_offset_after: int = 0
    queues_corrected: int = 0
    queues_removed: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    index_files_deleted: int = 0
    lmq_entries_expired: int = 0
    #: ``(topic, queue_id, old min offset, new min offset)`` of the queues corrected.
    queue_ranges_deleted: list[tuple[str, int, int, int]] = dataclasses.field(
        default_factory=list)
    #: Of those, what no group had consumed (forced passes only).
    lost: list[LostRange] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        what = ", ".join(self.triggers) + (" (forced)" if self.forced else "")
        return (f"retention ({what or 'no trigger'}, disk {self.usage:.0%}): deleted "
                f"{len(self.deleted_segments)} segments, commit log now starts at "
                f"{self.min_offset_after}, {self.queues_corrected} queues corrected, "
                f"{len(self.queues_removed)} removed, {self.index_files_deleted} index "
                f"files deleted{'; DISK FULL' if self.disk_full else ''}")


class RetentionService:
    """Runs retention passes over one store's commit log, queues and index."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueSet, index: KeyIndex | None,
                 policy: RetentionPolicy, *, disk_usage: DiskUsage = disk_usage_ratio,
                 hour_of: Callable[[int], int] = local_hour) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.policy = policy
        self.disk_usage = disk_usage
        self.hour_of = hour_of
        self._ages: dict[int, int] = {}  # base -> last store time; closed segments never change
        self._corrected_min = -1
        self._lock = threading.Lock()
        self.disk_full = False
        self.consumed_offsets: ConsumedOffsets | None = None
        #: Messages forced passes deleted before any group consumed them, since start.
        self.unconsumed_deleted = 0

    def segment_ages(self) -> list[SegmentAge]:
        """Ages of the segments a pass may delete (at most ``batch_max``); the rest -1."""
        segs = list(self.commitlog.segments)
        out: list[SegmentAge] = []
        for i, seg in enumerate(segs):
            ts = UNKNOWN
            if i < min(self.policy.batch_max, len(segs) - 1):
                ts = self._ages.get(seg.base, UNKNOWN)
                if ts == UNKNOWN:
                    ts = self._ages[seg.base] = last_record_timestamp(seg)
            out.append(SegmentAge(seg.base, ts))
        live = {s.base for s in segs}
        for base in [b for b in self._ages if b not in live]:
            del self._ages[base]
        return out

    def measure(self) -> float:
        return self.disk_usage(self.commitlog.layout.commitlog_dir)

    def run(self, now_ms: int, *, manual: bool = False) -> RetentionReport:
        """One pass: plan, delete, correct queue minimums and the index, update disk-full."""
        with self._lock:
            return self._run(now_ms, manual)

    def _run(self, now_ms: int, manual: bool) -> RetentionReport:
        usage = self.measure()
        plan = plan_retention(self.segment_ages(), now_ms=now_ms, hour=self.hour_of(now_ms),
                              usage=usage, policy=self.policy, manual=manual)
        cl = self.commitlog
        report = RetentionReport(now_ms, usage, plan.triggers, plan.forced,
                                 min_offset_before=cl.min_offset)
        for base in plan.delete:
            with cl.lock:
                if len(cl.segments) <= 1 or cl.segments[0].base != base:
                    break
                cl.delete_first()
            log.log(logging.WARNING if plan.forced else logging.INFO,
                    "retention%s deleted commit-log segment %020d",
                    " (forced)" if plan.forced else "", base)
            report.deleted_segments.append(base)
        report.min_offset_after = cl.min_offset
        self._correct_if_moved(report)
        if plan.forced and report.queue_ranges_deleted:
            self._report_lost(report)
        self._expire_lmq(report)
        if report.deleted_segments:
            usage = report.usage = self.measure()
        self._set_disk_full(usage > self.policy.warning_ratio, usage)
        report.disk_full = self.disk_full
        return report

    def correct_min_offsets(self) -> RetentionReport:
        """Move queue minimums and the index past the commit-log minimum (after a restart:
        docs/reference/store.md §6.4 step 9). Each pass does this when the minimum moved."""
        with self._lock:
            cl_min = self.commitlog.min_offset
            report = RetentionReport(0, 0.0, min_offset_before=cl_min, min_offset_after=cl_min)
            if cl_min > 0:  # otherwise nothing can lie below it
                self._correct(cl_min, report)
            self._corrected_min = cl_min
            return report

    def _correct_if_moved(self, report: RetentionReport) -> None:
        cl_min = self.commitlog.min_offset
        if cl_min > self._corrected_min:
            self._correct(cl_min, report)
            self._corrected_min = cl_min

    def _correct(self, cl_min: int, report: RetentionReport) -> None:
        for cq in self.queues.all():
            before = cq.min_offset
            cq.correct_min_offset(cl_min)
            if cq.min_offset != before:
                report.queues_corrected += 1
                report.queue_ranges_deleted.append(
                    (cq.topic, cq.queue_id, before, cq.min_offset))
        if self.index is not None:
            report.index_files_deleted = self.index.delete_below(cl_min)

    def _report_lost(self, report: RetentionReport) -> None:
        """Name, count and warn about what a forced pass deleted unconsumed."""
        consumed: Mapping[tuple[str, int], int] = {}
        if self.consumed_offsets is not None:
            try:
                consumed = self.consumed_offsets()
            except Exception:
                log.exception("reading the committed offsets failed; counting every "
                              "deleted message as unconsumed")
        for topic, queue_id, start, end in report.queue_ranges_deleted:
            committed = consumed.get((topic, queue_id))
            first = start if committed is None else max(start, committed)
            if first < end:
                report.lost.append(LostRange(topic, queue_id, first, end))
        if not report.lost:
            return
        count = sum(r.count for r in report.lost)
        self.unconsumed_deleted += count
        shown = ", ".join(str(r) for r in report.lost[:_LOST_SHOWN])
        more = len(report.lost) - _LOST_SHOWN
        log.warning("forced retention (disk %.0f%% used, above diskSpaceCleanForciblyRatio "
                    "%.0f%%) deleted %d messages no consumer group had consumed: %s%s",
                    report.usage * 100, self.policy.clean_forcibly_ratio * 100, count, shown,
                    f" and {more} more queues" if more > 0 else "")

    def _expire_lmq(self, report: RetentionReport) -> None:
        """One budgeted step of the LMQ store's sweep (it resumes on the next pass)."""
        lmq = self.queues.lmq
        cl_min = self.commitlog.min_offset
        if lmq is not None and lmq.expiry_due(cl_min):
            report.lmq_entries_expired += lmq.expire_below(cl_min)

    def remove_expired_queues(self) -> list[tuple[str, int]]:
        """Destroy queues whose every record lies below the commit-log minimum.

        Upstream does this only on the admin command ``cleanExpiredCQ``, and so should the
        caller: a removed queue forgets its max offset on restart and would hand out queue
        offsets again from 0. The caller must also keep the dispatcher off these queues
        (:meth:`MessageStore.run_retention` holds the append lock and drains it first).
        """
        removed: list[tuple[str, int]] = []
        with self._lock:
            cl_min = self.commitlog.min_offset
            for cq in self.queues.all():
                if cl_min > 0 and cq.max_phys_end <= cl_min:
                    self.queues.remove(cq.topic, cq.queue_id)
                    removed.append((cq.topic, cq.queue_id))
        for topic, queue_id in removed:
            log.info("removed expired consume queue %s/%d", topic, queue_id)
        return removed

    def _set_disk_full(self, full: bool, usage: float) -> None:
        if full and not self.disk_full:
            log.error("disk usage %.1f%% is above diskSpaceWarningLevelRatio %.0f%%: the store "
                      "refuses writes until retention frees space", usage * 100,
                      self.policy.warning_ratio * 100)
        elif not full and self.disk_full:
            log.warning("disk usage back to %.1f%%: the store accepts writes again",
                        usage * 100)
        self.disk_full = full
        self.commitlog.disk_full = (
            f"disk usage {usage:.1%} above diskSpaceWarningLevelRatio "
            f"{self.policy.warning_ratio:.0%}" if full else None)
