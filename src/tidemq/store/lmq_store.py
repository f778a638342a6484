"""The Light Message Queue store (RIP-28): millions of tiny queues in one RocksDB.

A message that names LMQs in ``INNER_MULTI_DISPATCH`` is written once to the commit log;
dispatch adds one entry per named LMQ here (queue id 0). One database holds everything,
so a million queues cost keys, not file sets. Derived data: the commit log is the
write-ahead log, so RocksDB's own WAL is off and every write batch carries the
dispatched-up-to checkpoint; after a crash the store re-dispatches from it.

Keys and values (big-endian), in one keyspace separated by a one-byte tag:

=====================================  =========================================
key                                    value
=====================================  =========================================
``b"E" name 0x00 offset(8)``           phys(8) size(4) tags(8) store_ts(8)
``b"M" name``                          next offset(8) min offset(8)
``b"O" group 0x00 name``               committed consumer offset(8)
``b"C"``                               commit-log offset dispatched up to(8)
=====================================  =========================================

LMQ names never contain NUL (the broker validates them), so ``name 0x00`` cannot be a
prefix of another queue's keys.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, cast

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

__all__ = ["LMQ_PREFIX", "LmqEntry", "LmqStore"]

log = logging.getLogger(__name__)

LMQ_PREFIX = "%LMQ%"
_ENTRY = struct.Struct(">qiqq")
_META = struct.Struct(">qq")
_Q = struct.Struct(">q")
_CHECKPOINT_KEY = b"C"


class LmqEntry(NamedTuple):
    name: str
    offset: int
    phys: int
    size: int
    tags: int
    store_ts: int


def _entry_key(name: bytes, offset: int) -> bytes:
    return b"E" + name + b"\x00" + _Q.pack(offset)


class LmqStore:
    """The RocksDB-backed consume queues of every LMQ on this broker."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_max_background_jobs(2)
        self.db = Rdict(str(path), opts)
        wo = WriteOptions()
        wo.disable_wal = True  # type: ignore[method-assign,assignment]  # a property at runtime
        self.db.set_write_options(wo)
        self._meta: dict[str, tuple[int, int]] = {}  # name -> (next offset, min offset)
        self._lock = threading.Lock()
        raw = cast(bytes | None, self.db.get(_CHECKPOINT_KEY))
        self.dispatched: int = _Q.unpack(raw)[0] if raw is not None else 0
        self.entries_written = 0
        self._flushed_entries = 0
        self._stats: tuple[float, int, int] | None = None

    # ------------------------------------------------------------------ metadata

    def _meta_of(self, name: str) -> tuple[int, int]:
        meta = self._meta.get(name)
        if meta is None:
            raw = cast(bytes | None, self.db.get(b"M" + name.encode()))
            meta = _META.unpack(raw) if raw is not None else (0, 0)
            self._meta[name] = meta
        return meta

    def max_offset(self, name: str) -> int:
        return self._meta_of(name)[0]

    def min_offset(self, name: str) -> int:
        return self._meta_of(name)[1]

    def exists(self, name: str) -> bool:
        return self._meta_of(name)[0] > 0

    # ------------------------------------------------------------------ writing

    def write(self, entries: Sequence[LmqEntry], dispatched_end: int) -> dict[str, int]:
        """Write ``entries`` and the checkpoint in one batch; returns new max offsets.

        Idempotent: an entry at or below a queue's known max is rewritten with the same
        value (re-dispatch after a crash), never moving the max backwards.
        """
        wb = WriteBatch(raw_mode=True)
        touched: dict[str, int] = {}
        with self._lock:
            for e in entries:
                wb.put(_entry_key(e.name.encode(), e.offset),
                       _ENTRY.pack(e.phys, e.size, e.tags, e.store_ts))
                nxt, lo = self._meta_of(e.name)
                if e.offset + 1 > nxt:
                    if nxt == 0 and e.offset > 0:
                        lo = e.offset  # a queue whose start aged out before a rebuild
                    nxt = e.offset + 1
                    self._meta[e.name] = (nxt, lo)
                touched[e.name] = nxt
            for name, nxt in touched.items():
                wb.put(b"M" + name.encode(), _META.pack(nxt, self._meta[name][1]))
            self.dispatched = max(self.dispatched, dispatched_end)
            wb.put(_CHECKPOINT_KEY, _Q.pack(self.dispatched))
            self.db.write(wb)
            self.entries_written += len(entries)
        return touched

    def write_prepared(self, wb: WriteBatch, last: dict[str, int], dispatched_end: int,
                       entries: int) -> dict[str, int]:
        """Apply a batch of entries built elsewhere (the concurrent dispatcher), adding the
        queue metadata and the checkpoint; ``last`` maps each queue to its last offset in
        the batch. Returns the new max offsets."""
        touched: dict[str, int] = {}
        with self._lock:
            for name, offset in last.items():
                nxt, lo = self._meta_of(name)
                if offset + 1 > nxt:
                    if nxt == 0 and offset > 0:
                        lo = offset
                    nxt = offset + 1
                    self._meta[name] = (nxt, lo)
                touched[name] = nxt
                wb.put(b"M" + name.encode(), _META.pack(nxt, lo))
            self.dispatched = max(self.dispatched, dispatched_end)
            wb.put(_CHECKPOINT_KEY, _Q.pack(self.dispatched))
            self.db.write(wb)
            self.entries_written += entries
        return touched

    def flush(self) -> None:
        """Persist the memtable (the WAL is off): bounds re-dispatch after a crash."""
        self.db.flush()
        self._flushed_entries = self.entries_written

    def checkpoint(self, dispatched: int) -> None:
        """Record that every LMQ entry of records below ``dispatched`` is written, then
        persist; called with the dispatcher's position, after its writes."""
        with self._lock:
            if dispatched > self.dispatched:
                self.dispatched = dispatched
                self.db.put(_CHECKPOINT_KEY, _Q.pack(dispatched))
        if self.entries_written != self._flushed_entries:
            self.flush()

    # ------------------------------------------------------------------ reading

    def entries(self, name: str, offset: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` ``(phys, size, tags)`` from ``offset`` (a multi-get)."""
        nxt, lo = self._meta_of(name)
        start = max(offset, lo)
        end = min(nxt, start + count)
        if start >= end:
            return []
        key = name.encode()
        values = cast(list[bytes | None], self.db.get([_entry_key(key, o)
                                                       for o in range(start, end)]))
        out = []
        for v in values:
            if v is None:
                break
            phys, size, tags, _ts = _ENTRY.unpack(v)
            out.append((phys, size, tags))
        return out

    def store_time_at(self, name: str, offset: int) -> int:
        raw = cast(bytes | None, self.db.get(_entry_key(name.encode(), offset)))
        return int(_ENTRY.unpack(raw)[3]) if raw is not None else -1

    def offset_by_time(self, name: str, timestamp: int) -> int:
        lo, hi = self.min_offset(name), self.max_offset(name)
        while lo < hi:
            mid = (lo + hi) // 2
            ts = self.store_time_at(name, mid)
            if 0 <= ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # ------------------------------------------------------------------ consumer offsets

    def commit_offset(self, group: str, name: str, offset: int) -> None:
        self.db.put(b"O" + group.encode() + b"\x00" + name.encode(), _Q.pack(offset))

    def committed_offset(self, group: str, name: str) -> int | None:
        raw = cast(bytes | None, self.db.get(b"O" + group.encode() + b"\x00" + name.encode()))
        return int(_Q.unpack(raw)[0]) if raw is not None else None

    # ------------------------------------------------------------------ admin and retention

    def _keys(self, prefix: bytes) -> Iterator[bytes]:
        """Keys starting with ``prefix``, in order."""
        for k in self.db.keys(from_key=prefix):
            key = cast(bytes, k)
            if not key.startswith(prefix):
                return
            yield key

    def _items(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for k, v in self.db.items(from_key=prefix):
            key = cast(bytes, k)
            if not key.startswith(prefix):
                return
            yield key, cast(bytes, v)

    def delete_queue(self, name: str) -> bool:
        """Drop an LMQ with its entries and every group's offset for it."""
        key = name.encode()
        existed = self.exists(name)
        with self._lock:
            self.db.delete_range(b"E" + key + b"\x00", b"E" + key + b"\x01")
            self.db.delete(b"M" + key)
            self._meta.pop(name, None)
            suffix = b"\x00" + key
            stale = [k for k in self._keys(b"O") if k.endswith(suffix)]
            for k in stale:
                self.db.delete(k)
        return existed

    def queue_names(self) -> Iterable[str]:
        for k in self._keys(b"M"):
            yield k[1:].decode()

    def stats(self) -> tuple[int, int]:
        """(number of LMQs, total entries ever dispatched into them still readable)."""
        queues = entries = 0
        for _k, raw in self._items(b"M"):
            nxt, lo = _META.unpack(raw)
            queues += 1
            entries += nxt - lo
        return queues, entries

    def cached_stats(self, max_age: float = 30.0) -> tuple[int, int]:
        """:meth:`stats`, recomputed at most every ``max_age`` seconds (it walks every
        queue's metadata, a second per million queues)."""
        now = time.monotonic()
        if self._stats is None or now - self._stats[0] > max_age:
            self._stats = (now, *self.stats())
        return self._stats[1], self._stats[2]

    def expire_below(self, commitlog_min: int, budget: int = 100_000) -> int:
        """Drop entries pointing below the commit-log minimum; raise queue minimums.

        Walks entries in key order and stops after ``budget`` keys, so a retention pass
        over millions of queues is spread over several housekeeping rounds.
        """
        removed = 0
        wb = WriteBatch(raw_mode=True)
        new_min: dict[str, int] = {}
        for seen, (k, v) in enumerate(self._items(b"E")):
            if seen >= budget:
                break
            phys = _ENTRY.unpack(v)[0]
            if phys < commitlog_min:
                wb.delete(k)
                removed += 1
                sep = k.rindex(b"\x00", 0, len(k) - 8)
                name = k[1:sep].decode()
                offset = _Q.unpack(k[-8:])[0]
                new_min[name] = max(new_min.get(name, 0), offset + 1)
        with self._lock:
            for name, first_alive in new_min.items():
                nxt, old_lo = self._meta_of(name)
                lo = max(old_lo, min(first_alive, nxt))
                self._meta[name] = (nxt, lo)
                wb.put(b"M" + name.encode(), _META.pack(nxt, lo))
            if removed:
                self.db.write(wb)
        return removed

    def close(self) -> None:
        try:
            self.db.flush()
        finally:
            self.db.close()
