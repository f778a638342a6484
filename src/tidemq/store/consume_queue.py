"""ConsumeQueue (SimpleCQ): fixed 20-byte entries per (topic, queueId). Derived data.

Entry for queue offset N sits at logic byte offset N x 20 (docs/reference/store.md §2.1):

======  ====  ===========================================================
offset  size  field
======  ====  ===========================================================
0       8     commit-log physical offset of the record
8       4     record size (TOTALSIZE)
12      8     tags code: Java String.hashCode of TAGS, sign-extended
======  ====  ===========================================================

Files hold ``file_size / 20`` entries and are named by the logic byte offset of their
first slot. No checksum: the commit log is the truth and a consume queue is rebuilt from
it whenever it is in doubt. Slots before the first real entry of a queue that starts
late are filled with the blank unit ``(0, 0x7FFFFFFF, 0)``; a record lost to damage in the
middle of a queue leaves a hole entry ``(end of the previous entry, 0x7FFFFFFF, 0)``
that readers skip.

Writes are idempotent (entries already covered are skipped) and a gap is refused with
:class:`~tidemq.errors.QueueGap`. Entries are written per queue in bulk.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt

from tidemq.errors import QueueGap
from tidemq.formats.record.loops import compiled
from tidemq.store.layout import StoreLayout
from tidemq.store.mapped_file import MappedFile
from tidemq.store.queue_extent import creation_cut_short, measure
from tidemq.store.queue_files import QueueFiles

__all__ = ["CQ_DTYPE", "CQ_UNIT", "NATIVE_RUN_ENTRIES", "ConsumeQueue",
           "py_run_entries", "run_entries", "valid_bytes"]

log = logging.getLogger(__name__)

CQ_UNIT = 20
CQ_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
_ENTRY = struct.Struct(">qiq")  # one entry, as CQ_DTYPE
assert CQ_DTYPE.itemsize == _ENTRY.size == CQ_UNIT
BLANK_UNIT_SIZE = 0x7FFFFFFF
#: Bytes of a queue file pre-faulted past the entries being written. A page fault inside
#: a write holds the GIL (and a fresh page of a sparse file costs microseconds), while
#: ``MappedFile.populate`` faults 32 pages per call with the GIL released.
POPULATE_AHEAD = 128 * 1024
#: Appends of fewer entries than this are packed entry by entry, not made an array.
PACK_BELOW = 16

Entries = npt.NDArray[np.void]


def py_run_entries(start: int, step: int, n: int, size: int, tags: int) -> bytes:
    """The entries of ``n`` records at physical offsets ``start + i * step``, each of
    ``size`` bytes and tags code ``tags`` (a uniform batch's records): ``queue_entries``
    of the compiled module ``tidemq.formats._crecords`` when built (:func:`run_entries`),
    the same bytes in one call instead of a numpy call a column."""
    arr = np.empty(n, dtype=CQ_DTYPE)
    arr["phys"] = np.arange(n, dtype=np.int64) * step + start
    arr["size"] = size
    arr["tags"] = tags
    return arr.tobytes()


_run_entries = compiled("queue_entries")
#: Whether :func:`run_entries` is compiled (``False``: :func:`py_run_entries`).
NATIVE_RUN_ENTRIES = _run_entries is not None
run_entries: Callable[[int, int, int, int, int], bytes] = cast(
    "Callable[[int, int, int, int, int], bytes]", _run_entries or py_run_entries)


def valid_bytes(entries: Entries) -> int:
    """Bytes of valid entries at the start of a file's entries (up to the first with a
    negative offset or a size of zero or less)."""
    bad = np.flatnonzero((entries["phys"] < 0) | (entries["size"] <= 0))
    return (int(bad[0]) if len(bad) else len(entries)) * CQ_UNIT


def _column(values: Sequence[int]) -> Sequence[int] | npt.NDArray[np.int64] | int:
    """``values`` as numpy takes them fastest: a range (a batch's physical offsets) as an
    arange, and a list of one repeated value (tags codes, sizes of same-shaped messages)
    as that value, broadcast, instead of one Python int at a time."""
    if type(values) is range:
        return np.arange(values.start, values.stop, values.step, dtype=np.int64)
    if (type(values) is list or type(values) is tuple) and values and (
            values.count(values[0]) == len(values)):
        first: int = values[0]
        return first
    return values


class ConsumeQueue(QueueFiles):
    """One queue's entry files."""

    def __init__(self, layout: StoreLayout, topic: str, queue_id: int, file_size: int) -> None:
        self.layout = layout
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.dir = layout.queue_dir(topic, queue_id)
        self.files: list[MappedFile] = []
        self.min_offset = 0
        self.max_phys_end = 0  # phys + size of the last entry written
        #: Set by :meth:`load` when files had to be dropped: the queue starts empty and
        #: recovery rebuilds it from the whole commit log.
        self.damaged = False
        #: Set by :meth:`load` when the queue's later entries are gone while earlier
        #: ones are kept (why): recovery re-dispatches the log from :attr:`max_phys_end`.
        self.short = ""

    # ------------------------------------------------------------------ positions

    @property
    def max_offset(self) -> int:
        """Next queue offset to be written (last + 1)."""
        if not self.files:
            return self.min_offset
        last = self.files[-1]
        return (last.base + last.wrote) // CQ_UNIT

    @property
    def entries_per_file(self) -> int:
        return self.file_size // CQ_UNIT

    # ------------------------------------------------------------------ load and recovery

    def load(self) -> None:
        """Map the files on disk and find the end of valid entries in the last ones.

        Files of the wrong size, a missing file or invalid entries followed by valid ones
        put the whole queue in doubt (:func:`~tidemq.store.queue_extent.assess`): its
        files are dropped and :attr:`damaged` is set.
        """
        found = self.layout.segments_in(self.dir)
        cut = creation_cut_short(found, self.file_size)
        if cut:
            found.pop()[1].unlink()  # a crash while the file was being created
        extent = measure(found, self.file_size, CQ_DTYPE, valid_bytes, keep_one_empty=True,
                         cut_short=cut)
        if extent.doubt:
            self._drop([p for _, p in found], extent.doubt)
            return
        for (base, path), wrote in zip(found, extent.wrote, strict=False):
            mf = MappedFile(path, base, self.file_size, create=False)
            mf.wrote = mf.flushed = wrote
            self.files.append(mf)
        for _, path in found[len(extent.wrote):]:
            path.unlink()  # empty trailing files
        if extent.short and self.files:
            self.short = extent.short
            self.files[-1].zero_from(self.files[-1].wrote)  # entries after invalid ones
        if self.files:
            first = self.files[0]
            arr = np.frombuffer(first.view[: first.wrote], dtype=CQ_DTYPE)
            real = np.flatnonzero(arr["size"] != BLANK_UNIT_SIZE)
            self.min_offset = first.base // CQ_UNIT + (int(real[0]) if len(real) else len(arr))
            last = self.last_entry()
            self.max_phys_end = int(last["phys"]) + int(last["size"]) if last is not None else 0
        if self.short:
            log.warning("consume queue %s/%d lost entries after queue offset %d (%s): they "
                        "are dispatched again from the commit log, from offset %d",
                        self.topic, self.queue_id, self.max_offset, self.short,
                        self.max_phys_end)

    def _drop(self, paths: list[Path], why: str) -> None:
        log.warning("consume queue %s/%d is in doubt (%s): rebuilding it from the commit log",
                    self.topic, self.queue_id, why)
        for path in paths:
            path.unlink(missing_ok=True)
        self.damaged = True

    def last_entry(self) -> np.void | None:
        for mf in reversed(self.files):
            if mf.wrote:
                e: np.void = np.frombuffer(mf.view, dtype=CQ_DTYPE, count=1,
                                           offset=mf.wrote - CQ_UNIT)[0]
                if int(e["size"]) != BLANK_UNIT_SIZE:
                    return e
        return None

    def truncate_phys(self, phys_end: int) -> None:
        """Drop every entry whose record starts at or after ``phys_end``."""
        while self.files:
            mf = self.files[-1]
            arr = np.frombuffer(mf.view[: mf.wrote], dtype=CQ_DTYPE)
            keep = int(np.searchsorted(arr["phys"].astype(np.int64), phys_end, side="left"))
            # Blank units (phys 0) sort first and are always kept.
            if keep == 0 and mf.wrote and (len(self.files) > 1 or int(arr["phys"][0]) >= phys_end):
                self.files.pop().destroy()
                continue
            if keep * CQ_UNIT < mf.wrote:
                mf.zero_from(keep * CQ_UNIT)
            break
        last = self.last_entry()
        self.max_phys_end = int(last["phys"]) + int(last["size"]) if last is not None else 0
        self.min_offset = min(self.min_offset, self.max_offset)

    # ------------------------------------------------------------------ writing

    def _file_for_slot(self, slot: int) -> MappedFile:
        base = slot * CQ_UNIT - (slot * CQ_UNIT) % self.file_size
        if self.files and self.files[-1].base == base:
            return self.files[-1]
        self.dir.mkdir(parents=True, exist_ok=True)
        mf = MappedFile(self.layout.queue_file(self.topic, self.queue_id, base), base,
                        self.file_size, create=True, preallocate=False)
        self.files.append(mf)
        return mf

    def append(self, first_offset: int, phys: Sequence[int], sizes: Sequence[int],
               tags: Sequence[int]) -> int:
        """Write entries for queue offsets ``first_offset ...``; returns the new max offset.

        Entries already covered (re-dispatch after recovery) are skipped; an entry beyond
        the next free slot raises :class:`QueueGap`.
        """
        n = len(phys)
        skip = 0
        while skip < n and phys[skip] + sizes[skip] <= self.max_phys_end:
            skip += 1
        if skip == n:
            return self.max_offset
        first = first_offset + skip
        expected = self.max_offset
        if not self.files and first > 0:
            self._start_at(first)
            expected = first
        if first != expected:
            if first < expected:
                # Already present by slot although the phys check passed: keep idempotent.
                drop = expected - first
                skip += drop
                first = expected
                if skip >= n:
                    return self.max_offset
            else:
                raise QueueGap(self.topic, self.queue_id, expected, first)
        if skip:
            phys, sizes, tags = phys[skip:], sizes[skip:], tags[skip:]
        if n - skip == 1:  # one entry (a dispatch round of one put): packed, not an array
            self._write(first, memoryview(_ENTRY.pack(phys[0], sizes[0], tags[0])))
        elif n - skip <= PACK_BELOW:  # a few (a round of a few sends to many queues)
            self._write(first, memoryview(b"".join(map(_ENTRY.pack, phys, sizes, tags))))
        else:
            size, tag = _column(sizes), _column(tags)
            if type(phys) is range and type(size) is int and type(tag) is int:
                # a uniform batch's records: one call
                self._write(first, memoryview(run_entries(phys.start, phys.step, n - skip,
                                                          size, tag)))
            else:
                arr = np.empty(n - skip, dtype=CQ_DTYPE)
                arr["phys"] = _column(phys)
                arr["size"] = size
                arr["tags"] = tag
                self._write(first, arr.view(np.uint8).data)
        self.max_phys_end = int(phys[-1]) + int(sizes[-1])
        return self.max_offset

    def append_runs(self, first_offset: int, runs: Sequence[range], size: int,
                    tags: int) -> int:
        """:meth:`append` of the records at the offsets of ``runs``, one after another
        (a dispatch round's uniform batches to this queue), each of ``size`` bytes and
        tags code ``tags``: the entries of each run made by one call and written
        together when they continue the queue, as :meth:`append` writes them; otherwise
        handed to :meth:`append`."""
        if (self.files and first_offset == self.max_offset and runs[0] and runs[-1]
                and runs[0][0] + size > self.max_phys_end):
            self._write(first_offset, memoryview(b"".join([
                run_entries(r.start, r.step, len(r), size, tags) for r in runs])))
            self.max_phys_end = runs[-1][-1] + size
            return self.max_offset
        phys = [p for r in runs for p in r]
        return self.append(first_offset, phys, [size] * len(phys), [tags] * len(phys))

    def append_one(self, offset: int, phys: int, size: int, tags: int) -> int:
        """:meth:`append` of one entry -- a dispatch round's share of each queue when
        the round's records went to many queues -- packed straight into the file when it
        continues the queue in its last file; the same checks and bytes otherwise."""
        files = self.files
        if files and phys + size > self.max_phys_end:
            mf = files[-1]
            pos = mf.wrote
            end = pos + CQ_UNIT
            if ((mf.base + pos) // CQ_UNIT == offset and end <= self.file_size
                    and mf.werr is None):
                if end > mf.populated:  # fault the next pages in without the GIL
                    mf.populated = max(mf.populated, pos)
                    mf.populate(end + POPULATE_AHEAD)
                _ENTRY.pack_into(mf.mm, pos, phys, size, tags)
                mf.wrote = end
                self.max_phys_end = phys + size
                return offset + 1
        return self.append(offset, (phys,), (size,), (tags,))

    def fill_holes(self, upto: int) -> None:
        """Hole entries for queue offsets ``max_offset .. upto - 1``, whose records are
        gone (damaged beyond their header): ``(end of the previous entry, 0x7FFFFFFF, 0)``,
        so physical offsets still never decrease. Readers skip them; the queue goes on."""
        first = self.max_offset
        if upto <= first:
            return
        holes = np.zeros(upto - first, dtype=CQ_DTYPE)
        holes["phys"] = self.max_phys_end
        holes["size"] = BLANK_UNIT_SIZE
        if not self.files:
            self._start_at(first)
        self._write(first, holes.view(np.uint8).data)

    def _start_at(self, first: int) -> None:
        mf = self._file_for_slot(first)
        fill = first - mf.base // CQ_UNIT
        if fill:
            blanks = np.zeros(fill, dtype=CQ_DTYPE)
            blanks["size"] = BLANK_UNIT_SIZE
            mf.write_at(0, blanks.tobytes())
        self.min_offset = first

    def _write(self, first: int, raw: memoryview) -> None:
        """Write the entries in ``raw`` (whole entries' bytes) from queue offset
        ``first`` on."""
        per_file = self.entries_per_file
        slot, i, n = first, 0, len(raw) // CQ_UNIT
        while i < n:
            mf = self._file_for_slot(slot)
            pos = slot * CQ_UNIT - mf.base
            room = (self.file_size - pos) // CQ_UNIT
            take = min(room, n - i)
            end = pos + take * CQ_UNIT
            if end > mf.populated:  # fault the next pages in without the GIL, many at once
                mf.populated = max(mf.populated, pos)
                mf.populate(end + POPULATE_AHEAD)
            mf.write_at(pos, raw[i * CQ_UNIT : (i + take) * CQ_UNIT])
            i += take
            slot += take
            if take == 0:  # pragma: no cover - file_size is a multiple of 20
                raise AssertionError(f"no room in {mf.path} for slot {slot} ({per_file})")

    # ------------------------------------------------------------------ reading

    def entries(self, offset: int, max_count: int) -> Entries:
        """Up to ``max_count`` entries from ``offset`` (stopping at a file end)."""
        if offset < self.min_offset or offset >= self.max_offset or max_count <= 0:
            return np.empty(0, dtype=CQ_DTYPE)
        byte = offset * CQ_UNIT
        mf = self._file_at(byte)
        if mf is None:
            return np.empty(0, dtype=CQ_DTYPE)
        pos = byte - mf.base
        count = min(max_count, (mf.wrote - pos) // CQ_UNIT)
        return np.frombuffer(mf.view, dtype=CQ_DTYPE, count=count, offset=pos)

    def entry_bytes(self, offset: int, max_count: int) -> tuple[memoryview, int, int] | None:
        """The raw bytes of up to ``max_count`` entries from ``offset`` (stopping at a file
        end) as ``(view, start, count)``: entry ``i`` is at ``start + i * 20`` of ``view``,
        the file's whole mapping. No numpy: the cheap form for a few entries."""
        if offset < self.min_offset or max_count <= 0:
            return None
        byte = offset * CQ_UNIT
        files = self.files
        if not files:
            return None
        mf = files[-1]
        if not mf.base <= byte < mf.base + mf.wrote:
            found = self._file_at(byte)
            if found is None:
                return None
            mf = found
        pos = byte - mf.base
        count = min(max_count, (mf.wrote - pos) // CQ_UNIT)
        if count <= 0:
            return None
        return mf.view, pos, count

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        e = self.entries(offset, 1)
        if not len(e):
            return None
        return int(e["phys"][0]), int(e["size"][0]), int(e["tags"][0])

    def _file_at(self, byte: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        idx = (byte - files[0].base) // self.file_size
        if 0 <= idx < len(files) and files[idx].base <= byte < files[idx].end:
            return files[idx]
        for mf in files:
            if mf.base <= byte < mf.end:
                return mf
        return None

    # ------------------------------------------------------------------ retention

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Delete files wholly below ``commitlog_min`` and move ``min_offset`` past them."""
        while len(self.files) > 1:
            first = self.files[0]
            last_e = np.frombuffer(first.view, dtype=CQ_DTYPE, count=1,
                                   offset=first.wrote - CQ_UNIT)[0]
            if int(last_e["phys"]) + int(last_e["size"]) > commitlog_min:
                break
            self.files.pop(0).destroy()
        if not self.files:
            return
        first = self.files[0]
        arr = np.frombuffer(first.view[: first.wrote], dtype=CQ_DTYPE)
        real = (arr["size"] != BLANK_UNIT_SIZE) & (arr["phys"] >= commitlog_min)
        idx = np.flatnonzero(real)
        if len(idx):
            new_min = first.base // CQ_UNIT + int(idx[0])
        else:
            new_min = self.max_offset if len(self.files) == 1 else (first.end // CQ_UNIT)
        self.min_offset = max(self.min_offset, new_min)
