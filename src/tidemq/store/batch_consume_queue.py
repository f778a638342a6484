"""BatchConsumeQueue (RIP-26): one 46-byte entry per stored record, covering ``batchSize``
queue offsets. Derived data, rebuilt from the commit log when in doubt.

Entry layout (docs/reference/store.md §3.2), big-endian:

======  ====  ==============  ================================================
offset  size  field           meaning
======  ====  ==============  ================================================
0       8     phys            commit-log offset of the (outer) record
8       4     size            TOTALSIZE of the record
12      8     tags            tags code of the outer record
20      8     store_ts        store timestamp (time search without the log)
28      8     base            queue offset of the first message in the entry
36      2     batch           number of messages covered
38      4     compacted       written as -1
42      4     reserved        written as 0
======  ====  ==============  ================================================

A *hole entry* stands for queue offsets whose record is damaged beyond what recovery can
index (its header is gone, or its message count is unreadable): ``size`` is
``0x7FFFFFFF`` (as a consume queue's hole entry), ``phys`` the end of the entry before it,
``base``/``batch`` the offsets it covers, ``tags`` 0 and ``store_ts`` the previous entry's.
Readers skip it and move past its offsets, so the queue goes on.

Files hold ``file_size / 46`` entries and are named by the logic byte offset of their
first slot. Because entries cover variable numbers of messages, the slot of a queue
offset is found by a floor search: first over a per-file cache of first base offsets,
then by binary search on the ``base`` column inside the file.
"""

from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tidemq.errors import QueueGap
from tidemq.store.consume_queue import BLANK_UNIT_SIZE
from tidemq.store.layout import StoreLayout
from tidemq.store.mapped_file import MappedFile
from tidemq.store.queue_extent import creation_cut_short, measure
from tidemq.store.queue_files import QueueFiles

__all__ = ["BCQ_DTYPE", "BCQ_UNIT", "HOLE_SIZE", "BatchConsumeQueue", "valid_bytes"]

log = logging.getLogger(__name__)

BCQ_UNIT = 46
BCQ_DTYPE = np.dtype([
    ("phys", ">i8"), ("size", ">i4"), ("tags", ">i8"), ("store_ts", ">i8"), ("base", ">i8"),
    ("batch", ">i2"), ("compacted", ">i4"), ("reserved", ">i4"),
])
assert BCQ_DTYPE.itemsize == BCQ_UNIT
#: One entry as a struct (the table above), for appends of a few entries.
_ENTRY = struct.Struct(">qiqqqhii")
assert _ENTRY.size == BCQ_UNIT
#: Appends of up to this many entries are packed entry by entry, larger ones as columns.
_PACKED_MAX = 8
#: ``size`` of a hole entry.
HOLE_SIZE = BLANK_UNIT_SIZE
#: Most queue offsets one entry covers (``batch`` is a signed 16-bit field).
MAX_BATCH = 0x7FFF

Entries = npt.NDArray[np.void]


def valid_bytes(entries: Entries) -> int:
    """Bytes of valid entries at the start of a file's entries."""
    bad = np.flatnonzero((entries["phys"] < 0) | (entries["size"] <= 0) | (entries["base"] < 0)
                         | (entries["batch"] <= 0))
    return (int(bad[0]) if len(bad) else len(entries)) * BCQ_UNIT


class BatchConsumeQueue(QueueFiles):
    """One queue's batch entries; the same surface as ConsumeQueue plus batch lookups."""

    batch = True

    def __init__(self, layout: StoreLayout, topic: str, queue_id: int, file_size: int) -> None:
        self.layout = layout
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.dir = layout.queue_dir(topic, queue_id, batch=True)
        self.files: list[MappedFile] = []
        self._first_bases: list[int] = []  # base offset of each file's first entry
        self.min_offset = 0
        self.max_offset = 0
        self.max_phys_end = 0
        self.damaged = False
        #: Set by :meth:`load` when the queue's later entries are gone while earlier
        #: ones are kept (why): recovery re-dispatches the log from :attr:`max_phys_end`.
        self.short = ""

    # ------------------------------------------------------------------ helpers

    def _arr(self, mf: MappedFile) -> Entries:
        return np.frombuffer(mf.view, dtype=BCQ_DTYPE, count=mf.wrote // BCQ_UNIT)

    def _refresh_tail(self) -> None:
        last = self.last_entry()
        if last is None:
            self.max_offset = self.min_offset
            self.max_phys_end = 0
        else:
            self.max_offset = int(last["base"]) + int(last["batch"])
            size = int(last["size"])
            self.max_phys_end = int(last["phys"]) + (0 if size == HOLE_SIZE else size)

    def last_entry(self) -> np.void | None:
        for mf in reversed(self.files):
            if mf.wrote:
                e: np.void = np.frombuffer(mf.view, dtype=BCQ_DTYPE, count=1,
                                           offset=mf.wrote - BCQ_UNIT)[0]
                return e
        return None

    # ------------------------------------------------------------------ load and recovery

    def load(self) -> None:
        """Map the files on disk and find the end of valid entries in the last ones.

        A file of the wrong size, a missing file or invalid entries followed by valid ones
        put the whole queue in doubt: its files are dropped and :attr:`damaged` is set, so
        recovery rebuilds it from the start of the commit log. A last file whose creation
        a crash cut short is removed first (:func:`creation_cut_short`).
        """
        found = self.layout.segments_in(self.dir)
        cut = creation_cut_short(found, self.file_size)
        if cut:
            found.pop()[1].unlink()  # a crash while the file was being created
        extent = measure(found, self.file_size, BCQ_DTYPE, valid_bytes, keep_one_empty=False,
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
        self._first_bases = [int(self._arr(mf)["base"][0]) for mf in self.files]
        if self.files:
            self.min_offset = self._first_bases[0]
        self._refresh_tail()
        if self.short:
            log.warning("batch consume queue %s/%d lost entries after queue offset %d (%s): "
                        "they are dispatched again from the commit log, from offset %d",
                        self.topic, self.queue_id, self.max_offset, self.short,
                        self.max_phys_end)

    def _drop(self, paths: list[Path], why: str) -> None:
        log.warning("batch consume queue %s/%d is in doubt (%s): rebuilding it from the "
                    "commit log", self.topic, self.queue_id, why)
        for path in paths:
            path.unlink(missing_ok=True)
        self.damaged = True

    def truncate_phys(self, phys_end: int) -> None:
        """Drop every entry whose record starts at or after ``phys_end``."""
        while self.files:
            mf = self.files[-1]
            arr = self._arr(mf)
            keep = int(np.searchsorted(arr["phys"].astype(np.int64), phys_end, side="left"))
            if keep == 0:
                self.files.pop().destroy()
                self._first_bases.pop()
                continue
            if keep * BCQ_UNIT < mf.wrote:
                mf.zero_from(keep * BCQ_UNIT)
            break
        self._refresh_tail()
        self.min_offset = min(self.min_offset, self.max_offset)

    # ------------------------------------------------------------------ writing

    def append(self, first_offset: int, phys: Sequence[int], sizes: Sequence[int],
               tags: Sequence[int], *, store_ts: int | Sequence[int] = 0,
               batch_sizes: Sequence[int] | None = None) -> int:
        """Write one entry per record; returns the new max offset. Re-dispatched entries
        (phys already covered) are skipped; a base beyond ``max_offset`` is a gap.
        ``store_ts`` is one time for all records or one per record."""
        n = len(phys)
        counts = batch_sizes if batch_sizes is not None else [1] * n
        skip = 0
        base = first_offset
        while skip < n and phys[skip] + sizes[skip] <= self.max_phys_end:
            base += counts[skip]
            skip += 1
        if skip == n:
            return self.max_offset
        if not self.files and base > 0 and self.max_offset == 0:
            self.min_offset = self.max_offset = base
        if base != self.max_offset:
            raise QueueGap(self.topic, self.queue_id, self.max_offset, base)
        m = n - skip
        if m <= _PACKED_MAX:
            return self._append_packed(base, phys, sizes, tags, store_ts, counts, skip)
        arr = np.zeros(m, dtype=BCQ_DTYPE)
        arr["phys"] = phys[skip:]
        arr["size"] = sizes[skip:]
        arr["tags"] = tags[skip:]
        arr["store_ts"] = store_ts if isinstance(store_ts, int) else store_ts[skip:]
        cnt = np.asarray(counts[skip:], dtype=np.int64)
        if (cnt <= 0).any() or (cnt > MAX_BATCH).any():
            raise ValueError(f"batch sizes must be in 1..32767, got {counts[skip:]}")
        arr["batch"] = cnt
        bases = np.empty(m, dtype=np.int64)
        bases[0] = base
        np.cumsum(cnt[:-1], out=bases[1:])
        bases[1:] += base
        arr["base"] = bases
        arr["compacted"] = -1
        self._write(arr.tobytes(), arr["base"])
        self.max_offset = int(bases[-1] + cnt[-1])
        self.max_phys_end = int(phys[-1]) + int(sizes[-1])
        return self.max_offset

    def append_entry(self, base: int, phys: int, size: int, tags: int, store_ts: int,
                     count: int) -> int:
        """:meth:`append` of one record covering ``count`` offsets from ``base`` (a
        dispatch round of one inner batch): the same checks and bytes, written straight
        into the last file when it has room."""
        if phys + size <= self.max_phys_end:
            return self.max_offset  # re-dispatched
        if base != self.max_offset:
            if self.files or base <= 0 or self.max_offset != 0:
                raise QueueGap(self.topic, self.queue_id, self.max_offset, base)
            self.min_offset = self.max_offset = base
        if not 0 < count <= MAX_BATCH:
            raise ValueError(f"batch sizes must be in 1..32767, got [{count}]")
        raw = _ENTRY.pack(phys, size, tags, store_ts, base, count, -1, 0)
        files = self.files
        mf = files[-1] if files else None
        if mf is not None and mf.werr is None and mf.size - mf.wrote >= BCQ_UNIT:
            at = mf.wrote  # MappedFile.write_at's copy, without its call
            mf.mm[at : at + BCQ_UNIT] = raw
            mf.wrote = at + BCQ_UNIT
        else:
            self._write(raw, (base,))
        self.max_offset = end = base + count
        self.max_phys_end = phys + size
        return end

    def _append_packed(self, base: int, phys: Sequence[int], sizes: Sequence[int],
                       tags: Sequence[int], store_ts: int | Sequence[int],
                       counts: Sequence[int], skip: int) -> int:
        """:meth:`append` of the few entries from ``skip`` on (a dispatch round of a busy
        queue usually brings one), each packed with one struct call instead of numpy's
        column set-up: the same bytes."""
        raw = bytearray()
        bases: list[int] = []
        one_ts = isinstance(store_ts, int)
        for i in range(skip, len(phys)):
            count = counts[i]
            if not 0 < count <= MAX_BATCH:
                raise ValueError(f"batch sizes must be in 1..32767, got {list(counts[skip:])}")
            bases.append(base)
            raw += _ENTRY.pack(phys[i], sizes[i], tags[i],
                               store_ts if one_ts else store_ts[i],  # type: ignore[index]
                               base, count, -1, 0)
            base += count
        self._write(raw, bases)
        self.max_offset = base
        self.max_phys_end = int(phys[-1]) + int(sizes[-1])
        return base

    def fill_hole(self, upto: int) -> None:
        """Hole entries for queue offsets ``max_offset .. upto - 1``, whose record recovery
        could not index (damaged): readers skip them, the queue goes on (module doc)."""
        first = self.max_offset
        if upto <= first:
            return
        last = self.last_entry()
        counts = [MAX_BATCH] * ((upto - first) // MAX_BATCH)
        if (upto - first) % MAX_BATCH:
            counts.append((upto - first) % MAX_BATCH)
        arr = np.zeros(len(counts), dtype=BCQ_DTYPE)
        arr["phys"] = self.max_phys_end
        arr["size"] = HOLE_SIZE
        arr["store_ts"] = int(last["store_ts"]) if last is not None else 0
        cnt = np.asarray(counts, dtype=np.int64)
        arr["batch"] = cnt
        arr["base"] = first + np.concatenate(([0], np.cumsum(cnt)[:-1]))
        arr["compacted"] = -1
        if not self.files and self.max_offset == 0:
            self.min_offset = first
        self._write(arr.tobytes(), arr["base"])
        self.max_offset = upto

    def _write(self, raw: bytes | bytearray, bases: Sequence[int] | npt.NDArray[np.int64]
               ) -> None:
        """Append the entries ``raw`` holds (``bases``: each one's base offset), rolling to
        new files as they fill."""
        i, n = 0, len(raw) // BCQ_UNIT
        while i < n:
            mf = self.files[-1] if self.files else None
            if mf is None or mf.wrote >= mf.size:
                base_byte = mf.end if mf is not None else 0
                self.dir.mkdir(parents=True, exist_ok=True)
                mf = MappedFile(self.layout.queue_file(self.topic, self.queue_id, base_byte,
                                                       batch=True),
                                base_byte, self.file_size, create=True, preallocate=False)
                self.files.append(mf)
                self._first_bases.append(int(bases[i]))
            room = (mf.size - mf.wrote) // BCQ_UNIT
            take = min(room, n - i)
            mf.write_at(mf.wrote, raw[i * BCQ_UNIT : (i + take) * BCQ_UNIT] if take < n
                        else raw)
            i += take

    # ------------------------------------------------------------------ reading

    def _locate(self, offset: int) -> tuple[int, int] | None:
        """(file index, entry index) of the entry containing ``offset``."""
        if offset >= self.max_offset or not self.files:
            return None
        fi = bisect.bisect_right(self._first_bases, offset) - 1
        fi = max(fi, 0)
        arr = self._arr(self.files[fi])
        bases = arr["base"]
        lo, hi = 0, len(arr) - 1
        while lo < hi:  # floor search: last entry with base <= offset
            mid = (lo + hi + 1) // 2
            if int(bases[mid]) <= offset:
                lo = mid
            else:
                hi = mid - 1
        return fi, lo

    def entries(self, offset: int, max_count: int) -> Entries:
        """Up to ``max_count`` entries from the one containing ``offset`` (one file),
        none at or beyond :attr:`max_offset`: :meth:`append` writes entries before it
        moves ``max_offset``, so a concurrent reader must not run ahead of it (it would
        then see ``OFFSET_OVERFLOW_BADLY`` at its next offset)."""
        if offset < self.min_offset or max_count <= 0:
            return np.empty(0, dtype=BCQ_DTYPE)
        hi = self.max_offset  # first: every entry below it is complete
        loc = self._locate(offset)
        if loc is None:
            return np.empty(0, dtype=BCQ_DTYPE)
        fi, ei = loc
        out = self._arr(self.files[fi])[ei : ei + max_count]
        if len(out) and int(out["base"][-1]) >= hi:
            out = out[: int(np.searchsorted(out["base"].astype(np.int64), hi))]
        return out

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        e = self.entries(offset, 1)
        if not len(e):
            return None
        return int(e["phys"][0]), int(e["size"][0]), int(e["tags"][0])

    def offset_by_time(self, timestamp: int) -> int:
        """Base offset of the first entry stored at or after ``timestamp``."""
        for mf in self.files:
            arr = self._arr(mf)
            if not len(arr) or int(arr["store_ts"][-1]) < timestamp:
                continue
            ts = arr["store_ts"].astype(np.int64)
            idx = int(np.searchsorted(ts, timestamp, side="left"))
            return max(int(arr["base"][idx]), self.min_offset)
        return self.max_offset

    def store_time_at(self, offset: int) -> int:
        e = self.entries(offset, 1)
        return int(e["store_ts"][0]) if len(e) else -1

    # ------------------------------------------------------------------ retention

    def correct_min_offset(self, commitlog_min: int) -> None:
        while len(self.files) > 1:
            arr = self._arr(self.files[0])
            last = arr[-1]
            if int(last["phys"]) + int(last["size"]) > commitlog_min:
                break
            self.files.pop(0).destroy()
            self._first_bases.pop(0)
        if not self.files:
            return
        arr = self._arr(self.files[0])
        alive = np.flatnonzero(arr["phys"].astype(np.int64) >= commitlog_min)
        new_min = int(arr["base"][alive[0]]) if len(alive) else self.max_offset
        self.min_offset = max(self.min_offset, new_min)

    def destroy(self) -> None:
        super().destroy()
        self._first_bases.clear()
