"""The one walker over the commit log: valid records, damaged stretches, and the end.

Recovery, ``tidemq store verify`` and ``tidemq store dump`` all read the log through
:func:`walk`, so they agree on where the valid log ends and which bytes are damaged.

A record is **valid** when its length and magic are right, its field lengths add up to
TOTALSIZE, its body CRC matches (when CRCs are checked), its PHYSICALOFFSET equals its
position, and its properties are UTF-8. A BLANK marker that ends its segment continues
the walk at the next segment.

Where a record is not valid, the walker looks for the **next trustworthy record** after
it: a valid record that is not older (STORETIMESTAMP) than the last valid record before
the damage and does not repeat or go back on a queue offset already seen in this walk,
or a BLANK marker that ends its segment. It tries the position TOTALSIZE says first (a
damaged record whose header is intact), then searches the rest of the segment, then the
later segments, reading only where the files hold non-zero bytes.

* Found: the bytes up to it are a :class:`Damage` -- a **damaged middle record** -- and
  the walk continues there. Nothing after the damage is lost.
* Not found: the damage is the **torn tail** of the log. The walk ends with an
  :class:`End` at the damage; recovery zeroes everything from there on.

Eight zero bytes where a record should start are the normal end of data; they are a
damaged stretch only if a trustworthy record follows them (a page that never reached the
disk in the middle of the log).

:func:`replay` walks a stretch of the log that :func:`walk` has just validated again,
yielding the same steps without checking anything twice: recovery's re-dispatch after
its plan.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from tidemq.errors import CorruptRecord
from tidemq.formats.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    Blank,
    Record,
    decode_record,
)

__all__ = [
    "ZERO8",
    "Damage",
    "End",
    "LogScan",
    "Segment",
    "Step",
    "check_record",
    "first_store_timestamp",
    "last_nonzero_in_file",
    "replay",
    "scan",
    "walk",
]

ZERO8 = bytes(8)
_HEAD = struct.Struct(">ii")
_RECORD_MAGIC_PREFIX = struct.pack(">i", MAGIC_V1)[:3]  # V1 and V2 share these bytes
assert struct.pack(">i", MAGIC_V2)[:3] == _RECORD_MAGIC_PREFIX
_BLANK_MAGIC_BYTES = struct.pack(">i", BLANK_MAGIC)


class Segment(Protocol):
    """What the walker needs of a commit-log segment (writable or read-only)."""

    @property
    def base(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def path(self) -> Path: ...

    @property
    def view(self) -> memoryview: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Damage:
    """Bytes ``[offset, offset + length)`` hold no valid record; a trustworthy record (or
    the next segment) starts right after them."""

    offset: int
    length: int
    reason: str
    #: The damaged record's header when it still decodes (its queue, offset and size are
    #: known), else ``None``.
    record: Record | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclasses.dataclass(frozen=True, slots=True)
class End:
    """The valid log ends at ``offset``: ``reason`` is ``""`` at the end of the last
    segment, ``"end of data"`` before zeros, else what made the tail invalid."""

    offset: int
    reason: str


#: One step of :func:`walk`: ``(offset, record)`` for a valid record, a damaged stretch,
#: or the end.
Step = tuple[int, Record] | Damage | End


def check_record(view: memoryview, pos: int, offset: int, check_crc: bool
                 ) -> tuple[Record | Blank | None, Record | None, str]:
    """``(item, header, reason)`` for the bytes at ``pos`` of a segment at log ``offset``:
    ``item`` is the valid record or BLANK marker (``reason`` empty), else ``None`` with
    ``header`` the record as far as it decodes without its CRC and properties."""
    try:
        item = decode_record(view, pos, check_crc=check_crc, expected_physical_offset=offset)
    except CorruptRecord as exc:
        header = None
        if exc.reason == "body CRC mismatch":
            decoded = decode_record(view, pos, expected_physical_offset=offset)
            header = decoded if isinstance(decoded, Record) else None
        return None, header, exc.reason
    if isinstance(item, Record) and item.properties and not item.properties.isascii():
        try:
            item.properties.decode("utf-8")
        except UnicodeDecodeError:
            return None, item, "properties are not UTF-8"
    return item, None, ""


def first_store_timestamp(seg: Segment) -> int:
    """The store time of the record at the start of ``seg``; 0 when no valid record
    starts there (CRC unchecked: a segment is chosen by its first record's time, and a
    record whose header and offset check out dates it)."""
    view = seg.view
    if len(view) < MIN_RECORD_SIZE:
        return 0
    item, _, _ = check_record(view, 0, seg.base, False)
    return item.store_timestamp if isinstance(item, Record) else 0


@dataclasses.dataclass(slots=True)
class _Seen:
    """What the walk saw before a damage: the bar a record after it must clear."""

    store_timestamp: int = 0
    queue_offsets: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)

    def add(self, rec: Record) -> None:
        self.store_timestamp = max(self.store_timestamp, rec.store_timestamp)
        self.queue_offsets[(rec.topic, rec.queue_id)] = rec.queue_offset

    def continues(self, rec: Record) -> bool:
        last = self.queue_offsets.get((rec.topic, rec.queue_id))
        return rec.store_timestamp >= self.store_timestamp and (
            last is None or rec.queue_offset > last)


def walk(segments: Sequence[Segment], start: int, check_crc: bool = True) -> Iterator[Step]:
    """Records from ``start`` in log order, damaged stretches skipped; always ends with an
    :class:`End` (see the module doc for the rule)."""
    segs = [s for s in segments if s.size]
    i = next((k for k, s in enumerate(segs) if s.base <= start < s.base + s.size), -1)
    if i < 0:
        yield End(start if not segs or start < segs[-1].base + segs[-1].size
                  else segs[-1].base + segs[-1].size, "")
        return
    seen = _Seen()
    offset = start
    while True:
        seg = segs[i]
        pos = offset - seg.base
        if pos + 8 <= seg.size:
            view = seg.view
            item, header, reason = check_record(view, pos, offset, check_crc)
            if isinstance(item, Record):
                seen.add(item)
                yield offset, item
                offset += item.total_size
                continue
            segment_ends = isinstance(item, Blank) and pos + item.size == seg.size
        else:  # no room for another record: the segment ends here
            segment_ends = True
        if segment_ends:
            if i + 1 == len(segs):
                yield End(seg.base + seg.size, "")
                return
            i += 1
            offset = segs[i].base
            continue
        if isinstance(item, Blank):
            reason = f"blank marker of {item.size} bytes does not end the segment"
        zeros = view[pos : pos + 8] == ZERO8
        if zeros:
            reason = "end of data"
        found = _next_trustworthy(segs, i, pos, view, check_crc, seen)
        if found is None:
            yield End(offset, reason)
            return
        j, next_offset = found
        yield Damage(offset, next_offset - offset,
                     "zeroed bytes where a record should be" if zeros else reason, header)
        i, offset = j, next_offset


def _next_trustworthy(segs: Sequence[Segment], i: int, pos: int, view: memoryview,
                      check_crc: bool, seen: _Seen) -> tuple[int, int] | None:
    """Where the walk resumes after damage at ``pos`` of segment ``i``: ``(segment index,
    offset)`` of the next trustworthy record or segment-ending BLANK, or ``None``."""
    seg = segs[i]
    total, magic = _HEAD.unpack_from(view, pos)
    if magic in (MAGIC_V1, MAGIC_V2) and MIN_RECORD_SIZE <= total <= seg.size - pos:
        nxt = pos + total
        if nxt == seg.size or (nxt + 8 <= seg.size
                               and _trustworthy(seg, nxt, check_crc, seen)):
            return _resume(segs, i, nxt)
    for j in range(i, len(segs)):
        s = segs[j]
        first = pos + 1 if j == i else 0
        found = _search(s, first, check_crc, seen)
        if found is not None:
            return _resume(segs, j, found)
    return None


def _resume(segs: Sequence[Segment], i: int, pos: int) -> tuple[int, int] | None:
    seg = segs[i]
    if pos + 8 <= seg.size:
        return i, seg.base + pos
    if i + 1 < len(segs):
        return i + 1, segs[i + 1].base
    return None


def _trustworthy(seg: Segment, pos: int, check_crc: bool, seen: _Seen) -> bool:
    item, _, _ = check_record(seg.view, pos, seg.base + pos, check_crc)
    if isinstance(item, Blank):
        return pos + item.size == seg.size
    return item is not None and seen.continues(item)


def _search(seg: Segment, first: int, check_crc: bool, seen: _Seen) -> int | None:
    """The first position at or after ``first`` in ``seg`` where a trustworthy record or a
    segment-ending BLANK starts. Only the stretch up to the last non-zero byte is read,
    a window at a time, looking for the magic codes."""
    stop = last_nonzero_in_file(seg.path, first, seg.size)
    view = seg.view
    w = first
    while w < stop:
        hi = min(stop, w + _CHUNK)
        data = bytes(view[w : min(hi + 8, seg.size)])  # a magic at +4 of the last start
        starts: list[int] = []
        for needle in (_RECORD_MAGIC_PREFIX, _BLANK_MAGIC_BYTES):
            at = 0
            while (hit := data.find(needle, at)) >= 0:
                at = hit + 1
                p = w + hit - 4
                if p >= hi:
                    break
                if p >= first:
                    starts.append(p)
        for p in sorted(starts):
            if _trustworthy(seg, p, check_crc, seen):
                return p
        w = hi
    return None


def replay(segments: Sequence[Segment], start: int, end: int, damaged: Sequence[Damage],
           on_record: Callable[[Record, int], None],
           on_damage: Callable[[Damage], None]) -> None:
    """The steps :func:`walk` took from ``start`` to ``end`` -- its valid records and its
    ``damaged`` stretches -- taken again over the same, unchanged bytes: each record is
    decoded for its fields only (no CRC, position or UTF-8 check: the walk made them), and
    each damaged stretch is stepped over where the walk found it."""
    segs = [s for s in segments if s.size]
    todo = sorted((d for d in damaged if start <= d.offset < end), key=lambda d: d.offset)
    k = 0
    i = next((n for n, s in enumerate(segs) if s.base <= start < s.base + s.size), len(segs))
    offset = start
    while offset < end and i < len(segs):
        seg = segs[i]
        if k < len(todo) and todo[k].offset == offset:
            on_damage(todo[k])
            offset = todo[k].end
            k += 1
        else:
            pos = offset - seg.base
            item = decode_record(seg.view, pos) if pos + 8 <= seg.size else None
            if isinstance(item, Record):
                on_record(item, offset)
                offset += item.total_size
                continue
            offset = seg.base + seg.size  # a BLANK (or no room) ends the segment
        while i < len(segs) and offset >= segs[i].base + segs[i].size:
            i += 1
        if i < len(segs) and offset < segs[i].base:
            offset = segs[i].base


@dataclasses.dataclass(slots=True)
class LogScan:
    """What :func:`scan` found from ``start``."""

    start: int
    end: int = 0
    reason: str = ""
    records: int = 0
    damaged: list[Damage] = dataclasses.field(default_factory=list)
    max_store_timestamp: int = 0


def scan(segments: Sequence[Segment], start: int, check_crc: bool = True,
         on_record: Callable[[Record, int], None] | None = None,
         on_damage: Callable[[Damage], None] | None = None) -> LogScan:
    """Walk from ``start`` to the end, counting; the callbacks see each step."""
    out = LogScan(start)
    for step in walk(segments, start, check_crc):
        if type(step) is tuple:
            offset, rec = step
            out.records += 1
            out.max_store_timestamp = max(out.max_store_timestamp, rec.store_timestamp)
            if on_record is not None:
                on_record(rec, offset)
        elif isinstance(step, Damage):
            out.damaged.append(step)
            if on_damage is not None:
                on_damage(step)
        elif isinstance(step, End):
            out.end, out.reason = step.offset, step.reason
    return out


# ---------------------------------------------------------------------- file reading

_CHUNK = 1 << 20


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


def last_nonzero_in_file(path: Path, start: int, stop: int) -> int:
    """The position just past the last non-zero byte of ``[start, stop)`` of the file at
    ``path`` (``start`` if there is none).

    The file is read, not its mapping (which would fault every page of a 1 GiB segment
    in), and only where it may hold data: ``SEEK_DATA`` skips holes and the unwritten
    extents of a pre-allocated file. Data extents are read backwards in 1 MiB chunks, so
    the search stops at the last non-zero byte.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        for lo, hi in reversed(_data_extents(fd, start, stop)):
            pos = hi
            while pos > lo:
                first = max(lo, pos - _CHUNK)
                n = os.preadv(fd, [view[: pos - first]], first)
                if n < pos - first:  # the file is shorter than its segment size says
                    raise OSError(errno.EIO, f"short read at {first} of {path}")
                words = np.frombuffer(buf, dtype=np.uint64, count=n // 8)
                if words.any() or any(buf[n - n % 8 : n]):
                    nz = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8, count=n))
                    return first + int(nz[-1]) + 1
                pos = first
        return start
    finally:
        os.close(fd)
