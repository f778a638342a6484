"""A replica's commit log: a master's bytes written at their offsets, then dispatched.

A replica does not put messages; it receives runs of its master's commit log, in order,
and :meth:`ReplicaLog.append` writes each run at the same offsets
(:meth:`Appender.write_replicated <tidemq.store.appender.Appender.write_replicated>`)
and dispatches every record the run completes with recovery's translation of a stored
record into its dispatch (:func:`~tidemq.store.recovery.dispatch_batch_for`) and the
walker's record check (:func:`~tidemq.store.log_scan.check_record`), so consume queues,
batch consume queues, LMQ entries and the key index come out as the master's. A run may
end inside a record: the record is dispatched when the run that completes it arrives.

A damaged record the master kept (recovery skips it and keeps it) is dispatched as
recovery does: with its queue entry when its header decodes. One whose header does not
decode stops the dispatch of later records (:attr:`ReplicaLog.error`) while the bytes
keep arriving; a restart of the replica recovers its log like any other.
"""

from __future__ import annotations

import logging
import struct

from tidemq.errors import StoreError
from tidemq.formats.record import BLANK_MAGIC, MIN_RECORD_SIZE, Record
from tidemq.store.appender import Appender
from tidemq.store.log_scan import Damage, check_record
from tidemq.store.recovery import damaged_batch, dispatch_batch_for

__all__ = ["ReplicaGap", "ReplicaLog"]

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">ii")


class ReplicaGap(StoreError):
    """A run of a master's log does not start where this log ends."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"replicated bytes start at {got}, but this log ends at {expected}")
        self.expected = expected
        self.got = got


class ReplicaLog:
    """Appends a master's runs to one store's commit log and dispatches their records."""

    def __init__(self, appender: Appender, *, check_crc: bool = True) -> None:
        self.appender = appender
        self.commitlog = appender.commitlog
        self.check_crc = check_crc
        #: Records before this offset are dispatched; from it on they wait for bytes.
        self.parsed = self.commitlog.max_offset
        self.records = 0
        self.error: str | None = None

    @property
    def max_offset(self) -> int:
        """Where this log ends: the offset a replica reports to its master."""
        return self.commitlog.max_offset

    def append(self, offset: int, data: bytes | memoryview) -> int:
        """Write ``data`` (the master's bytes from ``offset``, which must be where this
        log ends), dispatch the records it completes; returns the new end."""
        cl = self.commitlog
        with cl.lock:
            end = cl.max_offset
            if offset != end and (cl.segments or offset % cl.segment_size):
                raise ReplicaGap(end, offset)
            if not cl.segments:
                self.parsed = offset
            if data:
                self.appender.write_replicated(offset, data)
                if self.error is None:
                    self._dispatch()
            return cl.max_offset

    def _dispatch(self) -> None:
        """Dispatch every whole record from :attr:`parsed` (the lock is held)."""
        cl = self.commitlog
        appender = self.appender
        offset = self.parsed
        check_crc = self.check_crc
        while True:
            seg = cl.segment_for(offset)
            if seg is None:
                break
            pos = offset - seg.base
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
                    break
                offset = seg.end
                continue
            if MIN_RECORD_SIZE <= total <= seg.size - pos and pos + total > seg.wrote:
                break  # the rest of this record is still to come
            item, header, reason = check_record(seg.view, pos, offset, check_crc)
            if isinstance(item, Record):
                batch = dispatch_batch_for(item, offset)
                if batch is not None:
                    lmq = batch.lmq[0] if batch.lmq else None
                    if lmq is None:
                        appender.note_replicated(batch)
                    else:
                        appender.note_replicated(batch, lmq[0], lmq[1])
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
