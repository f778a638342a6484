"""Damaged commit-log records the read path must not serve.

A record is trusted without a second look when this process wrote it, or when the
startup recovery scan validated it (every record from the scan's start on). The records
before that start were checked when they were written, but their bytes may have rotted
on disk since: the read path checks them before serving them
(:func:`~tidemq.store.log_scan.check_record`: length, magic, PHYSICALOFFSET, body CRC,
UTF-8 properties) -- all the records of a read in one compiled call
(:func:`sound_records`), record by record only where that call cannot vouch for one.
Damaged records -- found by the recovery scan or by a read -- are skipped: the
consumer's next offset moves past them, so the queue goes on, every skip is counted
(:attr:`DamagedRecords.skipped`, exported by the broker) and reported in the log at most
once per :data:`REPORT_EVERY` seconds.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable

import numpy as np

from tidemq.formats.record import Record
from tidemq.formats.record.loops import Ints, check_records
from tidemq.store.log_scan import check_record

__all__ = ["REPORT_EVERY", "DamagedRecords", "sound_records"]

log = logging.getLogger(__name__)

#: Seconds between two reports of skipped records in the log.
REPORT_EVERY = 10.0
#: Damaged offsets remembered at most (the count of skips goes on past it).
MAX_KNOWN = 1 << 16


class DamagedRecords:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: Records below this offset were not validated since the store started.
        self.unchecked_below = 0
        self._known: list[int] = []  # sorted physical offsets of damaged records
        self._reasons: dict[int, str] = {}
        #: Per classic queue: queue offsets ``[lo, hi)`` whose records a read checked.
        self._checked: dict[tuple[str, int], tuple[int, int]] = {}
        #: Damaged records a read skipped (each time it skipped one).
        self.skipped = 0
        self._clock = clock
        self._reported_at: float | None = None
        self._unreported = 0
        self._lock = threading.Lock()

    def reset(self, unchecked_below: int, known: Iterable[tuple[int, str]]) -> None:
        """After recovery: its scan validated everything from ``unchecked_below`` on and
        found ``known`` (offset, reason) damaged."""
        self.unchecked_below = unchecked_below
        for offset, reason in known:
            self._remember(offset, reason)

    def _remember(self, offset: int, reason: str) -> None:
        with self._lock:
            if offset in self._reasons or len(self._known) >= MAX_KNOWN:
                return
            bisect.insort(self._known, offset)
            self._reasons[offset] = reason

    @property
    def known(self) -> list[int]:
        return list(self._known)

    def checked_upto(self, queue: tuple[str, int], offset: int) -> int:
        """The queue offset up to which a read from ``offset`` of ``queue`` finds records
        that an earlier read checked already (``offset`` or less: none)."""
        lo, hi = self._checked.get(queue, (0, 0))
        return hi if lo <= offset < hi else offset

    def mark_checked(self, queue: tuple[str, int], offset: int, end: int) -> None:
        """A read checked the records of queue offsets ``[offset, end)`` of ``queue``;
        one run of checked offsets is remembered per queue (readers move forward)."""
        lo, hi = self._checked.get(queue, (0, 0))
        self._checked[queue] = (lo, max(hi, end)) if lo <= offset <= hi else (offset, end)

    def needs_check(self, begin: int, end: int, checked: bool = False) -> bool:
        """Whether records in ``[begin, end)`` may be damaged (the cheap test first);
        ``checked``: an earlier read checked them, only known damage counts."""
        if begin < self.unchecked_below and not checked:
            return True
        known = self._known
        if not known:
            return False
        k = bisect.bisect_left(known, begin)
        return k < len(known) and known[k] < end

    def damaged(self, view: memoryview | None, phys: int, size: int) -> bool:
        """Whether the record at ``phys`` (``view`` holds its ``size`` bytes, ``None``
        when they cannot be read) must be skipped; a damaged one is counted and
        reported."""
        reason = self._reasons.get(phys)
        if reason is None and phys < self.unchecked_below:
            if view is None or len(view) != size:
                reason = "record lies outside the commit log"
            else:
                item, _, why = check_record(view, 0, phys, True)
                if not isinstance(item, Record) or item.total_size != size:
                    reason = why or f"queue entry size {size} differs from the record's"
            if reason is not None:
                self._remember(phys, reason)
        if reason is None:
            return False
        self._skip(phys, reason)
        return True

    def keep(self, read: Callable[[int, int], memoryview | None], phys: Ints,
             sizes: Ints) -> list[bool] | None:
        """Which of the records ``(phys, size)`` a read may serve (``None``: all); damaged
        ones are counted and reported."""
        if (not self._known and len(phys) and phys[-1] < self.unchecked_below
                and sound_records(read, phys, sizes)):
            return None
        at = phys.tolist() if isinstance(phys, np.ndarray) else phys
        size = sizes.tolist() if isinstance(sizes, np.ndarray) else sizes
        views = [read(p, n) for p, n in zip(at, size, strict=True)]
        out = [not self.damaged(v, p, n) for v, p, n in zip(views, at, size, strict=True)]
        return None if all(out) else out

    def _skip(self, phys: int, reason: str) -> None:
        with self._lock:
            self.skipped += 1
            self._unreported += 1
            now = self._clock()
            if self._reported_at is not None and now - self._reported_at < REPORT_EVERY:
                return
            self._reported_at = now
            count, self._unreported = self._unreported, 0
        log.error("skipped %d damaged commit-log record(s) a read asked for (last at %d: "
                  "%s); run 'tidemq store verify' on a stopped broker", count, phys, reason)


def sound_records(read: Callable[[int, int], memoryview | None], phys: Ints,
                  sizes: Ints) -> bool:
    """Whether every record ``(phys[i], sizes[i])`` can be read and passes
    :func:`check_record` with its size. The stretch of the log holding them is read as
    one view and the compiled loop of :func:`~tidemq.formats.record.loops.check_records`
    checks them all in one call (int64 arrays reach it without an object per record);
    only a record it cannot vouch for (properties beyond ASCII, or damage) gets the full
    check. ``False`` means "look record by record"."""
    n = len(phys)
    if not n:
        return True
    base = int(phys[0])  # physical offsets grow along a queue; a record out of order fails
    length = int(phys[-1] + sizes[-1]) - base
    span = read(base, length) if length > 0 else None
    if span is None:  # the records lie in more than one segment
        return all(sound_records(read, (int(p),), (int(s),))
                   for p, s in zip(phys, sizes, strict=True)) if n > 1 else False
    starts: Ints = phys - base if isinstance(phys, np.ndarray) else [p - base for p in phys]
    i = 0
    while i < n:
        i += check_records(span, base, starts[i:], sizes[i:])
        if i == n:
            break
        at, size = int(starts[i]), int(sizes[i])
        item, _, _ = check_record(span[at : at + size], 0, base + at, True)
        if not isinstance(item, Record) or item.total_size != size:
            return False
        i += 1
    return True
