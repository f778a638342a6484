"""A replica's commit log: a master's bytes written at their offsets, then dispatched.

A replica does not put messages; it receives runs of its master's commit log, in order,
and :meth:`ReplicaLog.append` writes each run at the same offsets
(:meth:`Appender.write_replicated <tidemq.store.appender.Appender.write_replicated>`)
and dispatches every record the run completes with recovery's translation of a stored
record into its dispatch (:func:`~tidemq.store.recovery.dispatch_batch_for`) and the
walker's record check (:func:`~tidemq.store.log_scan.check_record`), so consume queues,
batch consume queues, LMQ entries and the key index come out as the master's. Runs of
common records are read as columns instead (:mod:`tidemq.store.replica_runs`), with the
same outcome at a fraction of the cost; their records get the read path's checks too
(body CRC included) in one compiled call, since the replica's own reads trust what it
wrote. A run may
end inside a record: the record is dispatched when the run that completes it arrives.

A damaged record the master kept (recovery skips it and keeps it) is dispatched as
recovery does: with its queue entry when its header decodes. One whose header does not
decode stops the dispatch of later records (:attr:`ReplicaLog.error`) while the bytes
keep arriving; a restart of the replica recovers its log like any other.

The master's segments must end where this log's do (the same
``mappedFileSizeCommitLog``): a BLANK record that ends elsewhere, or a record that runs
past one of this log's segment ends, would hide or damage every record after it. A run
that may hold either (:meth:`ReplicaLog._may_end_a_segment`, a test of its ends) has its
record heads walked before it is acknowledged; where the two logs part, the log is cut
and every later run refused (:class:`SegmentSizeMismatch`).
"""

from __future__ import annotations

import logging
import mmap
import struct

import numpy as np

from tidemq.errors import StoreError
from tidemq.formats.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    OFF_SYSFLAG,
    SYSFLAG_COMPRESSED,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_INNER_BATCH,
    SYSFLAG_NEED_UNWRAP,
    Record,
)
from tidemq.store.appender import Appender
from tidemq.store.log_scan import Damage, check_record
from tidemq.store.recovery import damaged_batch, dispatch_batch_for
from tidemq.store.replica_runs import run_batches

__all__ = ["CopyRunning", "ReplicaGap", "ReplicaLog", "SegmentSizeMismatch"]

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">ii")
_I32 = struct.Struct(">i")
_FLAGS_END = OFF_SYSFLAG + 4
_BLANK = _I32.pack(BLANK_MAGIC)
_MAGICS = (MAGIC_V1, MAGIC_V2)
#: Records, at least, that :func:`_uniform_records` checks as columns (fewer are walked).
_COLUMN_WALK_MIN = 32
#: SYSFLAG bits that keep a record out of a column run (the last two: transactions).
_UNUSUAL = (SYSFLAG_HOSTS_V6 | SYSFLAG_COMPRESSED | SYSFLAG_INNER_BATCH | SYSFLAG_NEED_UNWRAP
            | 0xC)


def _common_run(mm: mmap.mmap, pos: int, limit: int) -> int:
    """The end of the whole records from ``pos`` (before ``limit`` and a BLANK marker)
    whose layout :func:`~tidemq.store.replica_runs.run_batches` may read, up to the
    first whose layout it may not (V2, IPv6 hosts, compressed, an inner batch, a
    transaction state): ``pos`` itself when that is the first record."""
    uniform = _uniform_records(mm, pos, limit)
    if uniform:  # records of one size, checked as columns
        count, size = uniform
        pos += count * size
    while pos + _FLAGS_END <= limit:
        total, magic = _HEAD.unpack_from(mm, pos)
        if (magic != MAGIC_V1 or total < MIN_RECORD_SIZE or pos + total > limit
                or _I32.unpack_from(mm, pos + OFF_SYSFLAG)[0] & _UNUSUAL):
            break
        pos += total
    return pos


def _uniform_records(mm: mmap.mmap, pos: int, limit: int) -> tuple[int, int] | None:
    """``(count, size)`` of the records from ``pos`` that :func:`_common_run` accepts and
    that are all as long as the first (a producer's batch), checked column-wise; ``None``
    when none is, or when the bytes hold too few records of that size for the columns to
    cost less than the walk."""
    if pos + _FLAGS_END > limit:
        return None
    size = _I32.unpack_from(mm, pos)[0]
    if size < MIN_RECORD_SIZE:
        return None
    n = (limit - pos) // size
    if n < _COLUMN_WALK_MIN:
        return None
    heads = np.ndarray((n, 2), ">i4", mm, pos, (size, 4))  # TOTALSIZE, MAGICCODE
    flags = np.ndarray((n,), ">i4", mm, pos + OFF_SYSFLAG, (size,))
    bad = (heads[:, 0] != size) | (heads[:, 1] != MAGIC_V1) | (flags & _UNUSUAL != 0)
    count = int(bad.argmax()) if bad.any() else n
    del heads, flags, bad  # no view of the map outlives the call
    return (count, size) if count else None


class ReplicaGap(StoreError):
    """A run of a master's log does not start where this log ends."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"replicated bytes start at {got}, but this log ends at {expected}")
        self.expected = expected
        self.got = got


class SegmentSizeMismatch(StoreError):
    """The master's commit-log segments do not end where this replica's do: its
    ``mappedFileSizeCommitLog`` differs from the master's. The master's bytes from
    ``offset`` on are not kept: a record there would cross one of this log's segment ends,
    or the master's segment ends inside one of them, and either would hide or damage
    the records after it."""

    def __init__(self, offset: int, master_end: int, replica_end: int,
                 segment_size: int) -> None:
        if master_end > replica_end:
            what = (f"the record at {offset} runs to {master_end}, past the end of this "
                    f"replica's segment at {replica_end}")
        else:
            what = (f"the master's segment ends at {master_end} (a BLANK record at "
                    f"{offset}), this replica's at {replica_end}")
        super().__init__(
            f"{what}: this replica's mappedFileSizeCommitLog ({segment_size}) differs from "
            f"its master's. The log is kept up to {offset}; to copy the rest, start the "
            f"replica with the master's value on an empty store directory (the segments "
            f"here are {segment_size} bytes)")
        self.offset = offset
        self.master_end = master_end
        self.replica_end = replica_end
        self.segment_size = segment_size


class CopyRunning(StoreError):
    """A replica's log was to be settled or cut while a copy from a master may still
    append to it: the caller stops the copy (and waits for it) first."""

    def __init__(self, action: str, copies: int) -> None:
        super().__init__(f"cannot {action} while {copies} copy from a master may append "
                         "to the log: stop the HA client first")
        self.action = action
        self.copies = copies


class ReplicaLog:
    """Appends a master's runs to one store's commit log and dispatches their records."""

    def __init__(self, appender: Appender, *, check_crc: bool = True) -> None:
        self.appender = appender
        self.commitlog = appender.commitlog
        self.check_crc = check_crc
        #: Records before this offset are dispatched; from it on they wait for bytes.
        self.parsed = self.commitlog.max_offset
        self.records = 0
        #: Of :attr:`records`, those dispatched as columns (:mod:`tidemq.store.replica_runs`).
        self.column_records = 0
        self.error: str | None = None
        #: Set once the master's segments and this log's parted: every later run is
        #: refused with it.
        self.mismatch: SegmentSizeMismatch | None = None
        #: A record start at or after :attr:`parsed` up to which the segment ends are
        #: checked (:meth:`_check_segment_ends`).
        self._walked = 0
        #: Whether a record that fans out to LMQs arrived while this store keeps none.
        self.lmq_warned = False

    @property
    def max_offset(self) -> int:
        """Where this log ends: the offset a replica reports to its master."""
        return self.commitlog.max_offset

    def append(self, offset: int, data: bytes | memoryview, *, dispatch: bool = True) -> int:
        """Write ``data`` (the master's bytes from ``offset``, which must be where this
        log ends) and, with ``dispatch``, dispatch the records it completes; returns the
        new end. Without it the records wait for :meth:`dispatch` (a replica reports
        what it holds before it spends time on dispatching)."""
        cl = self.commitlog
        with cl.lock:
            if (m := self.mismatch) is not None:
                raise SegmentSizeMismatch(m.offset, m.master_end, m.replica_end,
                                          m.segment_size)
            end = cl.max_offset
            if offset != end and (cl.segments or offset % cl.segment_size):
                raise ReplicaGap(end, offset)
            if not cl.segments:
                self.parsed = offset
            if data:
                self.appender.write_replicated(offset, data)
                self.appender.note_arrival(cl.max_offset)
                if self._may_end_a_segment(offset, data):
                    self._check_segment_ends(offset + len(data))
                if dispatch and self.error is None:
                    self._dispatch()
            return cl.max_offset

    def _may_end_a_segment(self, offset: int, data: bytes | memoryview) -> bool:
        """Whether the run reaches one of this log's segment ends, or may end one of the
        master's: with its BLANK record, whose padding is zeros (a BLANK too short for
        padding shows its magic in the last bytes). A master's frame never continues past
        its segment's end, so its BLANK ends a run; a record never ends in four zero bytes
        (it ends with its properties, or with its topic when it has none)."""
        size = self.commitlog.segment_size
        if offset // size != (offset + len(data)) // size:
            return True
        tail = bytes(data[-12:])
        return tail.endswith(b"\0\0\0\0") or _BLANK in tail

    def _check_segment_ends(self, end: int) -> None:
        """Walk the record heads up to ``end`` (from where the last walk stopped, or the
        last dispatched record); where the master's segments and this log's part (a
        record crossing this log's segment end, a BLANK that does not end at it), stop
        the copy there (:meth:`_part`). Damage stops the walk: the dispatch reports it."""
        cl = self.commitlog
        size = cl.segment_size
        pos = max(self.parsed, self._walked)
        while pos < end and self.error is None:
            seg_end = (pos // size + 1) * size
            seg = cl.segment_for(pos)
            if seg is None:
                break
            at = pos - seg.base
            if seg_end - pos < 8:  # no room for a BLANK: the master leaves zeros
                if any(seg.mm[at : at + min(seg_end, end) - pos]):
                    self._part(pos, end, seg_end)  # a record starts there
                pos = seg_end
                continue
            if end - pos < 8:
                break
            total, magic = _HEAD.unpack_from(seg.mm, at)
            if magic == BLANK_MAGIC:
                if pos + total != seg_end:
                    self._part(pos, pos + total, seg_end)
                pos = seg_end
            elif magic not in _MAGICS or total < MIN_RECORD_SIZE:
                break
            elif pos + total > seg_end:
                self._part(pos, pos + total, seg_end)
            else:
                pos += total
        self._walked = pos

    def _lmq_off(self, offset: int) -> None:
        """A replicated record fans out to LMQs, and this store keeps none: said once."""
        if not self.lmq_warned:
            self.lmq_warned = True
            log.error("the replicated record at %d fans out to light message queues "
                      "(INNER_MULTI_DISPATCH) but this replica has enableLmq or "
                      "enableMultiDispatch off: its LMQs stay empty, also once promoted, "
                      "until it restarts with both on (its recovery then builds them from "
                      "the log)", offset)

    def _part(self, offset: int, master_end: int, replica_end: int) -> None:
        """The master's log and this one part at ``offset``: cut the log there, dispatch
        the whole records before it, and refuse every later byte (the lock is held;
        nothing past ``offset`` has been reported to the master or dispatched)."""
        self.commitlog.truncate(offset)
        self._dispatch()
        err = SegmentSizeMismatch(offset, master_end, replica_end, self.commitlog.segment_size)
        self.error = str(err)
        self.mismatch = err
        log.error("%s", err)
        raise err

    def torn_tail(self) -> int | None:
        """Where the bytes of an unfinished record start, when the log ends with one and
        everything before it is dispatched; ``None`` otherwise (a log that ends with a
        whole record, or whose dispatch stopped at a damaged one: nothing is cut then)."""
        if self.error is not None or self.parsed >= self.commitlog.max_offset:
            return None
        return self.parsed

    def dispatch(self) -> None:
        """Dispatch every whole record written and not dispatched yet."""
        with self.commitlog.lock:
            if self.error is None:
                self._dispatch()

    def _dispatch(self) -> None:
        """Dispatch every whole record from :attr:`parsed` (the lock is held)."""
        cl = self.commitlog
        appender = self.appender
        offset = self.parsed
        check_crc = self.check_crc
        slow_until = offset  # records before it go one by one (their run is unusual)
        while True:
            seg = cl.segment_for(offset)
            if seg is None:
                break
            pos = offset - seg.base
            if offset >= slow_until:
                stop = _common_run(seg.mm, pos, seg.wrote)
                if stop > pos:
                    # read where the bytes are: the batches keep no view of them
                    run = run_batches(seg.view[pos:stop], offset, check_crc=check_crc)
                    if run is None:  # did not check out: one by one, as recovery
                        slow_until = offset + stop - pos
                    else:
                        for batch in run.batches:
                            appender.note_replicated(batch)
                            self.records += len(batch.phys)
                            self.column_records += len(batch.phys)
                        offset += run.taken
                        slow_until = offset + run.general
                        continue
            if pos + 8 > seg.size:  # too short for a BLANK: the segment ends here
                if not seg.full:
                    break
                offset = seg.end
                continue
            if seg.wrote - pos < 8:
                break
            total, magic = _HEAD.unpack_from(seg.mm, pos)
            if magic == BLANK_MAGIC:
                if not seg.full:
                    if pos + total != seg.size:  # the master's segment ends elsewhere
                        self.error = str(SegmentSizeMismatch(offset, offset + total, seg.end,
                                                             cl.segment_size))
                        log.error("%s", self.error)
                    break
                offset = seg.end
                continue
            if MIN_RECORD_SIZE <= total <= seg.size - pos and pos + total > seg.wrote:
                break  # the rest of this record is still to come
            item, header, reason = check_record(seg.view, pos, offset, check_crc)
            if isinstance(item, Record):
                one = dispatch_batch_for(item, offset)
                if one is not None:
                    lmq = one.lmq[0] if one.lmq else None
                    if lmq is not None and appender.queues.lmq is None:
                        self._lmq_off(offset)
                    if lmq is None:
                        appender.note_replicated(one)
                    else:
                        appender.note_replicated(one, lmq[0], lmq[1])
                self.records += 1
                offset += item.total_size
                continue
            damage = Damage(offset, total, reason, header)
            fallback = damaged_batch(damage) if header is not None else None
            if fallback is None:
                self.error = (f"replicated record at {offset} is damaged ({reason}) and "
                              "its header does not decode: dispatch stopped there")
                log.error("%s", self.error)
                break
            log.error("replicated record at %d is damaged (%s); its queue entry is kept "
                      "and readers skip it", offset, reason)
            appender.note_replicated(fallback)
            offset += total
        self.parsed = offset
