"""Key index: message lookups by ``UNIQ_KEY`` and ``KEYS``. Derived data, no checksum.

The file's byte layout is :mod:`tidemq.store.index_format`'s.

Writing is batched, because Python pays per object: :meth:`KeyIndex.put_keys` only queues
the record (a deque append), and the queue is applied in bulk -- every 1024 records or
16,384 keys, whichever comes first (a trace message has hundreds of keys), and before any
query, flush or truncation -- with the key hashes computed in one call
(:func:`~tidemq.store.index_keys.record_hashes`, equal to
:func:`tidemq.formats.hashing.index_hash` of ``topic#key``; a trace message's keys
hashed from their text, :class:`~tidemq.store.index_keys.KeyWords`) and the chains
linked in one call (:mod:`tidemq.store.index_links`:
compiled, or a sort over slots in numpy). Within one bulk write the
entries go first, then ``indexCount``, then the slots, so no slot ever points past
``indexCount``. Records reach the index in log order, so the start of the last record
queued is the index's recorded end: :meth:`KeyIndex.put_keys` skips a record at or below
it, which makes re-dispatch after a crash idempotent.

A producer batch stored record by record (an outer batch of one layout) hands its keys
over as :class:`KeyColumns` -- a column of same-width ASCII UNIQ_KEYs and the KEYS every
record shares -- and :meth:`KeyIndex.put_key_columns` queues the whole batch as one item;
the drain hashes the column in one call (:func:`column_hashes`). The entries
written are the ones :meth:`KeyIndex.put_keys` would write record by record, byte for
byte.

Lookups return *candidate* physical offsets: hash collisions and the one-second time
resolution mean the caller must read each record and compare the real key
(:meth:`tidemq.store.message_store.MessageStore.query_by_key` does).

Crash safety: the store flushes the index before each checkpoint, so everything below
the checkpoint's dispatched offset is durable. After an abnormal exit the store calls
:meth:`KeyIndex.truncate` with that offset -- entries beyond it may be torn -- and the
slot table of the cut file is rebuilt from its entries; recovery re-dispatches the rest.
"""

from __future__ import annotations

import itertools
import logging
import operator
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt

from tidemq.formats.hashing import index_hash
from tidemq.store.index_format import (
    COUNT_AT,
    ENTRY,
    ENTRY_DTYPE,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    INT_MAX,
    SLOT,
    SLOT_SIZE,
)
from tidemq.store.index_keys import (
    KeyColumns,
    column_hashes,
    index_hashes,
    record_hashes,
)
from tidemq.store.index_links import link_entries
from tidemq.store.layout import StoreLayout
from tidemq.store.mapped_file import MappedFile

__all__ = ["IndexFile", "KeyIndex", "index_file_size", "index_hashes"]

log = logging.getLogger(__name__)



IntArray = npt.NDArray[np.int64]

_TOPIC = operator.itemgetter(0)
_KEYS = operator.itemgetter(1)
_PHYS = operator.itemgetter(2)
_STAMP = operator.itemgetter(3)

#: A record queued by :meth:`KeyIndex.put_keys`: topic, keys, phys, store timestamp.
_Plain = tuple[str, Sequence[str], int, int]
#: Records queued by :meth:`KeyIndex.put_key_columns`: topic, keys, phys, store timestamp.
_Columns = tuple[str, KeyColumns, IntArray, int]
_Queued = _Plain | _Columns
#: Entry columns of queued records: hashes, phys, store times; keys and start per record.
_Entries = tuple[IntArray, IntArray, IntArray, IntArray, IntArray]


def _kind(item: _Queued) -> tuple[str, int | None, tuple[str, ...]] | None:
    """What :meth:`KeyIndex._drain` hashes together: ``None`` for a plain record, else a
    column item's topic, UNIQ_KEY width and shared keys."""
    keys = item[1]
    if type(keys) is not KeyColumns:
        return None
    return item[0], None if keys.uniq is None else keys.uniq.shape[1], keys.extra

def _key_count(item: _Queued) -> int:
    """The keys a queued item was counted for when queued."""
    keys = item[1]
    if type(keys) is KeyColumns:
        return len(cast("_Columns", item)[2]) * keys.per_record
    return len(keys)


#: Records queued before :meth:`KeyIndex.put_keys` applies them in bulk.
DRAIN_AT = 1024
#: Keys queued before they are applied in bulk, whatever the records: the memory a drain
#: takes follows the keys.
DRAIN_KEYS = 16384

def index_file_size(slot_num: int, max_index_num: int) -> int:
    return HEADER_SIZE + slot_num * SLOT_SIZE + max_index_num * ENTRY_SIZE


class IndexFile:
    """One index file: a hash-slot table and a chained entry array."""

    __slots__ = ("begin_phys", "begin_ts", "capacity", "count", "dirty", "end_phys", "end_ts",
                 "entries_at", "mf", "mm", "slot_count", "slot_num")

    def __init__(self, mf: MappedFile, slot_num: int, max_index_num: int) -> None:
        self.mf = mf
        self.mm = mf.mm
        self.slot_num = slot_num
        self.capacity = max_index_num
        self.entries_at = HEADER_SIZE + slot_num * SLOT_SIZE
        (self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slot_count,
         count) = HEADER.unpack_from(self.mm, 0)
        self.count = count if 1 <= count <= max_index_num else 1
        self.dirty = False

    @property
    def path(self) -> Path:
        return self.mf.path

    @property
    def entries(self) -> int:
        return self.count - 1

    # ------------------------------------------------------------------ writing

    def append(self, hashes: IntArray, phys: IntArray, store_ts: IntArray) -> None:
        """Write entries for ``hashes`` (records at ``phys``, in log order) and link them
        (:func:`~tidemq.store.index_links.link_entries`)."""
        n = len(hashes)
        first = self.count
        if first == 1:
            self.begin_ts, self.begin_phys = int(store_ts[0]), int(phys[0])
        lo, hi = int(store_ts[0]), int(store_ts[-1])
        if lo == hi and not np.count_nonzero(store_ts != lo):  # one store time (the usual)
            diff = np.full(n, min(max((lo - self.begin_ts) // 1000, 0), INT_MAX), np.int64)
        else:
            diff = store_ts - self.begin_ts
            diff //= 1000
            np.minimum(np.maximum(diff, 0, out=diff), INT_MAX, out=diff)
        self.slot_count += link_entries(
            self.mm, HEADER_SIZE, self.slot_num, self.entries_at, COUNT_AT, first,
            np.ascontiguousarray(hashes, np.int64), np.ascontiguousarray(phys, np.int64), diff)
        count = first + n
        self.count = count
        self.end_ts, self.end_phys = hi, int(phys[-1])
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys,
                          self.end_phys, self.slot_count, count)
        self.dirty = True

    def cut(self, keep: int) -> None:
        """Keep entries ``1 .. keep - 1`` only and rebuild the slot table from them."""
        ent = np.frombuffer(self.mm, dtype=ENTRY_DTYPE, count=keep, offset=self.entries_at)
        table = np.zeros(self.slot_num, dtype=">i4")
        if keep > 1:
            slots = ent["hash"][1:].astype(np.int64) % self.slot_num
            rev = slots[::-1]
            used, first_in_rev = np.unique(rev, return_index=True)
            table[used] = (keep - 1 - first_in_rev).astype(np.int32)
            last = ent[keep - 1]
            self.end_phys = int(last["phys"])
            self.end_ts = self.begin_ts + int(last["diff"]) * 1000 + 999
            self.slot_count = len(used)
        else:
            self.end_phys = self.end_ts = self.slot_count = 0
        self.mm[HEADER_SIZE : self.entries_at] = table.tobytes()
        self.count = keep
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys,
                          self.end_phys, self.slot_count, keep)
        self.dirty = True

    def first_entry_at_or_after(self, phys: int) -> int:
        """Number of the first entry whose record starts at or after ``phys``."""
        ent = np.frombuffer(self.mm, dtype=ENTRY_DTYPE, count=self.count,
                            offset=self.entries_at)
        return 1 + int(np.searchsorted(ent["phys"][1:].astype(np.int64), phys, side="left"))

    # ------------------------------------------------------------------ reading

    def lookup(self, h: int, begin: int, end: int, out: list[int], seen: set[int],
               max_num: int) -> None:
        """Append candidates for hash ``h`` stored within ``[begin, end]``, newest first."""
        mm = self.mm
        count = self.count
        (cur,) = SLOT.unpack_from(mm, HEADER_SIZE + (h % self.slot_num) * SLOT_SIZE)
        if cur <= 0 or cur >= count:
            return
        entries_at, begin_ts, unpack = self.entries_at, self.begin_ts, ENTRY.unpack_from
        while True:
            eh, phys, diff, prev = unpack(mm, entries_at + cur * ENTRY_SIZE)
            ts = begin_ts + diff * 1000  # the store time, rounded down to the second
            if ts + 999 < begin:
                return  # chains run newest to oldest: everything further is older
            if eh == h and ts <= end and phys not in seen:
                seen.add(phys)
                out.append(phys)
                if len(out) >= max_num:
                    return
            if prev <= 0 or prev >= cur:
                return
            cur = prev

    def overlaps(self, begin: int, end: int) -> bool:
        return self.count > 1 and self.begin_ts <= end and self.end_ts + 999 >= begin

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            self.mf.sync()

    def close(self) -> None:
        self.mf.close()

    def destroy(self) -> None:
        self.mf.destroy()


class KeyIndex:
    """The index files of a store; implements :class:`~tidemq.store.dispatch.IndexSink`.

    The dispatcher thread (recovery, before it starts) is the only caller of
    :meth:`put_keys`, which takes no lock: it appends to a deque. Applying the queue,
    queries, retention, flushes and truncation all hold :attr:`lock`, so the files are
    only ever touched by one thread at a time.
    """

    def __init__(self, layout: StoreLayout, *, max_hash_slot_num: int = 5_000_000,
                 max_index_num: int = 20_000_000) -> None:
        if max_hash_slot_num < 1 or max_index_num < 2:
            raise ValueError("maxHashSlotNum must be >= 1 and maxIndexNum >= 2")
        self.layout = layout
        self.slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        self.file_size = index_file_size(max_hash_slot_num, max_index_num)
        self.files: list[IndexFile] = []
        self.lock = threading.Lock()
        self._pending: deque[_Queued] = deque()
        # Column items (and their records) queued, written by the queueing thread only,
        # and drained, written under ``lock`` only: equal counts mean none is queued.
        self._columns_in = self._columns_out = 0
        self._column_rows_in = self._column_rows_out = 0
        # Keys queued and drained, kept the same way (an upper bound of the keys queued).
        self._keys_in = self._keys_out = 0
        self._last_phys = -1  # start of the last record queued (the recorded end)

    # ------------------------------------------------------------------ load and recovery

    def load(self) -> None:
        """Map the index files on disk; empty or mis-sized ones are deleted (derived data)."""
        for base, path in self.layout.segments_in(self.layout.index_dir):
            size = path.stat().st_size
            if size != self.file_size:
                log.warning("index file %s has %d bytes, expected %d for maxHashSlotNum=%d "
                            "and maxIndexNum=%d; deleting it (derived data, lookups of its "
                            "keys are lost)", path.name, size, self.file_size, self.slot_num,
                            self.max_index_num)
                path.unlink()
                continue
            f = IndexFile(MappedFile(path, base, size, create=False), self.slot_num,
                          self.max_index_num)
            if f.count <= 1:
                f.destroy()
                continue
            self.files.append(f)
        self._last_phys = self.files[-1].end_phys if self.files else -1

    def truncate(self, phys_end: int) -> int:
        """Drop every entry of a record starting at or after ``phys_end``; returns how many.

        Used after an abnormal exit (down to the checkpoint's dispatched offset, below which
        the index was flushed) and after recovery (down to the end of the valid log).
        """
        dropped = 0
        with self.lock:
            self._drain()
            while self.files:
                f = self.files[-1]
                if f.begin_phys >= phys_end:
                    dropped += f.entries
                    log.info("deleting index file %s beyond offset %d", f.path.name, phys_end)
                    self.files.pop().destroy()
                    continue
                if f.end_phys >= phys_end:
                    keep = f.first_entry_at_or_after(phys_end)
                    dropped += f.count - keep
                    f.cut(keep)
                break
            self._last_phys = self.files[-1].end_phys if self.files else -1
        return dropped

    # ------------------------------------------------------------------ writing

    def put_keys(self, topic: str, keys: Sequence[str], phys: int,
                 store_timestamp: int) -> None:
        """Index the record at ``phys`` under ``topic#key`` for each key (dispatcher thread).

        Queued and applied in bulk; a record at or below the recorded end is skipped.
        """
        if phys <= self._last_phys:
            return  # already indexed: re-dispatch after a crash
        self._last_phys = phys
        self._keys_in += len(keys)  # counted before queued, as the column items
        self._pending.append((topic, keys, phys, store_timestamp))
        if (len(self._pending) >= DRAIN_AT
                or self._keys_in - self._keys_out >= DRAIN_KEYS):
            with self.lock:
                self._drain()

    def put_key_rows(self, rows: Sequence[tuple[str, Sequence[str], int, int]]) -> None:
        """:meth:`put_keys` of each ``(topic, keys, phys, store_timestamp)`` of ``rows``
        (``phys`` increasing, ``keys`` not empty), queued together: a dispatch round's
        single records. Records at or below the recorded end are skipped."""
        if not rows:
            return
        if rows[0][2] <= self._last_phys:  # re-dispatch after a crash: each as put_keys
            for topic, keys, phys, ts in rows:
                self.put_keys(topic, keys, phys, ts)
            return
        self._last_phys = rows[-1][2]
        self._keys_in += sum(map(len, map(_KEYS, rows)))  # counted before queued
        pending = self._pending
        pending.extend(rows)
        if len(pending) >= DRAIN_AT or self._keys_in - self._keys_out >= DRAIN_KEYS:
            with self.lock:
                self._drain()

    def put_key_columns(self, topic: str, keys: KeyColumns, phys: Sequence[int],
                        store_timestamp: int) -> None:
        """:meth:`put_keys` for consecutive records at ``phys`` (increasing) keyed as
        ``keys`` says, all stored at ``store_timestamp``: the same entries, hashed column-wise
        (:func:`column_hashes`). Records at or below the recorded end are skipped."""
        n = len(phys)
        if n != len(keys):
            raise ValueError(f"{len(keys)} key rows for {n} records")
        if not n or not keys.per_record:
            return
        at = (np.arange(phys.start, phys.stop, phys.step, dtype=np.int64)
              if type(phys) is range else np.asarray(phys, dtype=np.int64))
        if int(at[0]) <= self._last_phys:  # re-dispatch after a crash
            skip = int(np.searchsorted(at, self._last_phys, side="right"))
            if skip == n:
                return
            at, keys = at[skip:], keys[skip:]
        self._last_phys = int(at[-1])
        # Counted before queued: a drain that takes the item has seen it counted.
        self._columns_in += 1
        self._column_rows_in += len(at)
        self._keys_in += len(at) * keys.per_record
        self._pending.append((topic, keys, at, store_timestamp))
        queued = (len(self._pending) + self._column_rows_in - self._column_rows_out
                  - self._columns_in + self._columns_out)  # records, roughly (no lock)
        if queued >= DRAIN_AT or self._keys_in - self._keys_out >= DRAIN_KEYS:
            with self.lock:
                self._drain()

    def _drain(self) -> None:
        """Apply every queued record (``lock`` held)."""
        pending = self._pending
        items: list[_Queued] = list(map(operator.call, itertools.repeat(pending.popleft,
                                                                        len(pending))))
        if not items:
            return
        if self._columns_in == self._columns_out:  # read after taking: none was taken
            self._keys_out += sum(map(len, map(_KEYS, items)))  # plain records: their keys
            self._write(*self._plain_entries(items))  # type: ignore[arg-type]
            return
        self._keys_out += sum(map(_key_count, items))
        parts: list[_Entries] = []
        for kind, group in itertools.groupby(items, _kind):
            if kind is None:
                parts.append(self._plain_entries(list(group)))  # type: ignore[arg-type]
                continue
            run = cast("list[_Columns]", list(group))
            self._columns_out += len(run)
            self._column_rows_out += sum(len(it[2]) for it in run)
            parts.append(self._column_entries(run))
        if len(parts) == 1:
            self._write(*parts[0])
        else:
            self._write(*(np.concatenate(column) for column in zip(*parts, strict=True)))

    @staticmethod
    def _plain_entries(items: list[_Plain]) -> _Entries:
        """Entry columns of records queued by :meth:`put_keys`: the keys of all of them
        hashed together, empty ones left out, each joined to its record's topic
        arithmetically (:func:`record_hashes`; the keys of a
        :class:`~tidemq.store.index_keys.KeyWords` straight from its text)."""
        prefixes = [f"{topic}#" for topic in map(_TOPIC, items)]
        hashes, counts = record_hashes(prefixes, list(map(_KEYS, items)))
        starts = np.fromiter(map(_PHYS, items), np.int64, len(items))
        ts = np.repeat(np.fromiter(map(_STAMP, items), np.int64, len(items)), counts)
        return hashes, np.repeat(starts, counts), ts, counts, starts

    @staticmethod
    def _column_entries(run: list[_Columns]) -> _Entries:
        """Entry columns of records queued by :meth:`put_key_columns`, for a run of items
        of one kind (:func:`_kind`): hashed as one set of columns."""
        topic, keys = run[0][0], run[0][1]
        if len(run) > 1:
            uniq = (None if keys.uniq is None
                    else np.concatenate([it[1].uniq for it in run]))
            at = np.concatenate([it[2] for it in run])
            keys = KeyColumns(uniq, keys.extra, len(at))
            ts = np.repeat(np.fromiter((it[3] for it in run), np.int64, len(run)),
                           [len(it[2]) for it in run])
        else:
            at, ts = run[0][2], np.full(len(run[0][2]), run[0][3], np.int64)
        k = keys.per_record
        counts = np.full(len(at), k, np.int64)
        if k == 1:
            return column_hashes(topic, keys), at, ts, counts, at
        return (column_hashes(topic, keys), np.repeat(at, k), np.repeat(ts, k), counts, at)

    def _write(self, hashes: IntArray, phys: IntArray, ts: IntArray, counts: IntArray,
               starts: IntArray) -> None:
        """Write entries (``hashes``, ``phys``, ``ts``) of records with ``counts`` keys
        each, starting at ``starts``; a record's entries never span two files."""
        n_records = len(counts)
        ends = np.cumsum(counts)  # entry index just past each record
        done, pos = 0, 0  # records, entries written
        while done < n_records:
            f = self.files[-1] if self.files else None
            room = f.capacity - f.count if f is not None else 0
            fit = int(np.searchsorted(ends[done:], pos + room, side="right"))
            if fit == 0:
                if f is None or f.count > 1:
                    self._roll(int(phys[pos]) if pos < len(phys) else int(starts[done]))
                    continue
                log.warning("record at %d has %d keys, more than an index file holds; "
                            "indexing the first %d", int(starts[done]), int(counts[done]),
                            room)
                stop, next_pos = pos + room, int(ends[done])
                fit = 1
            else:
                stop = next_pos = int(ends[done + fit - 1])
            if stop > pos:
                assert f is not None
                f.append(hashes[pos:stop], phys[pos:stop], ts[pos:stop])
            done += fit
            pos = next_pos

    def _roll(self, phys: int) -> IndexFile:
        """Start a new file named for the record at ``phys`` (``lock`` held)."""
        self.layout.index_dir.mkdir(parents=True, exist_ok=True)
        path = self.layout.index_file(phys)
        path.unlink(missing_ok=True)  # a leftover of a file truncated away
        mf = MappedFile(path, phys, self.file_size, create=True, preallocate=False)
        f = IndexFile(mf, self.slot_num, self.max_index_num)
        self.files.append(f)
        return f

    def drain(self) -> None:
        """Apply queued records now (queries, flushes and truncation do this themselves)."""
        with self.lock:
            self._drain()

    # ------------------------------------------------------------------ reading

    def query(self, topic: str, key: str, max_num: int, begin_ts: int = 0,
              end_ts: int = 2**63 - 1) -> list[int]:
        """Candidate physical offsets of records with ``key``, newest first, no duplicates."""
        out: list[int] = []
        if max_num <= 0:
            return out
        h = index_hash(f"{topic}#{key}")
        seen: set[int] = set()
        with self.lock:
            self._drain()
            for f in reversed(self.files):
                if not f.overlaps(begin_ts, end_ts):
                    if f.count > 1 and f.end_ts + 999 < begin_ts:
                        break  # older files are older still
                    continue
                f.lookup(h, begin_ts, end_ts, out, seen, max_num)
                if len(out) >= max_num:
                    break
        return out

    @property
    def end_phys_offset(self) -> int:
        """Start of the last record indexed, or -1 for an empty index."""
        return self._last_phys

    @property
    def entry_count(self) -> int:
        with self.lock:
            self._drain()
            return sum(f.entries for f in self.files)

    # ------------------------------------------------------------------ retention

    def delete_below(self, commitlog_min: int) -> int:
        """Delete the oldest files whose last record starts below ``commitlog_min``.

        Never the last file, and never past a file that is kept (no holes). Returns how
        many files were deleted.
        """
        deleted = 0
        with self.lock:
            self._drain()
            while len(self.files) > 1 and self.files[0].end_phys < commitlog_min:
                f = self.files.pop(0)
                log.info("deleting index file %s (ends at %d, commit log starts at %d)",
                         f.path.name, f.end_phys, commitlog_min)
                f.destroy()
                deleted += 1
        return deleted

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> int:
        """fdatasync files with new entries; returns the store time of the last entry covered."""
        with self.lock:
            self._drain()
            ts = self.files[-1].end_ts if self.files else 0
            for f in self.files:
                f.flush()
        return ts

    def close(self) -> None:
        with self.lock:
            self._drain()
            for f in self.files:
                f.flush()
                f.close()
            self.files.clear()
