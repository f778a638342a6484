"""Startup recovery: find the end of the valid log, truncate, re-dispatch.

Steps (docs/reference/store.md §6.4, with TideMQ's fixes of §10.9):

1. Consume queues are loaded; each finds the end of its valid entries (one whose later
   entries were lost is *cut short*: the scan starts no later than its end).
2. :mod:`tidemq.store.recovery_plan` decides: where the scan starts, where the valid log
   ends (the walker of :mod:`tidemq.store.log_scan`: a damaged record with a trustworthy
   record after it is skipped and kept, never a reason to truncate; damage with nothing
   trustworthy after it is the torn tail), which segments go and how many bytes of torn
   tail are zeroed. ``tidemq store verify`` previews the same plan.
3. Consume queues are truncated to that end, the commit log's torn tail is zeroed and
   later segments are deleted, and the scanned records are re-dispatched (writers skip
   what they already hold). A damaged record whose header still decodes gets its queue
   entry (readers skip it); one whose header is gone leaves a hole entry in its queue,
   so the queue continues past it. A queue that would get a gap otherwise is rebuilt by
   re-dispatching the whole log.

A torn tail never raises and damage never stops a start: both are reported in a
:class:`RecoveryReport`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from tidemq.errors import CorruptRecord, QueueGap, StoreReadOnly
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import MIN_RECORD_SIZE, Record
from tidemq.store.batch_consume_queue import BatchConsumeQueue
from tidemq.store.checkpoint import Checkpoint
from tidemq.store.commitlog import CommitLog
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.dispatch import DispatchBatch, IndexSink, apply_batches
from tidemq.store.log_scan import Damage, last_nonzero_in_file, replay, scan
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.recovery_plan import (
    RecoveryPlan,
    StartFacts,
    choose_scan,
    clean_stop_refusal,
    dispatched_from,
    ends_a_record,
    plan,
    valid_end,
)

__all__ = ["RecoveryReport", "dispatch_batch_for", "plan_recovery", "recover", "scan_log",
           "start_facts"]

log = logging.getLogger(__name__)

TRANSACTION_MASK = 0xC
INNER_BATCH = 0x80
PREPARED = 0x4
ROLLBACK = 0xC


@dataclasses.dataclass(slots=True)
class RecoveryReport:
    clean: bool
    start_offset: int
    end_offset: int
    records_scanned: int = 0
    bytes_dropped: int = 0
    reason: str = ""
    segments_deleted: int = 0
    queue_entries_dropped: int = 0
    #: Largest STORETIMESTAMP among the scanned records (0 if none were scanned); the
    #: store never stamps a later record lower, even if the wall clock stepped back.
    max_store_timestamp: int = 0
    #: Damaged records skipped (and kept) in the scanned part of the log.
    damaged: list[Damage] = dataclasses.field(default_factory=list)
    #: Records whose QUEUEOFFSET does not follow their queue: their slot became a hole.
    misplaced: list[Damage] = dataclasses.field(default_factory=list)
    #: Where a requested cut ended the log (``None``: no cut, or none reached past it),
    #: and the bytes of valid records it dropped: a cut tail, not a torn one.
    cut_at: int | None = None
    cut_bytes: int = 0
    #: Where the cut's records went, as the store kept them (``tidemq.store.kept_cuts``).
    kept: str = ""

    def __str__(self) -> str:
        kind = "clean" if self.clean else "crash"
        msg = (f"{kind} recovery: the log ends at {self.end_offset}, "
               f"{self.records_scanned} records scanned from {self.start_offset}")
        if self.cut_at is not None:
            msg += (f"; cut the tail from {self.cut_at} as requested (it diverged from the "
                    f"master's log): {self.cut_bytes} bytes dropped, "
                    f"{self.kept or 'its records not kept'}")
        elif self.bytes_dropped:
            msg += f"; dropped {self.bytes_dropped} bytes of torn tail ({self.reason})"
        if self.damaged:
            msg += (f"; skipped {len(self.damaged)} damaged records (first at "
                    f"{self.damaged[0].offset}: {self.damaged[0].reason})")
        return msg


def dispatch_batch_for(rec: Record, offset: int) -> DispatchBatch | None:
    """The dispatch request of a recovered record (``None`` for prepared/rollback ones)."""
    tx = rec.sys_flag & TRANSACTION_MASK
    if tx in (PREPARED, ROLLBACK):
        return None
    try:
        props = decode_properties(rec.properties) if rec.properties else {}
    except CorruptRecord:
        props = {}  # a damaged record: its queue entry is kept, readers skip it
    keys: list[str] = []
    uniq = props.get("UNIQ_KEY")
    if uniq:
        keys.append(uniq)
    keys.extend(k for k in props.get("KEYS", "").split(" ") if k)
    queue_offset, batch_sizes = rec.queue_offset, None
    inner_num, inner_base = props.get("INNER_NUM"), props.get("INNER_BASE")
    if inner_num is not None and inner_base is not None and rec.sys_flag & INNER_BATCH:
        try:
            queue_offset, batch_sizes = int(inner_base), [int(inner_num)]
        except ValueError:
            log.warning("record at %d has unparsable INNER_BASE/INNER_NUM", offset)
    return DispatchBatch(
        topic=rec.topic, queue_id=rec.queue_id, queue_offset=queue_offset,
        phys=[offset], sizes=[rec.total_size], tags=[tags_code(props.get("TAGS"))],
        store_timestamp=rec.store_timestamp, end=offset + rec.total_size,
        keys=[tuple(keys)], batch_sizes=batch_sizes, lmq=[lmq_targets(props, offset)],
    )


def lmq_targets(props: dict[str, str], offset: int = -1) -> tuple[list[str], list[int]] | None:
    """The LMQs a stored record fans out to, with its offset in each (RIP-28)."""
    names = props.get("INNER_MULTI_DISPATCH")
    offsets = props.get("INNER_MULTI_QUEUE_OFFSET")
    if not names or offsets is None:
        return None
    name_list = names.split(",")
    try:
        offset_list = [int(x) for x in offsets.split(",")]
    except ValueError:
        log.warning("record at %d has unparsable INNER_MULTI_QUEUE_OFFSET", offset)
        return None
    if len(name_list) != len(offset_list):
        log.warning("record at %d: %d LMQ names but %d offsets", offset, len(name_list),
                    len(offset_list))
        return None
    return name_list, offset_list


def scan_log(
    commitlog: CommitLog, start: int, *, check_crc: bool = True,
    on_record: Callable[[Record, int], None] | None = None,
) -> tuple[int, int, str]:
    """Walk the log from ``start``; returns (end offset, valid records, reason it ended)."""
    found = scan(commitlog.segments, start, check_crc, on_record)
    return found.end, found.records, found.reason


def damaged_batch(damage: Damage) -> DispatchBatch | None:
    """The queue entry of a damaged record whose header decodes: offsets stay dense and
    readers skip the record. ``None`` without a header."""
    rec = damage.record
    if rec is None or rec.total_size != damage.length:
        return None
    return DispatchBatch(
        topic=rec.topic, queue_id=rec.queue_id, queue_offset=rec.queue_offset,
        phys=[damage.offset], sizes=[rec.total_size], tags=[0],
        store_timestamp=rec.store_timestamp, end=damage.end, keys=[()],
    )


REDISPATCH_CHUNK = 4096


def start_facts(commitlog: CommitLog, queues: ConsumeQueueSet, checkpoint: Checkpoint,
                cut_at: int | None = None, clean: bool = False) -> StartFacts:
    queues_end = queues.max_phys_end()
    return StartFacts(
        log_start=commitlog.min_offset, log_end=commitlog.max_offset,
        checkpoint_dispatched=dispatched_from(checkpoint, queues_end,
                                              clean and cut_at is None, commitlog.segments),
        queues_end=queues_end,
        queues_in_doubt=any(cq.damaged for cq in queues.all()),
        lmq_dispatched=queues.lmq.dispatched if queues.lmq is not None else None,
        cut_at=cut_at,
        queues_short=min((cq.max_phys_end for cq in queues.all() if cq.short), default=None),
    )


def plan_recovery(commitlog: CommitLog, queues: ConsumeQueueSet, checkpoint: Checkpoint,
                  check_crc: bool = True, cut_at: int | None = None, clean: bool = False,
                  ) -> tuple[RecoveryPlan, StartFacts]:
    """Decide what :func:`recover` does, touching nothing; ``cut_at`` is a requested cut
    of the log (:mod:`tidemq.store.truncation`), ``clean`` that the store was stopped
    cleanly."""
    facts = start_facts(commitlog, queues, checkpoint, cut_at, clean)
    found = choose_scan(commitlog.segments, facts,
                        lambda offset: _ends_a_record(commitlog, queues, offset, check_crc),
                        check_crc)
    segs = commitlog.segments
    end, _ = valid_end(found, cut_at)
    return plan(found, [(s.base, s.end) for s in segs], _dirty_tails(commitlog, end),
                cut_at), facts


def recover(
    commitlog: CommitLog, queues: ConsumeQueueSet, index: IndexSink | None,
    checkpoint: Checkpoint, *, clean: bool, check_crc: bool = True,
    cut_at: int | None = None, written: int | None = None,
) -> RecoveryReport:
    """Bring commit log and consume queues to one consistent end; see the module doc.
    ``cut_at`` ends the valid log there if it reaches further (a requested cut).
    ``written``: where the log ended when the store stopped cleanly; a valid log that
    ends before it is damage, not a torn tail, and :class:`StoreReadOnly` (LOAD_FAILED,
    naming the segment) stops the start before anything is truncated."""
    lo = commitlog.min_offset
    the_plan, _ = plan_recovery(commitlog, queues, checkpoint, check_crc, cut_at, clean)
    end = the_plan.end
    refusal = clean_stop_refusal(end, written, commitlog.segment_size)
    if refusal:
        raise StoreReadOnly("LOAD_FAILED", cause=refusal)
    report = RecoveryReport(clean=clean, start_offset=the_plan.start, end_offset=end,
                            records_scanned=the_plan.records, reason=the_plan.reason,
                            max_store_timestamp=the_plan.max_store_timestamp,
                            damaged=list(the_plan.damaged),
                            cut_at=end if the_plan.cut_bytes else None,
                            cut_bytes=the_plan.cut_bytes)
    for d in the_plan.damaged:
        log.error("damaged commit-log record at %d (%d bytes): %s; skipped, the log "
                  "continues at %d", d.offset, d.length, d.reason, d.end)
    report.bytes_dropped = the_plan.tail_bytes if not clean or the_plan.reason else 0
    # Queues first: drop entries that point at or beyond the end of the valid log.
    for cq in queues.all():
        before = cq.max_offset
        cq.truncate_phys(end)
        report.queue_entries_dropped += before - cq.max_offset
    report.segments_deleted = len(the_plan.segments_deleted)
    _truncate(commitlog, end, the_plan.tail_bytes)
    if queues.lmq is not None:
        report.queue_entries_dropped += queues.lmq.truncate_phys(end)
    if the_plan.redispatch:
        try:
            _replay(commitlog, queues, index, the_plan, report)
        except QueueGap as exc:
            log.warning("%s; rebuilding the consume queues from the whole log", exc)
            report.misplaced.clear()
            _redispatch(commitlog, queues, index, lo, check_crc, report)
    return report


def _replay(commitlog: CommitLog, queues: ConsumeQueueSet, index: IndexSink | None,
            the_plan: RecoveryPlan, report: RecoveryReport) -> None:
    """Dispatch what the plan's scan validated, without validating it again."""
    run = _Redispatch(queues, index, report)
    replay(commitlog.segments, the_plan.start, the_plan.end, the_plan.damaged, run.record,
           run.damage)
    run.flush()


def _redispatch(commitlog: CommitLog, queues: ConsumeQueueSet, index: IndexSink | None,
                first: int, check_crc: bool, report: RecoveryReport | None = None) -> None:
    """Dispatch every record (and damaged record with a header) from ``first``."""
    run = _Redispatch(queues, index, report)
    scan(commitlog.segments, first, check_crc, on_record=run.record, on_damage=run.damage)
    run.flush()


class _Redispatch:
    """The re-dispatch of recovery, in chunks, keeping every classic queue dense.

    A queue offset that no record holds any more -- its record lost its header, so its
    queue is unknown -- becomes a hole entry when the next record of the queue shows the
    gap, up to as many offsets as header-less damage could hide. A record whose
    QUEUEOFFSET does not follow its queue otherwise (a field the format has no checksum
    for) is damaged itself: its slot becomes a hole and it is reported, instead of a gap
    that stops the start or an offset that makes the queue jump.
    """

    def __init__(self, queues: ConsumeQueueSet, index: IndexSink | None,
                 report: RecoveryReport | None) -> None:
        self.queues = queues
        self.index = index
        self.report = report
        self.pending: list[DispatchBatch] = []
        self.following: dict[tuple[str, int], int] = {}  # per queue: its next offset
        self.hidden = 0  # offsets header-less damage may have hidden (any queue)
        self.damaged_in: set[tuple[str, int]] = set()  # queues of damaged records with headers
        self.present: set[tuple[str, int]] = set()  # queues with pending present records

    def flush(self) -> None:
        if self.pending:
            apply_batches(self.queues, self.index, self.pending)
            self.pending.clear()
        self.present.clear()

    def damage(self, damage: Damage) -> None:
        batch = damaged_batch(damage)
        if batch is None:
            self.hidden += max(1, damage.length // MIN_RECORD_SIZE)
            return
        self.damaged_in.add((batch.topic, batch.queue_id))
        self.add(batch, damage.record)

    def record(self, rec: Record, offset: int) -> None:
        batch = dispatch_batch_for(rec, offset)
        if batch is not None:
            self.add(batch, rec)

    def add(self, batch: DispatchBatch, rec: Record | None) -> None:
        deleted = self.queues.deleted.before
        if deleted and batch.topic in deleted and batch.phys[0] < deleted[batch.topic]:
            # a deleted topic's record: apply_batches leaves its queue alone (it stays
            # deleted) and writes its LMQ entries and keys
            self.pending.append(batch)
            if len(self.pending) >= REDISPATCH_CHUNK:
                self.flush()
            return
        key = (batch.topic, batch.queue_id)
        expected = self.following.get(key)
        if expected == batch.queue_offset and key not in self.present:
            # the common case, decided without the queue: the record follows its queue
            self.pending.append(batch)
            self.following[key] = expected + (
                sum(batch.batch_sizes) if batch.batch_sizes is not None else len(batch.phys))
            if len(self.pending) >= REDISPATCH_CHUNK:
                self.flush()
            return
        cq = self.queues.get(*key)
        if expected is None and cq is not None and cq.max_offset:
            if batch.phys[0] + batch.sizes[0] <= cq.max_phys_end:
                # already in its queue: the writer skips it (the index may not have it)
                self.pending.append(batch)
                self.present.add(key)
                return
            expected = cq.max_offset
        if key in self.present:
            # a chunk joins a queue's batches from the first one's offset: one read from
            # a present record's header (which may be damaged) must not place new ones
            self.flush()
        got = batch.queue_offset
        batch_queue = isinstance(cq, BatchConsumeQueue) or key[0] in self.queues.batch_topics
        if expected is not None and got != expected and not batch_queue:
            self.flush()
            queue = self.queues.get_or_create(*key)
            assert isinstance(queue, ConsumeQueue)
            if expected < got <= expected + self.hidden:
                log.error("consume queue %s/%d: offsets %d..%d have no record left in the "
                          "commit log (damaged); hole entries keep the queue going",
                          key[0], key[1], expected, got - 1)
                self.hidden -= got - expected
                queue.fill_holes(got)
            else:
                reason = (f"QUEUEOFFSET {got} does not follow {key[0]}/{key[1]} (next is "
                          f"{expected})")
                log.error("damaged commit-log record at %d: %s; skipped, its slot is a hole",
                          batch.phys[0], reason)
                if self.report is not None:
                    self.report.misplaced.append(
                        Damage(batch.phys[0], batch.sizes[0], reason, rec))
                queue.fill_holes(expected + 1)
                self.following[key] = expected + 1
                return
        elif expected is not None and got != expected:
            self.flush()  # a chunk joins a queue's batches as consecutive: gaps on their own
            if not self._batch_gap(key, batch, rec, expected):
                return
        self.pending.append(batch)
        self.following[key] = got + (
            sum(batch.batch_sizes) if batch.batch_sizes is not None else len(batch.phys))
        if len(self.pending) >= REDISPATCH_CHUNK:
            self.flush()

    def _batch_gap(self, key: tuple[str, int], batch: DispatchBatch, rec: Record | None,
                   expected: int) -> bool:
        """A batch consume queue's next record does not start at ``expected``: whether it
        is appended. After damage that hid this queue's offsets (a damaged record of the
        queue, whose message count is unreadable, or one that lost its header) a hole
        entry covers the gap and the record follows it. Otherwise the record's own queue
        offset is damaged (QUEUEOFFSET, or INNER_BASE, has no checksum): its offsets
        become a hole at ``expected`` and it is reported, as a consume queue does."""
        got = batch.queue_offset
        queue = self.queues.get_or_create(*key)
        if not isinstance(queue, BatchConsumeQueue):
            return True
        if got > expected and (self.hidden or key in self.damaged_in):
            log.error("batch consume queue %s/%d: offsets %d..%d have no readable record "
                      "left in the commit log (damaged); a hole entry keeps the queue going",
                      key[0], key[1], expected, got - 1)
            queue.fill_hole(got)
            return True
        count = sum(batch.batch_sizes) if batch.batch_sizes is not None else len(batch.phys)
        reason = f"queue offset {got} does not follow {key[0]}/{key[1]} (next is {expected})"
        log.error("damaged commit-log record at %d: %s; skipped, its offsets are a hole",
                  batch.phys[0], reason)
        if self.report is not None:
            self.report.misplaced.append(Damage(batch.phys[0], batch.sizes[0], reason, rec))
        queue.fill_hole(expected + count)
        self.following[key] = expected + count
        return False


def _ends_a_record(commitlog: CommitLog, queues: ConsumeQueueSet, offset: int,
                   check_crc: bool) -> bool:
    """Whether a consume-queue entry ends at ``offset`` and its record checks out."""
    lasts = []
    for cq in queues.all():
        if cq.max_phys_end == offset and (last := cq.last_entry()) is not None:
            lasts.append((int(last["phys"]), int(last["size"])))
    return ends_a_record(offset, lasts, commitlog.read, check_crc)


def _dirty_tails(commitlog: CommitLog, end: int) -> dict[int, int]:
    """The torn tail after ``end``: for each segment reaching past it, by segment base,
    how many bytes from ``end`` (or the segment's start) up to its last non-zero byte.

    Every byte after the end must read zero once recovery is done, or a later scan could
    resurrect a stale record behind new ones.
    """
    tails: dict[int, int] = {}
    for seg in commitlog.segments:
        if seg.end <= end:
            continue
        start = max(end - seg.base, 0)
        tails[seg.base] = last_nonzero_in_file(seg.path, start, seg.size) - start
    return tails


_TAIL_CHUNK = 1 << 20


def _truncate(commitlog: CommitLog, end: int, tail_bytes: int) -> None:
    """``commitlog.truncate(end)`` that zeroes only the torn tail :func:`_dirty_tails`
    found, instead of scanning the rest of the last segment through its mapping again.

    Later segments are deleted by truncating at the end of the segment that keeps
    ``end`` (which zeroes nothing); that segment's tail is then zeroed here and synced,
    and its write marks set to ``end``, as ``truncate`` would.
    """
    segments = commitlog.segments
    if not segments:
        return
    last = ([seg for seg in segments if seg.base < end] or segments[:1])[-1]
    commitlog.truncate(last.end)
    pos = end - last.base
    if pos >= last.size:
        return
    stop = last_nonzero_in_file(last.path, pos, last.size) if tail_bytes else pos
    for first in range(pos, stop, _TAIL_CHUNK):
        upto = min(first + _TAIL_CHUNK, stop)
        last.mm[first:upto] = bytes(upto - first)
    last.wrote = pos
    last.flushed = min(last.flushed, pos)
    last.sync()
