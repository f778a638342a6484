"""Startup recovery: find the end of the valid log, truncate, re-dispatch.

Steps (specs/store.md §6.4, with TideMQ's two fixes of §10.9):

1. Consume queues are loaded; each finds the end of its valid entries.
2. The scan starts at the checkpoint's dispatched offset (a record boundary that was
   fully dispatched and flushed), or earlier where the derived data is in doubt: at the
   end of the newest consume-queue entry when the queues end before it (a lost tail,
   deleted queue files), at the start of the log when a queue had to be dropped whole.
   A start that yields no record must be proven a record boundary -- the end of a
   consume-queue entry whose record checks out -- or the scan restarts at the start of
   its segment, which always is one (a garbage checkpoint never truncates good data).
3. Records are checked in order -- length, magic, lengths adding up, body CRC, and
   PHYSICALOFFSET equal to the record's position -- until the first failure: that is the
   end of the valid log. A BLANK marker continues at the next segment.
4. Consume queues are truncated to that end, the commit log's torn tail is zeroed and
   later segments are deleted, and the scanned records are re-dispatched (writers skip
   what they already hold). A queue that would get a gap is rebuilt by re-dispatching
   the whole log.

A torn tail never raises: it is reported in a :class:`RecoveryReport`.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
from collections.abc import Callable, Iterator

import numpy as np

from tidemq.errors import CorruptRecord, QueueGap
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import Blank, Record, decode_record
from tidemq.store.checkpoint import Checkpoint
from tidemq.store.commitlog import CommitLog
from tidemq.store.dispatch import DispatchBatch, IndexSink, apply_batches
from tidemq.store.queues import ConsumeQueueSet

__all__ = ["RecoveryReport", "dispatch_batch_for", "recover", "scan_log"]

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

    def __str__(self) -> str:
        kind = "clean" if self.clean else "crash"
        msg = (f"{kind} recovery: scanned {self.records_scanned} records from "
               f"{self.start_offset} to {self.end_offset}")
        if self.bytes_dropped:
            msg += f"; dropped {self.bytes_dropped} bytes of torn tail ({self.reason})"
        return msg


def dispatch_batch_for(rec: Record, offset: int) -> DispatchBatch | None:
    """The dispatch request of a recovered record (``None`` for prepared/rollback ones)."""
    tx = rec.sys_flag & TRANSACTION_MASK
    if tx in (PREPARED, ROLLBACK):
        return None
    props = decode_properties(rec.properties) if rec.properties else {}
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
    """Validate records from ``start``; returns (end offset, records, reason it stopped)."""
    count = 0
    for offset, item in _walk(commitlog, start, check_crc):
        if isinstance(item, str):
            return offset, count, item
        count += 1
        if on_record is not None:
            on_record(item, offset)
    return commitlog.max_offset, count, ""


def _walk(commitlog: CommitLog, start: int,
          check_crc: bool) -> Iterator[tuple[int, Record | str]]:
    offset = start
    size = commitlog.segment_size
    while True:
        seg = commitlog.segment_for(offset)
        if seg is None:
            return
        pos = offset - seg.base
        if pos + 8 > seg.size:
            offset = seg.end
            continue
        try:
            item = decode_record(seg.view, pos, check_crc=check_crc,
                                 expected_physical_offset=offset)
        except CorruptRecord as exc:
            if seg.view[pos : pos + 8] == b"\x00" * 8:
                yield offset, "end of data"
            else:
                yield offset, exc.reason
            return
        if isinstance(item, Blank):
            if pos + item.size != size:
                yield offset, f"blank marker of {item.size} bytes does not end the segment"
                return
            offset = seg.end
            continue
        yield offset, item
        offset += item.total_size


REDISPATCH_CHUNK = 4096


def recover(
    commitlog: CommitLog, queues: ConsumeQueueSet, index: IndexSink | None,
    checkpoint: Checkpoint, *, clean: bool, check_crc: bool = True,
) -> RecoveryReport:
    """Bring commit log and consume queues to one consistent end; see the module doc."""
    lo = commitlog.min_offset
    start = _start_offset(commitlog, queues, checkpoint)
    pending: list[DispatchBatch] = []

    def collect(rec: Record, offset: int) -> None:
        report.max_store_timestamp = max(report.max_store_timestamp, rec.store_timestamp)
        batch = dispatch_batch_for(rec, offset)
        if batch is not None:
            pending.append(batch)
            if len(pending) >= REDISPATCH_CHUNK:
                apply_batches(queues, index, pending)
                pending.clear()

    def redispatch(first: int) -> None:
        pending.clear()
        scan_log(commitlog, first, check_crc=False, on_record=collect)
        if pending:
            apply_batches(queues, index, pending)

    end, count, reason = scan_log(commitlog, start, check_crc=check_crc)
    if count == 0 and start != lo and not _ends_a_record(commitlog, queues, start, check_crc):
        # Nothing proves the start is a record boundary: scan its whole segment instead.
        seg = commitlog.segment_for(start) or commitlog.segments[-1]
        log.warning("recovery start %d is not a known record boundary (%s); scanning from %d",
                    start, reason or "end of log", seg.base)
        start = seg.base
        end, count, reason = scan_log(commitlog, start, check_crc=check_crc)
    report = RecoveryReport(clean=clean, start_offset=start, end_offset=end,
                            records_scanned=count, reason=reason)
    tails = _dirty_tails(commitlog, end)
    report.bytes_dropped = sum(tails.values()) if not clean or reason else 0
    # Queues first: drop entries that point at or beyond the end of the valid log.
    for cq in queues.all():
        before = cq.max_offset
        cq.truncate_phys(end)
        report.queue_entries_dropped += before - cq.max_offset
    report.segments_deleted = sum(1 for seg in commitlog.segments if seg.base > end)
    _truncate(commitlog, end, tails)
    if queues.lmq is not None:
        report.queue_entries_dropped += queues.lmq.truncate_phys(end)
    if count:
        try:
            redispatch(start)
        except QueueGap as exc:
            log.warning("%s; rebuilding the consume queues from the whole log", exc)
            redispatch(lo)
    return report


def _start_offset(commitlog: CommitLog, queues: ConsumeQueueSet, checkpoint: Checkpoint) -> int:
    """Where the scan starts: the checkpoint, unless the consume queues say otherwise."""
    lo, hi = commitlog.min_offset, commitlog.max_offset
    if any(cq.damaged for cq in queues.all()):
        return lo
    start = min(checkpoint.dispatched_phy_offset, queues.max_phys_end())
    if queues.lmq is not None:
        start = min(start, queues.lmq.dispatched)  # the LMQ store has no WAL: it may lag
    return start if lo <= start <= hi else lo


def _ends_a_record(commitlog: CommitLog, queues: ConsumeQueueSet, offset: int,
                   check_crc: bool) -> bool:
    """Whether a consume-queue entry ends at ``offset`` and its record checks out."""
    for cq in queues.all():
        if cq.max_phys_end != offset:
            continue
        last = cq.last_entry()
        if last is None:
            continue
        phys, size = int(last["phys"]), int(last["size"])
        view = commitlog.read(phys, size)
        if view is None:
            continue
        try:
            rec = decode_record(view, check_crc=check_crc, expected_physical_offset=phys)
        except CorruptRecord:
            continue
        if isinstance(rec, Record) and rec.total_size == size:
            return True
    return False


def _dirty_tails(commitlog: CommitLog, end: int) -> dict[int, int]:
    """The torn tail after ``end``: for each segment reaching past it, by segment base,
    how many bytes from ``end`` (or the segment's start) up to its last non-zero byte.

    Every byte after the end must read zero once recovery is done, or a later scan could
    resurrect a stale record behind new ones. Reading a whole 1 GiB segment through its
    mapping took seconds and faulted it all in, so the file is read instead, and only
    where it may hold data: ``SEEK_DATA`` skips holes and the unwritten extents of the
    pre-allocated file, which read as zeros by definition (on a file system without it,
    everything is data). Data extents are read in 1 MiB chunks and tested as 64-bit
    words; the search runs backwards, so it stops at the last non-zero byte.
    """
    tails: dict[int, int] = {}
    for seg in commitlog.segments:
        if seg.end <= end:
            continue
        start = max(end - seg.base, 0)
        fd = os.open(seg.path, os.O_RDONLY)
        try:
            last = _last_nonzero(fd, start, seg.size)
        finally:
            os.close(fd)
        tails[seg.base] = last - start
    return tails


_TAIL_CHUNK = 1 << 20


def _data_extents(fd: int, start: int, stop: int) -> list[tuple[int, int]]:
    """The ranges of ``[start, stop)`` that may hold non-zero bytes (the rest are holes)."""
    out: list[tuple[int, int]] = []
    pos = start
    while pos < stop:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
            hole = os.lseek(fd, data, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole up to the end of the file
                break
            out.append((pos, stop))  # no hole queries here: everything may be data
            break
        if data >= stop:
            break
        out.append((data, min(hole, stop)))
        pos = hole
    return out


def _last_nonzero(fd: int, start: int, stop: int) -> int:
    """The position just past the last non-zero byte of ``[start, stop)`` (``start`` if
    there is none)."""
    buf = bytearray(_TAIL_CHUNK)
    view = memoryview(buf)
    for lo, hi in reversed(_data_extents(fd, start, stop)):
        pos = hi
        while pos > lo:
            first = max(lo, pos - _TAIL_CHUNK)
            n = os.preadv(fd, [view[: pos - first]], first)
            if n < pos - first:  # the file is shorter than its segment size says
                raise OSError(errno.EIO, f"short read at {first} of a commit-log segment")
            words = np.frombuffer(buf, dtype=np.uint64, count=n // 8)
            if words.any() or any(buf[n - n % 8 : n]):
                nz = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8, count=n))
                return first + int(nz[-1]) + 1
            pos = first
    return start


def _truncate(commitlog: CommitLog, end: int, tails: dict[int, int]) -> None:
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
    stop = pos + tails.get(last.base, last.size - pos)
    for first in range(pos, stop, _TAIL_CHUNK):
        upto = min(first + _TAIL_CHUNK, stop)
        last.mm[first:upto] = bytes(upto - first)
    last.wrote = pos
    last.flushed = min(last.flushed, pos)
    last.sync()
