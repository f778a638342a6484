"""What recovery will do, decided before it does anything.

A start and ``tidemq store verify`` both call :func:`scan_start` and :func:`choose_scan`
on the same facts and hand the scan to :func:`plan`, so verify's preview is what a start
does: where the scan starts, where the valid log ends, which damaged records are skipped
(and kept: nothing after them is dropped), which segments are deleted, how many torn-tail
bytes are zeroed, and whether the consume queues are rebuilt from the start of the log.

Where the scan starts (docs/reference/store.md §6.4, with TideMQ's fixes of §10.9): at the
checkpoint's dispatched offset (:func:`dispatched_from`), or earlier where the derived
data is in doubt -- at the end of the newest consume-queue entry when the queues end
before it, at the LMQ store's dispatched offset when it lags, at the end of the last
valid entry of a queue whose later entries were lost (cut short on load), at the start
of the log when a queue was dropped whole.
A start that yields no record must be proven a record boundary (the end of a
consume-queue entry whose record checks out), or the scan restarts at the start of its
segment, which always is one: a garbage checkpoint never truncates good data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from tidemq.errors import CorruptRecord
from tidemq.formats.record import Record, decode_record
from tidemq.store.checkpoint import Checkpoint, Origin
from tidemq.store.log_scan import Damage, LogScan, Segment, first_store_timestamp, scan

__all__ = ["RecoveryPlan", "StartFacts", "choose_scan", "clean_stop_refusal",
           "dispatched_from", "ends_a_record", "plan", "rocketmq_crash_start", "scan_start",
           "valid_end"]


def dispatched_from(checkpoint: Checkpoint, queues_end: int, clean: bool,
                    segments: Sequence[Segment] = ()) -> int:
    """The dispatched position a start takes from ``checkpoint``: its own when TideMQ
    wrote it. When a RocketMQ broker wrote it, where RocketMQ's own start takes it: after
    a clean stop (``clean``: no abort marker, no requested cut), the end of the newest
    consume-queue entry -- such a stop leaves dispatch caught up and the queues flushed;
    after a crash, the start of the newest of the log's ``segments`` written wholly after
    the checkpoint's stamps (:func:`rocketmq_crash_start`). Otherwise 0, which scans the
    whole log."""
    if checkpoint.origin in (Origin.TIDEMQ, Origin.EARLIER_TIDEMQ):
        return checkpoint.dispatched_phy_offset
    if checkpoint.origin is Origin.ROCKETMQ:
        if clean:
            return queues_end
        return rocketmq_crash_start(segments, checkpoint.crash_scan_stamp)
    return 0


def rocketmq_crash_start(segments: Sequence[Segment], stamp: int) -> int:
    """Where RocketMQ's start after a crash scans from (its abnormal recovery): the base
    of the newest segment whose first record was stored at or before ``stamp``
    (:attr:`Checkpoint.crash_scan_stamp <tidemq.store.checkpoint.Checkpoint.crash_scan_stamp>`:
    every record stored by then was flushed, dispatched and indexed), so the records
    before that base need no scan; 0, the whole log, when ``stamp`` is unknown or no
    segment's first record is that old. Reads the first record of each segment it
    passes, newest first."""
    if stamp <= 0:
        return 0
    for seg in reversed(segments):
        first = first_store_timestamp(seg)
        if 0 < first <= stamp:
            return seg.base
    return 0


@dataclasses.dataclass(frozen=True, slots=True)
class StartFacts:
    """What the start of the scan depends on."""

    log_start: int  # the commit log's min offset
    log_end: int  # the end of its last segment
    checkpoint_dispatched: int
    queues_end: int  # the largest end (phys + size) of a consume-queue entry
    queues_in_doubt: bool  # some queue was dropped whole on load
    lmq_dispatched: int | None = None  # the LMQ store's dispatched offset, if enabled
    cut_at: int | None = None  # a requested cut of the log (tidemq.store.truncation)
    #: The least end of the last valid entry of a queue whose later entries were lost
    #: (tidemq.store.queue_extent: cut short), if any.
    queues_short: int | None = None


def scan_start(facts: StartFacts) -> int:
    """Where the recovery scan starts (see the module doc)."""
    lo, hi = facts.log_start, facts.log_end
    if facts.queues_in_doubt:
        return lo
    start = min(facts.checkpoint_dispatched, facts.queues_end)
    if facts.lmq_dispatched is not None:
        start = min(start, facts.lmq_dispatched)  # the LMQ store has no WAL: it may lag
    if facts.queues_short is not None:
        start = min(start, facts.queues_short)  # a queue lost entries the log still holds
    if facts.cut_at is not None:
        start = min(start, facts.cut_at)  # a record boundary: both logs agree up to it
    return start if lo <= start <= hi else lo


def choose_scan(segments: Sequence[Segment], facts: StartFacts,
                ends_a_record: Callable[[int], bool], check_crc: bool) -> LogScan:
    """The scan recovery validates with: from :func:`scan_start`, or from the start of
    its segment when that start yields no record and is not proven a boundary."""
    start = scan_start(facts)
    found = scan(segments, start, check_crc)
    if found.records == 0 and not found.damaged and start != facts.log_start and (
            not ends_a_record(start)):
        seg = next((s for s in segments if s.base <= start < s.base + s.size), None)
        base = seg.base if seg is not None else (segments[-1].base if segments else start)
        found = scan(segments, base, check_crc)
    return found


def ends_a_record(offset: int, last_entries: Iterable[tuple[int, int]],
                  read: Callable[[int, int], memoryview | None], check_crc: bool) -> bool:
    """Whether one of the queues' last entries ``(phys, size)`` ends at ``offset`` and its
    record checks out: then ``offset`` is a record boundary."""
    for phys, size in last_entries:
        if phys + size != offset:
            continue
        view = read(phys, size)
        if view is None:
            continue
        try:
            rec = decode_record(view, check_crc=check_crc, expected_physical_offset=phys)
        except CorruptRecord:
            continue
        if isinstance(rec, Record) and rec.total_size == size:
            return True
    return False


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryPlan:
    start: int  # where the scan (and the re-dispatch) starts
    end: int  # where the valid log ends: the commit log is truncated here
    reason: str  # why it ends there ("" or "end of data" are normal ends)
    records: int  # valid records the scan found from start (a cut tail's too)
    damaged: tuple[Damage, ...]  # skipped, reported, never truncated
    segments_deleted: tuple[int, ...]  # bases of segments wholly after the end
    tail_bytes: int  # non-zero bytes from the end on, zeroed
    max_store_timestamp: int
    #: Bytes of valid records a requested cut drops (0: the end is where they stop).
    cut_bytes: int = 0

    @property
    def redispatch(self) -> bool:
        return self.records > 0 or any(d.record is not None for d in self.damaged)


def valid_end(found: LogScan, cut_at: int | None) -> tuple[int, str]:
    """Where the valid log ends and why: where the scan ended, or earlier at a requested
    cut."""
    if cut_at is not None and cut_at < found.end:
        return cut_at, (f"cut at {cut_at} as requested (the tail diverged from the "
                        "master's log)")
    return found.end, found.reason


def plan(found: LogScan, segments: Sequence[tuple[int, int]],
         tails: Mapping[int, int], cut_at: int | None = None) -> RecoveryPlan:
    """The plan for a scan: ``segments`` are ``(base, end)`` of every segment, ``tails``
    the non-zero bytes after the valid end per segment base, ``cut_at`` a requested cut."""
    end, reason = valid_end(found, cut_at)
    return RecoveryPlan(
        start=found.start, end=end, reason=reason, records=found.records,
        damaged=tuple(d for d in found.damaged if d.offset < end),
        segments_deleted=_deleted(segments, end),
        tail_bytes=sum(tails.values()),
        max_store_timestamp=found.max_store_timestamp,
        cut_bytes=found.end - end,
    )


def _deleted(segments: Sequence[tuple[int, int]], end: int) -> tuple[int, ...]:
    """Bases of the segments a truncation at ``end`` deletes: every one after the segment
    that keeps ``end`` (the last starting before it; the first if none does)."""
    if not segments:
        return ()
    keep = [base for base, _ in segments if base < end] or [segments[0][0]]
    return tuple(base for base, _ in segments if base > keep[-1])


def clean_stop_refusal(end: int, written: int | None, segment_size: int) -> str:
    """Why a start refuses a log whose valid records end at ``end``: non-empty when the
    store was stopped cleanly with records up to ``written`` beyond it (the least of
    what its checkpoint and its queues say, each of which could be the damaged file;
    ``None`` after a crash or a requested cut). Such a log lost records to the disk, not
    a torn tail: truncating it would drop acknowledged messages."""
    if written is None or end >= written:
        return ""
    segment = f"{end - end % segment_size:020d}"
    return (f"the commit log's valid records end at offset {end}, in segment {segment}, "
            f"but the store was stopped cleanly with records up to {written} (its "
            "checkpoint and consume queues say so): the segment is damaged; restore it "
            "from a backup or a replica (nothing was truncated)")
