"""The tails cut off the commit log, kept: ``truncated/<epoch>-<fromOffset>.log``.

An old master that comes back as a replica cuts the tail its log holds beyond the new
master's (:mod:`tidemq.store.truncation`). Those records may be sends it acknowledged
(``ASYNC_MASTER``) or stored and answered FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE; before
the cut they are copied here, so an operator can read and resend them
(``tidemq store cuts``).

A kept file holds whole commit-log records, each exactly as the log held it, one after
the other:

======  ==============  ========================================================
offset  bytes           field
======  ==============  ========================================================
0       TOTALSIZE       the first cut record, unchanged (commit-log record format,
                        its PHYSICALOFFSET where the log held it)
...     TOTALSIZE       each next cut record, in log order
======  ==============  ========================================================

No header, no BLANK markers (a cut that spans segments keeps the records of each), no
damaged stretches (they are counted, not kept). ``<epoch>`` is the epoch the first cut
record was written in (0 without an epoch file), ``<fromOffset>`` where the cut starts.

The file is written as ``<name>.tmp``, fsynced, renamed and its directory fsynced before
the cut begins (:meth:`MessageStore.start <tidemq.store.message_store.MessageStore.start>`
and :meth:`~tidemq.store.message_store.MessageStore.cut_tail` do both in that order), so
a process killed at any moment leaves the whole log, or the kept file and the cut log.
A cut keeps at most ``keptCutMaxBytes`` bytes of records, the first ones; what it cannot
keep is named in a warning.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import re
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

from tidemq.errors import TideMQError
from tidemq.formats.record import MIN_RECORD_SIZE, Record, decode_record
from tidemq.store.checkpoint import fsync_dir
from tidemq.store.epoch_file import EpochEntry
from tidemq.store.log_scan import Damage, End, Segment, walk

__all__ = ["CutKept", "KeptCut", "KeptCutError", "epoch_at", "file_name", "keep", "kept_cuts",
           "kept_records", "read_kept", "report", "where"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d+)-(\d+)\.log$")
_TOTALSIZE = struct.Struct(">i")


class KeptCutError(TideMQError):
    """A kept file that does not hold whole records where it should."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path}: {reason} at byte {offset} of the file")
        self.path = path
        self.offset = offset
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class CutKept:
    """What :func:`keep` copied out of a tail about to be cut, and what it could not."""

    path: Path | None  # None when the tail held no whole record
    records: int
    bytes: int
    #: Records beyond ``keptCutMaxBytes``: count, bytes, and the offset of the first.
    over_records: int = 0
    over_bytes: int = 0
    over_from: int = -1
    #: Damaged stretches inside the tail (not records, not kept): count and bytes.
    damaged: int = 0
    damaged_bytes: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class KeptCut:
    """A kept file as ``tidemq store cuts`` lists it."""

    path: Path
    epoch: int
    from_offset: int
    size: int


def file_name(epoch: int, from_offset: int) -> str:
    return f"{epoch}-{from_offset}.log"


def epoch_at(entries: Sequence[EpochEntry], offset: int) -> int:
    """The epoch the record at ``offset`` was written in (0 before the first entry)."""
    epoch = 0
    for entry in entries:
        if entry.start_offset <= offset:
            epoch = entry.epoch
    return epoch


def keep(segments: Sequence[Segment], directory: Path, start: int, epoch: int,
         max_bytes: int, check_crc: bool = True) -> CutKept:
    """Copy the whole records from ``start`` to the end of the valid log into
    ``directory/<epoch>-<start>.log``, at most ``max_bytes`` of them, durably."""
    bases = [s.base for s in segments]
    path = directory / file_name(epoch, start)
    tmp = path.with_name(path.name + ".tmp")
    fd = -1
    kept = kept_bytes = over = over_bytes = damaged = damaged_bytes = 0
    over_from = -1
    try:
        for step in walk(segments, start, check_crc):
            if isinstance(step, End):
                break
            if isinstance(step, Damage):
                damaged += 1
                damaged_bytes += step.length
                continue
            offset, rec = step
            if over or kept_bytes + rec.total_size > max_bytes:
                if not over:
                    over_from = offset
                over += 1
                over_bytes += rec.total_size
                continue
            if fd < 0:
                directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            seg = segments[bisect.bisect_right(bases, offset) - 1]
            at = offset - seg.base
            view = seg.view[at : at + rec.total_size]
            while view:
                view = view[os.write(fd, view):]
            kept += 1
            kept_bytes += rec.total_size
        if fd >= 0:
            os.fsync(fd)
    finally:
        if fd >= 0:
            os.close(fd)
    if kept:
        os.replace(tmp, path)
        fsync_dir(directory)
    return CutKept(path if kept else None, kept, kept_bytes, over, over_bytes, over_from,
                   damaged, damaged_bytes)


def report(cut_at: int, kept: CutKept, max_bytes: int) -> None:
    """The WARNING that says where the cut records went, and what was not kept."""
    if kept.path is not None:
        log.warning("the commit log is cut at %d: its %d records there (%d bytes) are kept "
                    "in %s; list them with 'tidemq store cuts' and resend what the cluster "
                    "lacks with 'tidemq admin resendKeptCut -f %s'", cut_at, kept.records,
                    kept.bytes, kept.path, kept.path)
    if kept.over_records:
        log.warning("the cut at %d exceeds keptCutMaxBytes=%d: %d records (%d bytes) from "
                    "offset %d on were not kept and are gone with the cut", cut_at,
                    max_bytes, kept.over_records, kept.over_bytes, kept.over_from)
    if kept.damaged:
        log.warning("the cut at %d spans %d damaged stretches (%d bytes) that hold no "
                    "whole record: not kept", cut_at, kept.damaged, kept.damaged_bytes)


def where(directory: Path, name: str | None, records: int | None) -> str:
    """Where a cut's records went, for the start's recovery line."""
    if name is None:
        return "no whole record in it to keep"
    count = "its records" if records is None else f"{records} records"
    return f"{count} kept in {directory / name}"


def kept_cuts(directory: Path) -> list[KeptCut]:
    """The kept files in ``directory`` (``<store>/truncated``), oldest cut first."""
    if not directory.is_dir():
        return []
    out = []
    for path in directory.iterdir():
        m = _NAME.match(path.name)
        if m:
            out.append(KeptCut(path, int(m[1]), int(m[2]), path.stat().st_size))
    return sorted(out, key=lambda k: (k.epoch, k.from_offset))


def kept_records(path: Path) -> Iterator[tuple[int, bytes, Record]]:
    """The records of a kept file, in order, each with its byte offset in the file and
    its bytes; :class:`KeptCutError` where one is not whole. The file is read one record
    at a time: a cut of any size takes the memory of its largest record."""
    with path.open("rb") as f:
        left = os.fstat(f.fileno()).st_size
        pos = 0
        while left:
            head = f.read(_TOTALSIZE.size)
            if len(head) < _TOTALSIZE.size:
                raise KeptCutError(path, pos, f"{left} bytes left, too few for a record")
            (total,) = _TOTALSIZE.unpack(head)
            if not MIN_RECORD_SIZE <= total <= left:
                raise KeptCutError(path, pos, f"TOTALSIZE {total}, {left} bytes left")
            data = head + f.read(total - _TOTALSIZE.size)
            try:
                rec = decode_record(data, 0, check_crc=True)
            except TideMQError as exc:
                raise KeptCutError(path, pos, str(exc)) from exc
            if not isinstance(rec, Record):
                raise KeptCutError(path, pos, "a BLANK marker, not a record")
            yield pos, data, rec
            pos += total
            left -= total


def read_kept(path: Path) -> Iterator[Record]:
    """The records of a kept file, in order; :class:`KeptCutError` where one is not whole."""
    for _, _, rec in kept_records(path):
        yield rec
