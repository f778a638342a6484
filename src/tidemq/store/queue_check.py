"""The consume queues and batch consume queues checked against the commit log's records,
read-only (``tidemq store verify``; the layouts are :mod:`tidemq.store.consume_queue`'s and
:mod:`tidemq.store.batch_consume_queue`'s).

A queue is read a chunk of entries at a time (:mod:`tidemq.store.entry_chunks`). What is
carried from one chunk to the next is a few numbers (the entry before, whether the valid
entries have ended) and, for each kind of finding, how many there were and the first
:data:`MAX_EXAMPLES`; so a queue of any length is checked in the memory of one chunk, and
the findings are the same, in the same order, as a reading of the whole queue at once.

Findings are ``(queue offset, detail)`` in this order: the file that breaks the queue's
run of files, then the single findings (non-zero bytes after the valid entries, a stray
blank unit, offsets that do not follow on, a hole entry going back, physical offsets
that do not increase), then up to :data:`MAX_EXAMPLES` of each kind found per entry
(past the end of the valid log, no record there, another size, another queue, another
queue offset).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from tidemq.store.batch_consume_queue import BCQ_DTYPE, BCQ_UNIT, HOLE_SIZE
from tidemq.store.batch_consume_queue import valid_bytes as bcq_valid_bytes
from tidemq.store.consume_queue import BLANK_UNIT_SIZE, CQ_DTYPE, CQ_UNIT
from tidemq.store.entry_chunks import entry_chunks

__all__ = ["MAX_EXAMPLES", "BatchQueueResult", "QueueResult", "QueueTotals",
           "check_batch_queue", "check_consume_queue"]

#: Examples kept of each kind of finding (the others are only counted).
MAX_EXAMPLES = 5
LMQ_PREFIX = "%LMQ%"

Columns = dict[str, np.ndarray[Any, Any]]
Finding = tuple[int, str]


@dataclasses.dataclass(slots=True)
class QueueTotals:
    """Counts over every queue checked."""

    entries: int = 0  # entries that name a record
    expired: int = 0  # of those, below the commit log's first offset
    holes: int = 0  # entries of records lost to damage, which readers skip


@dataclasses.dataclass(slots=True)
class QueueResult:
    findings: list[Finding]
    dropped: int  # entries past the end of the valid log (a start drops them)
    end: int  # the queue offset after its last valid entry


@dataclasses.dataclass(slots=True)
class BatchQueueResult:
    findings: list[Finding]
    dropped: int
    last_phys: int  # the record of its last entry (-1: none)
    next_offset: int  # the queue offset after its last entry (-1: none)


class _Examples:
    """The first :data:`MAX_EXAMPLES` findings of one kind, in entry order."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(self, mask: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any],
            phys: np.ndarray[Any, Any], text: str) -> None:
        room = MAX_EXAMPLES - len(self.items)
        if room <= 0:
            return
        for j in np.flatnonzero(mask)[:room].tolist():
            self.items.append((int(offsets[j]), text.format(phys=int(phys[j]))))


class _RecordChecks:
    """Entries against the records they name: one :class:`_Examples` per check."""

    def __init__(self, cols: Columns, topic_id: int, queue_id: int, *, own: bool,
                 queue_offsets: bool) -> None:
        self.cols = cols
        self.topic_id = topic_id
        self.queue_id = queue_id
        self.own = own  # the records are this queue's (an LMQ's are its parents')
        self.queue_offsets = queue_offsets  # also each record's queue offset
        self.beyond = _Examples()
        self.checks = [_Examples() for _ in range(4)]

    def add(self, offsets: np.ndarray[Any, Any], phys: np.ndarray[Any, Any],
            size: np.ndarray[Any, Any], live: np.ndarray[Any, Any]) -> None:
        """Entries at ``offsets`` (reported where), ``live``: not expired and not past the
        end of the valid log."""
        rp = self.cols["phys"]
        k = np.minimum(np.searchsorted(rp, phys), max(len(rp) - 1, 0))
        hit = rp[k] == phys if len(rp) else np.zeros(len(phys), dtype=np.bool_)
        no_record, other_size, other_queue, other_offset = self.checks
        no_record.add(live & ~hit, offsets, phys, "no record starts at {phys}")
        if not len(rp):
            return
        hit &= live
        other_size.add(hit & (self.cols["size"][k] != size), offsets, phys,
                       "size differs from record at {phys}")
        if not self.own:
            return
        other_queue.add(hit & ((self.cols["topic"][k] != self.topic_id)
                               | (self.cols["queue_id"][k] != self.queue_id)),
                        offsets, phys, "record at {phys} belongs to another queue")
        if self.queue_offsets:
            other_offset.add(hit & (self.cols["queue_offset"][k] != offsets), offsets, phys,
                             "record at {phys} has another queue offset")

    def findings(self) -> list[Finding]:
        return [*self.beyond.items, *(f for c in self.checks for f in c.items)]


def _first(found: Finding | None, mask: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any],
           text: str) -> Finding | None:
    """``found``, or the first entry of ``mask`` as a finding."""
    if found is not None or not np.any(mask):
        return found
    return int(offsets[int(np.argmax(mask))]), text


def _place(checks: _RecordChecks, totals: QueueTotals, offsets: np.ndarray[Any, Any],
           phys: np.ndarray[Any, Any], size: np.ndarray[Any, Any], cl_min: int,
           end: int) -> int:
    """Sort a chunk's entries by where they point: below the log's minimum (expired,
    counted), past its valid end (reported; their number returned), or at records to
    check."""
    expired = phys < cl_min
    totals.expired += int(np.count_nonzero(expired))
    beyond = phys >= end
    checks.beyond.add(beyond, offsets, phys,
                      f"points at {{phys}}, past the end of the valid log {end}")
    checks.add(offsets, phys, size, ~expired & ~beyond)
    return int(np.count_nonzero(beyond))


def check_consume_queue(topic: str, queue_id: int, found: list[tuple[int, Path]],
                        file_size: int, cols: Columns, topic_ids: dict[str, int],
                        cl_min: int, end: int, totals: QueueTotals) -> QueueResult:
    """One consume queue, whose files are ``found`` (``(base, path)`` in order), against
    ``cols`` (the records' columns, sorted by ``phys``). ``cl_min``: the commit log's
    first offset (entries below it expired); ``end``: the end of the valid log."""
    head: list[Finding] = []
    files: list[tuple[int, Path, int]] = []  # base, path, entries to read
    prev_end = -1
    for i, (base, path) in enumerate(found):
        nbytes = path.stat().st_size
        if nbytes != file_size or base % CQ_UNIT or (i and base != prev_end):
            head.append((base // CQ_UNIT, f"{nbytes} bytes at {base}, expected {file_size} "
                         "following the previous file; a start drops the queue and rebuilds "
                         "it from the commit log"))
            if i == 0 or base == prev_end:  # its whole entries still count
                files.append((base, path, nbytes // CQ_UNIT))
            break
        files.append((base, path, nbytes // CQ_UNIT))
        prev_end = base + nbytes
    first_offset = found[0][0] // CQ_UNIT
    checks = _RecordChecks(cols, topic_ids.get(topic, -1), queue_id,
                           own=not topic.startswith(LMQ_PREFIX), queue_offsets=True)
    valid_end = -1  # the first invalid entry, once seen
    nonzero_after = False  # non-zero bytes after it
    stray = not_increasing = None
    lead = False  # a real entry was seen (blank units before it are leading ones)
    last_real = -1
    at = 0  # entries read so far
    dropped = 0
    for _base, path, count in files:
        for chunk in entry_chunks(path, CQ_DTYPE, count=count):
            pos, at = at, at + len(chunk)
            if valid_end >= 0:
                nonzero_after = nonzero_after or bool(np.any(chunk.view(np.uint8)))
                continue
            phys = chunk["phys"].astype(np.int64)
            size = chunk["size"].astype(np.int64)
            bad = np.flatnonzero((phys < 0) | (size <= 0))
            if len(bad):
                cut = int(bad[0])
                valid_end = pos + cut
                nonzero_after = bool(np.any(chunk[cut:].view(np.uint8)))
                phys, size = phys[:cut], size[:cut]
            offsets = first_offset + pos + np.arange(len(phys), dtype=np.int64)
            blank = size == BLANK_UNIT_SIZE
            if not lead:
                real_at = np.flatnonzero(~blank)
                if not len(real_at):
                    continue
                lead = True
                skip = int(real_at[0])
                offsets, phys, size, blank = (offsets[skip:], phys[skip:], size[skip:],
                                              blank[skip:])
            # After the first real entry a blank size is a hole entry (a record lost with
            # its header; readers skip it) and carries the previous entry's end; a zero
            # there is not.
            zero = blank & (phys == 0)
            stray = _first(stray, zero, offsets, "blank unit after the first real entry")
            totals.holes += int(np.count_nonzero(blank & ~zero))
            real = ~blank
            offsets, phys, size = offsets[real], phys[real], size[real]
            totals.entries += len(phys)
            if not len(phys):
                continue
            if not_increasing is None:
                steps = np.diff(phys, prepend=last_real) <= 0
                if last_real < 0:
                    steps[0] = False
                not_increasing = _first(None, steps, offsets, "physical offsets do not increase")
            last_real = int(phys[-1])
            dropped += _place(checks, totals, offsets, phys, size, cl_min, end)
    if valid_end < 0:
        valid_end = at
    singles = [(first_offset + valid_end, "non-zero entries after the end of valid entries")
               if nonzero_after else None, stray, not_increasing]
    findings = [*head, *(f for f in singles if f), *checks.findings()]
    return QueueResult(findings, dropped, first_offset + valid_end)


def check_batch_queue(topic: str, queue_id: int, found: list[tuple[int, Path]],
                      file_size: int, cols: Columns, topic_ids: dict[str, int],
                      cl_min: int, end: int, totals: QueueTotals) -> BatchQueueResult:
    """One batch consume queue, as :func:`check_consume_queue`: file sizes, then each
    entry against the record it names (exists, same size, this queue's), offsets that
    follow on, and physical offsets that grow. Findings are at queue offsets (-1: the
    queue's files)."""
    head: list[Finding] = []
    files: list[Path] = []
    for i, (first, path) in enumerate(found):
        nbytes = path.stat().st_size
        if nbytes != file_size or (i and first != found[i - 1][0] + file_size):
            head.append((-1, f"file {path.name}: {nbytes} bytes at {first}, expected "
                         f"{file_size} following the previous; a start drops the queue and "
                         "rebuilds it from the commit log"))
            break
        files.append(path)
    checks = _RecordChecks(cols, topic_ids.get(topic, -1), queue_id, own=True,
                           queue_offsets=False)
    valid_end = -1
    nonzero_after: int | None = None
    follow = hole_back = not_increasing = None
    prev_next = prev_phys = -1  # of the valid entry before (holes included)
    last_phys = last_next = -1  # of the last entry that is not a hole
    at = 0
    dropped = 0
    for path in files:
        for chunk in entry_chunks(path, BCQ_DTYPE):
            pos, at = at, at + len(chunk)
            if valid_end >= 0:
                if nonzero_after is None and np.any(chunk.view(np.uint8)):
                    nonzero_after = valid_end
                continue
            cut = bcq_valid_bytes(chunk) // BCQ_UNIT
            if cut < len(chunk):
                valid_end = pos + cut
                if np.any(chunk[cut:].view(np.uint8)):
                    nonzero_after = valid_end
            if not cut:
                continue
            ent = chunk[:cut]
            phys, size = ent["phys"].astype(np.int64), ent["size"].astype(np.int64)
            base, batch = ent["base"].astype(np.int64), ent["batch"].astype(np.int64)
            expected = np.concatenate(([prev_next], (base + batch)[:-1]))
            gap = base != expected
            if prev_next < 0:
                gap[0] = False
            follow = _first(follow, gap, base, "queue offsets do not follow on")
            hole = size == HOLE_SIZE
            totals.holes += int(np.count_nonzero(hole))
            before = np.concatenate(([prev_phys], phys[:-1]))
            back = hole & (phys < before)
            if prev_phys < 0:
                back[0] = False
            hole_back = _first(hole_back, back, base, "hole entry goes back in the commit log")
            prev_next, prev_phys = int(base[-1] + batch[-1]), int(phys[-1])
            keep = ~hole
            phys, size, base, batch = phys[keep], size[keep], base[keep], batch[keep]
            totals.entries += len(phys)
            if not len(phys):
                continue
            if not_increasing is None:
                steps = np.diff(phys, prepend=last_phys) <= 0
                if last_phys < 0:
                    steps[0] = False
                not_increasing = _first(None, steps, base, "physical offsets do not increase")
            last_phys, last_next = int(phys[-1]), int(base[-1] + batch[-1])
            dropped += _place(checks, totals, base, phys, size, cl_min, end)
    if valid_end < 0:
        valid_end = at
    singles = [None if nonzero_after is None else
               (-1, f"non-zero entries after the end of valid entries (entry {nonzero_after})"),
               follow, hole_back, not_increasing]
    findings = [*head, *(f for f in singles if f), *checks.findings()]
    return BatchQueueResult(findings, dropped, last_phys, last_next)
