"""The Light Message Queue store (RIP-28): millions of tiny queues in one RocksDB.

A message that names LMQs in ``INNER_MULTI_DISPATCH`` is written once to the commit log;
dispatch adds one entry per named LMQ here (queue id 0). One database holds everything,
so a million queues cost keys, not file sets.

Keys and values (big-endian), in one keyspace separated by a one-byte tag:

=====================================  ==========================================  =======
key                                    value                                       kind
=====================================  ==========================================  =======
``b"E" name 0x00 offset(8)``           a run: n >= 1 entries, for ``offset`` ..    derived
                                       ``offset + n - 1``, each phys(8) size(4)
                                       tags(8) store_ts(8)
``b"M" name``                          next offset(8) min offset(8) [floor(8)]     derived
``b"C"``                               commit-log offset dispatched up to(8)       derived
``b"O" name 0x00 group``               committed consumer offset(8)                truth
``b"D" name``                          floor(8): tombstone of a deleted LMQ        truth
=====================================  ==========================================  =======

An ``E`` value holds a *run* of a queue's consecutive entries (28 bytes each) under the
offset of its first: the serial dispatcher writes runs of one entry, the concurrent one
a run per queue and dispatch round (:mod:`tidemq.store.lmq_fanout`), so a hot queue
costs one key per round instead of one per entry. Runs never overlap: dispatch skips
records below the checkpoint ``C`` (they are already written), and new entries start at
the queue's max offset. Readers find the run holding an offset with a reverse seek.

A queue's *max offset* is the end of its last run, found with one reverse seek when the
queue is not cached (the misses of a call are read together: one multi-get of their
``M`` keys and one iterator for the seeks), so dispatch writes no metadata. ``M`` is
written only when something else must be remembered: a minimum above 0 (expiry, or a
queue first seen past 0), a tombstone floor, or a max offset no ``E`` key shows any
more (every entry expired, a truncation); its ``next offset`` is then a lower bound of
the max offset, which is ``max(next offset, end of the last run)``. A queue with neither
key does not exist; one with ``E`` keys and no ``M`` starts at 0. Walks over the queues
(counting, expiry) step through the ``E`` keys queue by queue, jumping to a long
queue's end.

*Derived* keys are rebuilt from the commit log: RocksDB's WAL is off for them and every
dispatch write batch carries the dispatched-up-to checkpoint ``C``; after a crash the
store re-dispatches from it. Memtables flush in order, so what survives a crash is always
a prefix of the write batches, consistent with its ``C``.

*Truth* keys cannot be rebuilt, so they (and the deletion of a queue) are written with
the WAL on: consumer offsets, and tombstones. Deleting an LMQ drops its entries and
offsets and records a *floor* -- the commit-log end at the moment of deletion -- in ``M``
(the optional third field) and in ``D``. Dispatch ignores entries of that LMQ whose
record lies below the floor, so neither records appended before the deletion but
dispatched after it, nor a crash-recovery re-dispatch from a checkpoint older than the
deletion, resurrect the old queue. A re-created LMQ starts again at offset 0. Once the
commit log's minimum passes a floor no such record exists any more and retention
(:meth:`LmqStore.expire_below`) drops the tombstone; ``D`` keys are the index that finds
them without walking every queue.

LMQ names never contain NUL (the broker validates them), so ``name 0x00`` cannot be a
prefix of another queue's keys.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain, compress, filterfalse, islice, repeat
from operator import add, eq, gt, is_, is_not, itemgetter, not_, or_, setitem, sub
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from tidemq.store.lmq_keys import sorted_entry_keys
from tidemq.store.lmq_table import LmqTable
from tidemq.store.lookups import get_many
from tidemq.store.threads import NamedThread

__all__ = ["ENTRY_DTYPE", "LMQ_PREFIX", "FanOut", "LmqEntry", "LmqStore", "entry_prefix",
           "grouped_batch", "split_entry_key"]

log = logging.getLogger(__name__)

LMQ_PREFIX = "%LMQ%"
_ENTRY = struct.Struct(">qiqq")
_ENTRY_SIZE = _ENTRY.size
#: One entry of an ``E`` run as a numpy row (the layout of :data:`_ENTRY`).
ENTRY_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8"),
                        ("store_ts", ">i8")])
_META = struct.Struct(">qq")
_META_FLOOR = struct.Struct(">qqq")
_Q = struct.Struct(">q")
_CHECKPOINT_KEY = b"C"
_LAST = b"\x00" + b"\xff" * 8  # after every E key of a queue (offsets are >= 0)
#: A walk over E keys jumps to a queue's last entry after this many of its keys.
_RUN = 16
#: Queues whose metadata is cached, by default (see :class:`LmqStore`).
CACHED_QUEUES = 200_000
#: Queues the :class:`~tidemq.store.lmq_table.LmqTable` knows besides, by default.
KNOWN_QUEUES = 2_000_000
#: A checkpoint flushes the memtable once this many entries were written since the last
#: flush, or once the last flush is :data:`FLUSH_EVERY` seconds old (see
#: :meth:`LmqStore.checkpoint`).
FLUSH_ENTRIES = 500_000
FLUSH_EVERY = 60.0
#: Queues of a start's walk taken into the cache and the table at a time, under the
#: lock (see :meth:`LmqStore.warm`). Larger steps keep more rows alive at once, which
#: the garbage collector moves to its older generations and walks again.
_WARM_STEP = 512
_first, _second = itemgetter(0), itemgetter(1)

#: ``[next offset, min offset, floor]``; floor 0 means "never deleted". A list, one per
#: queue, so that dispatch advances a cached queue in place
#: (:meth:`LmqStore._advance_known`).
Meta = list[int]
#: One record's fan-out: (LMQ names, offsets in them, phys, size, tags code, store time).
FanOut = tuple[Sequence[str], Sequence[int], int, int, int, int]


class LmqEntry(NamedTuple):
    name: str
    offset: int
    phys: int
    size: int
    tags: int
    store_ts: int


def entry_prefix(name: bytes) -> bytes:
    """What every ``E`` key of the queue ``name`` (UTF-8) starts with, and no other."""
    return b"E" + name + b"\x00"


def _entry_key(name: bytes, offset: int) -> bytes:
    return entry_prefix(name) + _Q.pack(offset)


def _offset_key(name: str, group: str) -> bytes:
    return b"O" + name.encode() + b"\x00" + group.encode()


def grouped_batch(groups: Mapping[str, list[tuple[int, bytes]]]) -> WriteBatch:
    """A write batch of the entries ``groups`` maps each queue to (``(offset, value)`` in
    offset order), queue after queue in key order.

    RocksDB inserts a batch into the memtable's skiplist one key at a time, starting each
    search from where the last insert landed: keys in order land next to each other. In
    the dispatcher's log order every entry jumps to another queue, and the inserts cost
    several times more a key (``tidemq bench dispatch``). Grouping on the way in and
    sorting only the queue names costs less than sorting the keys. Names
    sort as their UTF-8 bytes do, and a name sorts before every longer one it starts,
    as ``E name 0x00`` does."""
    wb = WriteBatch(raw_mode=True)
    put = wb.put
    pack_offset = _Q.pack
    for name in sorted(groups):
        prefix = entry_prefix(name.encode())
        for offset, value in groups[name]:
            put(prefix + pack_offset(offset), value)
    return wb


def _pack_meta(nxt: int, lo: int, floor: int) -> bytes:
    return _META_FLOOR.pack(nxt, lo, floor) if floor else _META.pack(nxt, lo)


def _unpack_meta(raw: bytes) -> Meta:
    if len(raw) == _META_FLOOR.size:
        nxt, lo, floor = _META_FLOOR.unpack(raw)
        return [nxt, lo, floor]
    nxt, lo = _META.unpack(raw)
    return [nxt, lo, 0]


class LmqStore:
    """The RocksDB-backed consume queues of every LMQ on this broker.

    The metadata of the queues in use is cached, at most ``cached_queues`` of them: past
    that, the longest cached are dropped (a quarter of them at a time) into the
    :class:`~tidemq.store.lmq_table.LmqTable` of up to ``known_queues`` more, and taken
    from there when used again; a queue in neither is read from the database. Only what
    is written is cached, so a queue taken again is the same. Queues :attr:`pinned` are
    kept: those the appender holds offsets for, which dispatch is about to write (were
    they dropped while dispatch lags, it would take each again).

    A queue leaves the cache through the table (a trim writes it there before it
    leaves), by a reader taking back a fill that a change overlapped (the table is then
    as the change left it), or with everything else (:meth:`drop_derived`); and every
    writer takes a queue into the cache before it changes it, but for a dispatch round,
    which advances the plain queues the table holds in the table and, once the store
    is :attr:`complete`, adds new ones there (:meth:`_advance_known`). So a queue not
    cached is as the table says, if the table has it: the appender's lookups read it
    there without taking it into the cache (:meth:`max_offsets`)."""

    def __init__(self, path: Path, cached_queues: int = CACHED_QUEUES,
                 known_queues: int = KNOWN_QUEUES) -> None:
        if cached_queues < 1:
            raise ValueError(f"cached_queues must be at least 1, got {cached_queues}")
        self._table = LmqTable(known_queues)
        path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_max_background_jobs(2)
        self.db = Rdict(str(path), opts)
        wo = WriteOptions()
        wo.disable_wal = True  # type: ignore[method-assign,assignment]  # a property at runtime
        self.db.set_write_options(wo)
        self._wal = WriteOptions()  # for the keys the commit log cannot rebuild
        self._meta: dict[str, Meta] = {}
        self.cached_queues = cached_queues
        #: The queues that must stay cached (set by the store: see the class docstring).
        self.pinned: Callable[[], Iterable[Container[str]]] = tuple
        #: The cache size past which the next trim runs (above ``cached_queues`` while
        #: pinned queues fill it).
        self._trim_above = cached_queues
        #: Odd while a writer other than dispatch changes cached metadata or drops it
        #: (retention, deletion, a cut, a trim), one more when it is done (see _metas).
        self._changes = 0
        #: Whether every queue the database holds is cached or in the table (a warm-up
        #: saw them all and none was dropped from both since): a miss in both is then a
        #: queue that does not exist.
        self.complete = False
        #: The floors of the tombstones (``D``; also in the queues' ``M``), so dispatch
        #: checks only the queues that have one.
        self._floors: dict[str, int] = {}
        #: Deletions so far: a batch filtered by floors read at an older generation may
        #: hold entries of a queue deleted since (see :meth:`write_prepared`).
        self.generation = 0
        self._lock = threading.Lock()
        #: One more at each :meth:`drop_derived` and when the table overflows: a walk
        #: of :meth:`warm` begun before it stops.
        self._epoch = 0
        #: Trims so far: a walk of :meth:`warm` leaves out the queues they put in the
        #: table once there was one.
        self._trims = 0
        self._closing = False
        #: Set when a :meth:`warm` ends (at once: a store not warmed answers each miss
        #: from the database).
        self.warmed = threading.Event()
        self._warm_thread: threading.Thread | None = None
        raw = cast(bytes | None, self.db.get(_CHECKPOINT_KEY))
        #: Every entry of the records below it is written, and a reader of the metadata
        #: (the cache or the database) sees it: the appender forgets the next offsets it
        #: handed out below it (:mod:`tidemq.store.lmq_next`).
        self.dispatched: int = _Q.unpack(raw)[0] if raw is not None else 0
        self.entries_written = 0
        self._flushed_entries = 0
        self._flushed_at = time.monotonic()
        #: When a checkpoint flushes the memtable (see :meth:`checkpoint`).
        self.flush_entries = FLUSH_ENTRIES
        self.flush_every = FLUSH_EVERY
        self._stats: tuple[float, int, int] | None = None
        #: :attr:`entries_written` when the walk behind :attr:`_stats` began: a deletion
        #: adjusts the figures exactly only while no entry was written since.
        self._stats_written = -1
        self._stats_thread: threading.Thread | None = None
        self._stats_lock = threading.Lock()
        #: Resumable retention sweep: the last queue name visited, and the commit-log
        #: minimum the last complete sweep was done for.
        self._sweep_after: bytes | None = None
        self._swept_min = 0
        self._floors.update(self.tombstones())

    # ------------------------------------------------------------------ metadata

    def _meta_of(self, name: str) -> Meta:
        """The metadata of ``name``, read from the database on a miss. Called with the
        lock held (writers); readers use :meth:`_read_meta`."""
        meta = self._meta.get(name)
        if meta is None:
            meta = self._meta[name] = self._load_metas([name])[0]
        return meta

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """The lock, for a writer other than dispatch that changes or drops cached
        metadata: :attr:`_changes` is odd meanwhile (see :meth:`_metas`)."""
        with self._lock:
            self._changes += 1
            try:
                yield
            finally:
                self._changes += 1

    def _cache_missing(self, names: list[str]) -> None:
        """Cache the metadata of those of ``names`` not cached, read together (one
        multi-get, one iterator). Called with the lock held (a writer's round)."""
        cache = self._meta
        todo = [name for name in names if name not in cache]
        if todo:
            cache.update(zip(todo, self._load_metas(todo), strict=True))

    def _read_meta(self, name: str) -> Meta:
        """:meth:`_meta_of` for readers, who do not hold the lock."""
        meta = self._meta.get(name)
        return meta if meta is not None else self._metas([name])[0]

    def max_offsets(self, names: Iterable[str]) -> dict[str, int]:
        """The max offsets of ``names``: the appender's lookup of the LMQs a put names
        that it holds no offset for -- *settled* queues, whose records are all
        dispatched. An uncached queue is answered by the table as it is (no dispatch
        round changes a settled queue, and one that leaves the cache enters the table
        first), without taking it into the cache; while the store is :attr:`complete`
        a queue in neither is new. The others are read together (:meth:`_metas`)."""
        names = list(names)
        metas: list[Meta | None] = get_many(self._meta, names)
        if None not in metas:  # the usual call: every queue cached, no Python step each
            return dict(zip(names, map(_first, cast("list[Meta]", metas)), strict=True))
        out = dict(zip(compress(names, metas), map(_first, filter(None, metas)), strict=True))
        missing = list(dict.fromkeys(compress(names, map(is_, metas, repeat(None)))))
        known = self._table.nexts(missing)
        if None in known:
            if self.complete:
                known = [0 if nxt is None else nxt for nxt in known]
            else:
                found = list(map(is_not, known, repeat(None)))
                unknown = list(compress(missing, map(not_, found)))
                out.update(zip(unknown, map(_first, self._metas(unknown, settled=True)),
                               strict=True))
                missing = list(compress(missing, found))
                known = list(compress(known, found))
        out.update(zip(missing, cast("list[int]", known), strict=True))
        return out

    def _metas(self, names: list[str], *, settled: bool = False) -> list[Meta]:
        """The metadata of the uncached queues ``names`` for a reader.

        Filled into the cache under the lock, so that a fill never interleaves with a
        writer's publication or a trim: a value read before a write, cached after the
        write's own value was trimmed, would be stale. When a writer holds the lock (a
        dispatch round being written), the metadata is read without it: it is what the
        database holds at that moment, which is exact for every queue the round does
        not touch and a moment old for the others, as a read just before the round
        would be. Those reads are cached only for *settled* queues (``settled``: the
        appender's, whose records are all dispatched), which no dispatch round
        publishes meanwhile; the other writers -- retention, deletion, a cut, and
        trims -- count :attr:`_changes` around what they do, and a fill that one of
        them overlapped takes its values out again (a miss reads them afresh)."""
        lock = self._lock
        if not lock.acquire(blocking=False):
            changes = self._changes
            metas = self._load_metas(names)
            if settled and not changes & 1:
                cache = self._meta
                deque(map(cache.setdefault, names, metas), maxlen=0)
                if self._changes != changes:
                    for name, meta in zip(names, metas, strict=True):
                        if cache.get(name) is meta:
                            cache.pop(name, None)
            return metas
        try:
            self._trim()  # first: the queues asked for are not pinned yet
            self._cache_missing(names)
            metas = list(map(self._meta_of, names))  # read again if one left meanwhile
        finally:
            lock.release()
        return metas

    def _load_metas(self, names: Sequence[str]) -> list[Meta]:
        """The metadata of the uncached ``names``: from the table, else from the
        database: ``M`` if any (one multi-get for all), and the max offset from each
        queue's last ``E`` key (one reverse seek each, on one iterator: making one costs
        about as much as a seek). A queue with neither is new: ``(0, 0, 0)`` -- known
        without a read while the store is :attr:`complete` (a name it lacks was never
        used; a writer publishing a new queue meanwhile is one the appender does not ask
        about)."""
        known = list(map(self._table.get, names))
        if None not in known:
            return cast("list[Meta]", known)
        if self.complete:
            return [[0, 0, 0] if meta is None else meta for meta in known]
        missing = [name for name, meta in zip(names, known, strict=True) if meta is None]
        read = iter(self._read_metas(missing))
        return [next(read) if meta is None else meta for meta in known]

    def _read_metas(self, names: Sequence[str]) -> list[Meta]:
        """:meth:`_load_metas`' reads from the database."""
        keys = [name.encode() for name in names]
        get = self.db.get
        raws = cast(list[bytes | None], get([b"M" + key for key in keys]) if len(keys) > 1
                    else [get(b"M" + keys[0])])  # a multi-get of one costs more than a get
        unpack = _Q.unpack_from
        it = self.db.iter()
        out: list[Meta] = []
        for key, raw in zip(keys, raws, strict=True):
            nxt, lo, floor = (0, 0, 0) if raw is None else _unpack_meta(raw)
            base = entry_prefix(key)
            it.seek_for_prev(base + _LAST)
            if it.valid():
                k = cast(bytes, it.key())
                if len(k) == len(base) + 8 and k.startswith(base):
                    end = unpack(k, len(base))[0] + len(cast(bytes, it.value())) // _ENTRY_SIZE
                    nxt = max(nxt, end)
            out.append([nxt, lo, floor])
        return out

    def warm(self) -> int:
        """Fill the cache with the queues' metadata, up to :attr:`cached_queues` queues
        in name order, and the table with the next ones up to its limit, in one walk
        over their keys; returns how many queues it took. A walk step costs a fraction
        of the seek a queue's first use would cost. Each queue's metadata is what
        :meth:`_read_metas` reads: ``M`` if any, merged with the end of its last run.
        A walk that reaches the last queue leaves the store :attr:`complete`.

        Safe while the store serves (:meth:`warm_in_background`): the walk is read
        without the lock and taken in steps of :data:`_WARM_STEP` queues under it,
        leaving out the queues cached or in the table -- every writer caches a queue
        before it changes it or changes it where the table holds it (a dispatch round:
        queues the walk passed or a trim put there, new ones only once the walk has
        ended), and it leaves the cache only into the table, so what the store holds
        of those is newer than the walk. Until the walk ends a miss reads
        the database. A walk stops when :meth:`drop_derived` or :meth:`close` is
        called, or when a queue the cache dropped did not fit the table (the table
        is full, and the store can never be complete)."""
        try:
            return self._warm()
        finally:
            self.warmed.set()

    def warm_in_background(self) -> threading.Thread:
        """:meth:`warm` on a thread of its own, so that a start serves at once;
        :attr:`warmed` is set when it ends."""
        thread = self._warm_thread = NamedThread(target=self._warm_logged,
                                                 name="tidemq-lmq-warm", daemon=True)
        thread.start()
        return thread

    def _warm_logged(self) -> None:
        started = time.monotonic()
        try:
            taken = self.warm()
        except Exception:  # the database closing under it: misses read it meanwhile
            log.exception("warming the LMQ cache failed")
            return
        log.info("LMQ cache warmed: %d queues in %.1f s (cached %d, table %d, complete %s)",
                 taken, time.monotonic() - started, self.cached(), self.known(),
                 self.complete)

    def _warm(self) -> int:
        cache, table, limit = self._meta, self._table, self.cached_queues
        epoch = self._epoch
        trims = self._trims if not table else None  # None: the table holds others already
        walk = self._walk_metas()
        taken = 0
        while True:
            rows = list(islice(walk, _WARM_STEP))
            last = len(rows) < _WARM_STEP
            with self._lock:
                if self._closing or self._epoch != epoch:
                    return taken
                if self._trims != trims:  # the table holds more than this walk's rows
                    rows = [row for row in rows if row[0] not in table]
                room = max(limit - len(cache), 0)
                head, rest = rows[:room], rows[room:]
                before = len(cache)
                # setdefault: what the cache holds is newer than the walk
                deque(map(cache.setdefault, map(_first, head), map(_second, head)), maxlen=0)
                taken += len(cache) - before
                if rest and not cache.keys().isdisjoint(list(map(_first, rest))):
                    rest = [row for row in rest if row[0] not in cache]
                added, seen = table.fill(rest)
                taken += added
                if not seen:
                    return taken
                if last:
                    self.complete = True
                    return taken

    def _walk_metas(self) -> Iterator[tuple[str, Meta]]:
        """Every queue's metadata in name order, from one walk over the ``E`` and
        ``M`` keys."""
        metas = self._items(b"M")
        pending = next(metas, None)
        for name, _first, last, _value in self._spans():
            while pending is not None and pending[0][1:] < name:  # M and no entries
                yield pending[0][1:].decode(), _unpack_meta(pending[1])
                pending = next(metas, None)
            nxt, lo, floor = last + 1, 0, 0
            if pending is not None and pending[0][1:] == name:
                m_nxt, lo, floor = _unpack_meta(pending[1])
                nxt = max(nxt, m_nxt)
                pending = next(metas, None)
            yield name.decode(), [nxt, lo, floor]
        while pending is not None:
            yield pending[0][1:].decode(), _unpack_meta(pending[1])
            pending = next(metas, None)

    def _trim(self) -> None:
        """Past :attr:`cached_queues`, drop the longest-cached quarter of the cache into
        the table. Called with the lock held, never between a writer's fill and its
        publication: whatever is cached then is written, so a queue dropped is taken
        back the same."""
        cache = self._meta
        if len(cache) <= self._trim_above:
            return
        limit = self.cached_queues
        want = len(cache) - limit + limit // 4
        # Over a copy of the names: a reader fills the cache without the lock (_metas),
        # and a dict that changes size under an iteration ends it with an error.
        names: Iterable[str] = list(cache)
        for held in self.pinned():  # no union of them built: a trim asks for few
            names = filterfalse(held.__contains__, names)
        drop = list(islice(names, want))
        if drop:
            found = list(map(cache.get, drop))
            if None in found:  # a reader took its fill back meanwhile (see _metas)
                drop = list(compress(drop, found))
            metas: list[Meta] = list(filter(None, found))
            self._trims += 1
            if not self._table.put_many(drop, metas):
                self.complete = False  # before a queue leaves: see _load_metas
                self._epoch += 1  # a walk would take the old metadata of those left out
            self._changes += 1
            deque(map(cache.pop, drop, repeat(None)), maxlen=0)
            self._changes += 1
        # Pinned queues kept it full: look again once it has grown by half (a walk
        # over the cache each time it grows by a constant would cost a step per queue
        # per insert).
        self._trim_above = (limit if len(drop) == want
                            else len(cache) + max(limit // 4, len(cache) // 2))

    def cached(self) -> int:
        """How many queues' metadata is cached."""
        return len(self._meta)

    def known(self) -> int:
        """How many queues' metadata the table holds (some of them cached too)."""
        return len(self._table)

    def max_offset(self, name: str) -> int:
        return self._read_meta(name)[0]

    def min_offset(self, name: str) -> int:
        return self._read_meta(name)[1]

    def floor(self, name: str) -> int:
        """The tombstone floor of ``name``: entries of records below it are ignored."""
        return self._floors.get(name, 0)

    @property
    def floors(self) -> Mapping[str, int]:
        """Every queue's tombstone floor that is not 0 (the queues deleted): not to be
        changed by the caller."""
        return self._floors

    def exists(self, name: str) -> bool:
        return self._read_meta(name)[0] > 0

    # ------------------------------------------------------------------ writing

    def write(self, entries: Sequence[LmqEntry], dispatched_end: int) -> dict[str, int]:
        """Write ``entries`` and the checkpoint in one batch; returns new max offsets.

        Idempotent: an entry below a queue's known max offset is already written
        (re-dispatch after a crash) and is skipped, so runs never overlap. Entries of a
        deleted queue whose record lies below its tombstone floor are dropped.
        """
        wb = WriteBatch(raw_mode=True)
        touched: dict[str, int] = {}
        meta: dict[str, Meta] = {}  # published after the write (see _publish)
        with self._lock:
            for e in entries:
                nxt, lo, floor = meta.get(e.name) or self._meta_of(e.name)
                if e.phys < floor or e.offset < nxt:
                    continue  # a deleted generation of this queue, or already written
                wb.put(_entry_key(e.name.encode(), e.offset),
                       _ENTRY.pack(e.phys, e.size, e.tags, e.store_ts))
                if e.offset + 1 > nxt:
                    if nxt == 0 and e.offset > 0:
                        lo = e.offset  # a queue whose start aged out before a rebuild
                    nxt = e.offset + 1
                meta[e.name] = [nxt, lo, floor]
                touched[e.name] = nxt
            self._publish(wb, meta, dispatched_end)
            self.entries_written += len(entries)
        return touched

    def write_fanout(self, records: Sequence[FanOut], dispatched_end: int) -> dict[str, int]:
        """:meth:`write` for whole records -- ``(names, offsets, phys, size, tags,
        store_ts)`` -- the dispatcher's hot path, with no Python step per entry: an
        entry's value is packed once per record, the keys are built and sorted into
        RocksDB's order (:func:`grouped_batch` explains why) and put with C-level maps,
        each queue's last offset is the last one seen (a queue's offsets rise in log
        order), and the queues' metadata is advanced once per queue afterwards. Records
        below the checkpoint are written already (re-dispatch after a crash) and
        skipped."""
        pack = _ENTRY.pack
        name_runs: list[Sequence[str]] = []
        offset_runs: list[Sequence[int]] = []
        value_runs: list[Iterable[bytes]] = []
        with self._lock:
            floors = self._floors
            written = self.dispatched
            for names, offsets, phys, size, tags, store_ts in records:
                if len(names) != len(offsets):
                    raise ValueError(f"{len(names)} LMQ names but {len(offsets)} offsets")
                if phys < written:
                    continue  # re-dispatch after a crash: its entries are in a run already
                if floors and not floors.keys().isdisjoint(names):
                    kept = [i for i, name in enumerate(names)
                            if phys >= floors.get(name, 0)]  # else a deleted generation
                    name_runs.append([names[i] for i in kept])
                    offset_runs.append([offsets[i] for i in kept])
                else:
                    name_runs.append(names)
                    offset_runs.append(offsets)
                value_runs.append(repeat(pack(phys, size, tags, store_ts), len(name_runs[-1])))
            flat = list(chain.from_iterable(name_runs))
            offs = list(chain.from_iterable(offset_runs))
            values = list(chain.from_iterable(value_runs))
            keys, order = sorted_entry_keys(flat, offs)
            wb = WriteBatch(raw_mode=True)
            deque(map(wb.put, keys, map(values.__getitem__, order)), maxlen=0)
            # each queue's offset after its last in the round (log order: the highest)
            after = dict(zip(flat, map(add, offs, repeat(1)), strict=True))
            known = self._advance_known(after)
            if known is None:
                meta = self._advance(dict(zip(after, map(sub, after.values(), repeat(1)),
                                              strict=True)), records)
                self._publish(wb, meta, dispatched_end)
                self.entries_written += len(keys)
                return dict(zip(meta, map(_first, meta.values()), strict=True))
            metas, nexts, plain, plain_nexts = known
            dispatched = self._write_round(wb, dispatched_end)
            deque(map(setitem, metas, repeat(0), nexts), maxlen=0)  # see _publish
            if plain:
                self._table.advance(plain, plain_nexts)
            self._published(dispatched)
            self.entries_written += len(keys)
        return after

    def _advance_known(self, after: dict[str, int]
                       ) -> tuple[list[Meta], list[int], list[str], list[int]] | None:
        """The usual round: every queue cached or a plain queue of the table (or, while
        the store is :attr:`complete`, new), each advanced to ``after`` (the offset
        after its last one in the round), none first seen past 0. Returns the cached
        queues' metadata with their offsets after the round, which the caller sets in
        place once the round is written, and the table's queues with theirs, which the
        caller advances in the table (:meth:`LmqTable.advance`): C-level maps, no
        Python step and no new object per queue, and no queue taken into the cache,
        which fan-outs to random queues among millions would turn over. ``None`` for
        any other round (:meth:`_advance`). Called with the lock held."""
        olds: list[Meta | None] = get_many(self._meta, list(after))
        nexts = list(after.values())
        plain: list[str] = []
        plain_nexts: list[int] = []
        if None in olds:
            uncached = list(map(is_, olds, repeat(None)))
            plain = list(compress(after, uncached))
            plain_nexts = list(compress(nexts, uncached))
            if not self._table.advanceable(plain, plain_nexts, new=self.complete):
                return None
            cached = list(map(not_, uncached))
            olds = list(compress(olds, cached))
            nexts = list(compress(nexts, cached))
        known = cast("list[Meta]", olds)
        nxts = list(map(_first, known))
        # advanced (after > nxt), and a queue not known before (nxt 0) starts at 0
        if not (all(map(gt, nexts, nxts)) and all(map(or_, map(bool, nxts),
                                                       map(eq, nexts, repeat(1))))):
            return None
        if 0 in nxts and any(map(_second, known)):  # may need an M key (see _publish)
            return None
        return known, nexts, plain, plain_nexts

    def _advance(self, last: dict[str, int], records: Sequence[FanOut]) -> dict[str, Meta]:
        """The new metadata of the queues whose last offset in ``records`` is ``last``,
        for a round :meth:`_advance_known` does not take. A queue seen for the first
        time past 0 (its start expired before a rebuild) starts at its first offset in
        ``records``, found in a second pass for those queues only. Called with the lock
        held."""
        cache = self._meta
        queues = list(last)
        self._cache_missing(queues)
        meta: dict[str, Meta] = {}
        late: list[str] = []
        for name, offset in last.items():
            m = cache[name]
            if offset >= m[0]:
                if m[0] == 0 and offset > 0:
                    late.append(name)
                m = [offset + 1, m[1], m[2]]
            meta[name] = m
        if late:
            first: dict[str, int] = {}
            wanted = set(late)
            floors = self._floors
            for names, offsets, phys, *_rest in records:
                for name, offset in zip(names, offsets, strict=True):
                    if name in wanted and name not in first and phys >= floors.get(name, 0):
                        first[name] = offset  # not of a deleted generation's record
            for name in late:
                nxt, _lo, floor = meta[name]
                meta[name] = [nxt, first[name], floor]
        return meta

    def _publish(self, wb: WriteBatch, meta: dict[str, Meta], dispatched_end: int) -> None:
        """Add the checkpoint to ``wb``, and ``M`` for the queues that start past 0 and
        had none, write it, and only then make the new metadata visible: a reader that
        sees a queue's new max offset finds every entry below it. Called with the lock
        held. (The max offset needs no ``M``: the last ``E`` key shows it.)"""
        cache = self._meta
        for name, m in meta.items() if any(map(_second, meta.values())) else ():
            if m[1] and cache[name][0] == 0:  # a new queue starting past 0
                wb.put(b"M" + name.encode(), _pack_meta(*m))
        dispatched = self._write_round(wb, dispatched_end)
        cache.update(meta)
        self._published(dispatched)

    def _write_round(self, wb: WriteBatch, dispatched_end: int) -> int:
        """Write ``wb`` with the checkpoint; returns the new dispatched position, which
        :meth:`_published` announces once the round's metadata is in the cache."""
        dispatched = max(self.dispatched, dispatched_end)
        wb.put(_CHECKPOINT_KEY, _Q.pack(dispatched))
        self.db.write(wb)
        return dispatched

    def _published(self, dispatched: int) -> None:
        self.dispatched = dispatched  # after the cache: see the attribute
        self._trim()

    def write_prepared(self, wb: WriteBatch, last: Mapping[str, int], dispatched_end: int,
                       entries: int, first: Mapping[str, int] | None = None, *,
                       generation: int | None = None) -> dict[str, int] | None:
        """Apply entries batched elsewhere (the concurrent dispatcher, which already
        skipped records below each queue's tombstone floor); ``last`` and ``first`` map
        each queue to its last and first offset in ``wb``. Adds queue metadata and the
        checkpoint, returns the new max offsets -- or ``None``, writing nothing, when a
        queue was deleted since :attr:`generation` was ``generation`` (the floors the
        batch was filtered with may be stale: prepare it again)."""
        touched: dict[str, int] = {}
        meta: dict[str, Meta] = {}
        with self._lock:
            if generation is not None and generation != self.generation:
                return None
            self._cache_missing(list(last))
            for name, offset in last.items():
                nxt, lo, floor = self._meta[name]
                if offset + 1 > nxt:
                    if nxt == 0:  # a new queue (or one whose start aged out): its first
                        lo = first.get(name, offset) if first is not None else offset
                    nxt = offset + 1
                meta[name] = [nxt, lo, floor]
                touched[name] = nxt
            self._publish(wb, meta, dispatched_end)
            self.entries_written += entries
        return touched

    def flush(self) -> None:
        """Persist the memtable (the WAL is off): bounds re-dispatch after a crash."""
        self.db.flush()
        self._flushed_entries = self.entries_written
        self._flushed_at = time.monotonic()

    def checkpoint(self, dispatched: int) -> None:
        """Record that every LMQ entry of records below ``dispatched`` is written; called
        with the dispatcher's position, after its writes (every
        ``flushIntervalConsumeQueue``).

        The memtable is flushed only once :attr:`flush_entries` entries were written
        since the last flush, or the last flush is :attr:`flush_every` seconds old (and
        by RocksDB when it is full). Each flush adds a level-0 file, and every few of
        them are merged with level 1 -- which, entries going to random queues, is the
        whole database: flushed every second, a store of a million LMQs spent more CPU
        rewriting itself than dispatching. What is not flushed is re-dispatched from
        the commit log after a crash (the checkpoint written with it says from where)."""
        with self._lock:
            if dispatched > self.dispatched:
                self.dispatched = dispatched
                self.db.put(_CHECKPOINT_KEY, _Q.pack(dispatched))
        pending = self.entries_written - self._flushed_entries
        if pending and (pending >= self.flush_entries
                        or time.monotonic() - self._flushed_at >= self.flush_every):
            self.flush()

    def truncate_phys(self, end: int) -> int:
        """Drop entries whose record does not end by ``end``, the end of the valid log.

        Only a power loss under ASYNC_FLUSH can leave such entries (the LMQ store reached
        disk, the commit-log pages did not); then every entry is walked once. Returns the
        number dropped.
        """
        if self.dispatched <= end:
            return 0
        wb = WriteBatch(raw_mode=True)
        first_gone: dict[str, int] = {}
        dropped = 0
        for k, v in self._items(b"E"):
            n = len(v) // _ENTRY_SIZE
            keep = _first_where(v, lambda phys, size: phys + size > end)
            if keep == n:
                continue
            if keep:
                wb.put(k, v[: keep * _ENTRY_SIZE])  # the run's head is still in the log
            else:
                wb.delete(k)
            dropped += n - keep
            name, offset = split_entry_key(k)
            first_gone[name] = min(first_gone.get(name, offset + keep), offset + keep)
        with self._changing():
            for name, nxt in first_gone.items():
                _old, lo, floor = self._meta_of(name)
                self._meta[name] = [nxt, min(lo, nxt), floor]
                wb.put(b"M" + name.encode(), _pack_meta(nxt, min(lo, nxt), floor))
            self.dispatched = end
            wb.put(_CHECKPOINT_KEY, _Q.pack(end))
            self.db.write(wb)
        if dropped:
            log.warning("dropped %d LMQ entries of %d queues pointing past the commit-log end "
                        "%d", dropped, len(first_gone), end)
        return dropped

    # ------------------------------------------------------------------ reading

    def entries(self, name: str, offset: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` ``(phys, size, tags)`` from ``offset``: a multi-get while the
        queue holds an entry per key (the serial dispatcher's), else its runs in order."""
        nxt, lo, _floor = self._read_meta(name)
        start = max(offset, lo)
        end = min(nxt, start + count)
        if start >= end:
            return []
        key = name.encode()
        get = self.db.get
        out: list[tuple[int, int, int]] = []
        first = cast(bytes | None, get(_entry_key(key, start)))
        if first is not None:
            if len(first) == _ENTRY_SIZE:  # an entry per key: the rest by one multi-get
                out.append(_ENTRY.unpack(first)[:3])
                if end - start > 1:
                    values = cast(list[bytes | None],
                                  get([_entry_key(key, o) for o in range(start + 1, end)]))
                    for v in values:
                        if v is None or len(v) != _ENTRY_SIZE:
                            break  # inside a run, or a run starts here
                        out.append(_ENTRY.unpack(v)[:3])
            else:  # a run starts at ``start``
                out.extend(_ENTRY.unpack_from(first, i * _ENTRY_SIZE)[:3]
                           for i in range(min(len(first) // _ENTRY_SIZE, end - start)))
            if len(out) == end - start:
                return out
        at = start + len(out)
        for run_at, run, _k in self._runs(key, at):
            if run_at > at:
                break  # a gap: nothing past it is readable in order
            n = len(run) // _ENTRY_SIZE
            stop = min(n, end - run_at)
            out.extend(_ENTRY.unpack_from(run, i * _ENTRY_SIZE)[:3]
                       for i in range(at - run_at, stop))
            at = max(at, run_at + stop)
            if at >= end:
                break
        return out

    def store_time_at(self, name: str, offset: int) -> int:
        for run_at, run, _k in self._runs(name.encode(), offset):
            i = offset - run_at
            if 0 <= i < len(run) // _ENTRY_SIZE:
                return int(_ENTRY.unpack_from(run, i * _ENTRY_SIZE)[3])
            break
        return -1

    def _runs(self, name: bytes, offset: int) -> Iterator[tuple[int, bytes, bytes]]:
        """``name``'s runs in offset order from the one holding ``offset`` (or the first
        after it): ``(first offset, value, key)``."""
        base = entry_prefix(name)
        size = len(base) + 8
        it = self.db.iter()
        it.seek_for_prev(base + _Q.pack(offset))
        if not it.valid() or not cast(bytes, it.key()).startswith(base):
            it.seek(base + _Q.pack(offset))
        while it.valid():
            k = cast(bytes, it.key())
            if len(k) != size or not k.startswith(base):
                return
            yield _Q.unpack_from(k, len(base))[0], cast(bytes, it.value()), k
            it.next()

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
        """Store ``group``'s consumed offset of ``name`` (WAL on: it survives a crash)."""
        self.db.put(_offset_key(name, group), _Q.pack(offset), write_opt=self._wal)

    def committed_offset(self, group: str, name: str) -> int | None:
        raw = cast(bytes | None, self.db.get(_offset_key(name, group)))
        return int(_Q.unpack(raw)[0]) if raw is not None else None

    def offsets_after(self, after: tuple[str, str] | None, limit: int
                      ) -> list[tuple[str, str, int]]:
        """Up to ``limit`` committed offsets ``(lmq, group, offset)`` in key order, from
        the one after ``after`` (an ``(lmq, group)``; ``None``: from the first)."""
        start = b"O" if after is None else _offset_key(*after) + b"\x00"
        rows: list[tuple[str, str, int]] = []
        for key, value in self._items(b"O", start):
            if len(rows) >= limit:
                break
            name, _, group = key[1:].partition(b"\x00")
            rows.append((name.decode(), group.decode(), int(_Q.unpack(value)[0])))
        return rows

    def tombstones_after(self, after: str | None, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` tombstones ``(lmq, floor)`` in name order, from the one after
        ``after`` (``None``: from the first)."""
        start = b"D" if after is None else b"D" + after.encode() + b"\x00"
        rows: list[tuple[str, int]] = []
        for key, value in self._items(b"D", start):
            if len(rows) >= limit:
                break
            rows.append((key[1:].decode(), int(_Q.unpack(value)[0])))
        return rows

    def offsets_of(self, name: str) -> dict[str, int]:
        """Every group's committed offset of ``name``."""
        prefix = b"O" + name.encode() + b"\x00"
        return {k[len(prefix):].decode(): int(_Q.unpack(v)[0])
                for k, v in self._items(prefix)}

    # ------------------------------------------------------------------ admin and retention

    def _keys(self, prefix: bytes) -> Iterator[bytes]:
        """Keys starting with ``prefix``, in order."""
        for k in self.db.keys(from_key=prefix):
            key = cast(bytes, k)
            if not key.startswith(prefix):
                return
            yield key

    def _items(self, prefix: bytes, start: bytes | None = None
               ) -> Iterator[tuple[bytes, bytes]]:
        for k, v in self.db.items(from_key=start or prefix):
            key = cast(bytes, k)
            if not key.startswith(prefix):
                return
            yield key, cast(bytes, v)

    def drop_derived(self) -> int:
        """Drop every derived key -- entries, metadata, the checkpoint -- keeping the truth
        (consumer offsets, tombstones, whose floors go back into ``M``), so that a
        re-dispatch from the start of the commit log rebuilds the entries (``tidemq store
        verify --repair``). Returns the entries dropped."""
        dropped = sum(len(v) // _ENTRY_SIZE for _k, v in self._items(b"E"))
        floors = self.tombstones()
        wb = WriteBatch(raw_mode=True)
        wb.delete_range(b"E", b"F")
        wb.delete_range(b"M", b"N")
        for name, floor in floors.items():
            wb.put(b"M" + name.encode(), _pack_meta(0, 0, floor))
        wb.delete(_CHECKPOINT_KEY)
        with self._changing():
            self.db.write(wb, write_opt=self._wal)
            self.complete = False
            self._epoch += 1
            self._meta.clear()
            self._table.clear()
            self._floors = dict(floors)
            self.dispatched = 0
            self._stats = None
        return dropped

    def delete_queue(self, name: str, floor: int, kept: Sequence[LmqEntry] = ()) -> bool:
        """Drop an LMQ with its entries and every group's offset for it; returns whether
        it had entries.

        ``floor`` is the commit-log end at the time of deletion: the caller holds the
        append lock, so every record of the old queue lies below it and every later one
        at or above it. The deletion and its tombstone are written with the WAL on.

        ``kept``: entries of the queue created again, of records at or above ``floor``
        (a replica taking its master's tombstone after it dispatched them), in offset
        order; they are written in the same batch, so a crash keeps both or neither.
        The caller flushed the entries written before (the WAL is off for them) and
        dispatches no record meanwhile.
        """
        key = name.encode()
        wb = WriteBatch(raw_mode=True)
        with self._changing():
            nxt, lo, old_floor = self._meta_of(name)
            existed = nxt > 0
            floor = max(floor, old_floor)
            wb.delete_range(b"E" + key + b"\x00", b"E" + key + b"\x01")
            wb.delete_range(b"O" + key + b"\x00", b"O" + key + b"\x01")
            new_lo = new_nxt = 0
            for e in kept:
                if e.name != name or e.phys < floor:
                    raise ValueError(f"entry {e} is not of LMQ {name} at or above {floor}")
                if e.offset < new_nxt:
                    continue  # written already (a record the log holds twice cannot be)
                if new_nxt == 0:
                    new_lo = e.offset  # the master's start aged out of this log
                wb.put(_entry_key(key, e.offset), _ENTRY.pack(e.phys, e.size, e.tags,
                                                               e.store_ts))
                new_nxt = e.offset + 1
            wb.put(b"M" + key, _pack_meta(new_nxt, new_lo, floor))
            wb.put(b"D" + key, _Q.pack(floor))
            self._meta[name] = [new_nxt, new_lo, floor]
            self._floors[name] = floor
            self.generation += 1  # after the floor: who reads the new count sees it
            self.db.write(wb, write_opt=self._wal)
        stats = self._stats
        if (existed or new_nxt) and stats is not None:
            # exact while nothing was written since the walk; else the queue may not have
            # been counted at all, and a recount settles what the subtraction guessed
            self._stats = (stats[0] if self.entries_written == self._stats_written else 0.0,
                           max(stats[1] - existed + (new_nxt > 0), 0),
                           max(stats[2] - (nxt - lo) + (new_nxt - new_lo), 0))
        return existed

    def holds_from(self, name: str, phys: int) -> bool:
        """Whether ``name`` holds an entry of a record at or above commit-log offset
        ``phys`` (a replica's dispatch of an LMQ created again above its master's
        tombstone floor, before the tombstone arrived). Walks the queue's entries."""
        prefix = entry_prefix(name.encode())
        for _key, value in self._items(prefix):
            if (np.frombuffer(value, ENTRY_DTYPE)["phys"] >= phys).any():
                return True
        return False

    def _spans(self, after: bytes | None = None, *, values: bool = False
               ) -> Iterator[tuple[bytes, int, int, bytes]]:
        """Every queue holding entries, in name order (after the queue ``after``):
        ``(name, first offset, last offset, first entry's value or b"")``. Runs are
        iterated; a queue of more than :data:`_RUN` runs costs a seek to its last run
        and a new iteration after it instead of a step per run."""
        unpack = _Q.unpack_from
        start = b"E" + after + b"\x01" if after is not None else b"E"
        while True:
            prefix = b""  # b"E" name 0x00 of the current queue: no other key starts so
            first = last = 0
            value = b""
            runs = 0
            long_queue = False
            for row in cast(Iterator[tuple[bytes, bytes]], self.db.items(from_key=start)):
                k, v = row
                if prefix and k.startswith(prefix):
                    last = unpack(k, len(prefix))[0] + len(v) // _ENTRY_SIZE - 1
                    runs += 1
                    if runs == _RUN:
                        long_queue = True
                        break
                    continue
                if prefix:
                    yield prefix[1:-1], first, last, value
                if k[:1] != b"E":
                    return
                prefix, runs = k[:-8], 0
                first = unpack(k, len(prefix))[0]
                last = first + len(v) // _ENTRY_SIZE - 1
                value = v[:_ENTRY_SIZE] if values else b""
            if not long_queue:
                if prefix:
                    yield prefix[1:-1], first, last, value
                return
            it = self.db.iter()
            it.seek_for_prev(prefix + b"\xff" * 8)
            last = (unpack(cast(bytes, it.key()), len(prefix))[0]
                    + len(cast(bytes, it.value())) // _ENTRY_SIZE - 1)
            yield prefix[1:-1], first, last, value
            start = prefix[:-1] + b"\x01"

    def stored_entries(self) -> Iterator[tuple[str, int, bytes]]:
        """Every stored entry, runs expanded: ``(queue, offset, value)`` in key order --
        what two stores hold in common whatever runs their dispatchers wrote."""
        for k, v in self._items(b"E"):
            name, offset = split_entry_key(k)
            for i in range(len(v) // _ENTRY_SIZE):
                yield name, offset + i, v[i * _ENTRY_SIZE : (i + 1) * _ENTRY_SIZE]

    def _has_entries(self, name: bytes) -> bool:
        prefix = entry_prefix(name)
        return next(self._keys(prefix), None) is not None

    def _emptied(self) -> Iterator[tuple[bytes, int, int]]:
        """Queues that exist but hold no entries (every one expired): ``M`` with a max
        offset above 0 and no ``E`` key. ``(name, next, min)``."""
        for k, raw in self._items(b"M"):
            nxt, lo, _floor = _unpack_meta(raw)
            if nxt > 0 and not self._has_entries(k[1:]):
                yield k[1:], nxt, lo

    def queue_names(self) -> Iterable[str]:
        """Names of the LMQs that hold or held entries (deleted ones excluded)."""
        for name, _first, _last, _v in self._spans():
            yield name.decode()
        for name, _nxt, _lo in self._emptied():
            yield name.decode()

    def tombstones(self) -> dict[str, int]:
        """Deleted LMQs whose floor retention has not dropped yet: name -> floor."""
        return {k[1:].decode(): int(_Q.unpack(v)[0]) for k, v in self._items(b"D")}

    def stats(self) -> tuple[int, int]:
        """(number of LMQs, total entries dispatched into them still readable)."""
        queues = entries = 0
        for _name, first, last, _v in self._spans():
            queues += 1
            entries += last + 1 - first
        for _name, nxt, lo in self._emptied():
            queues += 1
            entries += max(nxt - lo, 0)
        return queues, entries

    def cached_stats(self, max_age: float = 30.0) -> tuple[int, int] | None:
        """:meth:`stats` without stalling the caller (the broker's event loop): the walk
        of every queue's metadata -- one to three seconds per million queues -- runs on a
        background thread, started when there are no figures yet or they are older than
        ``max_age`` seconds, and the last figures are returned meanwhile: ``None`` until
        the first walk ends (:meth:`first_stats` waits for it)."""
        stats = self._stats
        if stats is None or time.monotonic() - stats[0] > max_age:
            with self._stats_lock:  # the metrics thread asks too
                if self._stats_thread is None:
                    self._stats_thread = NamedThread(target=self._refresh_stats,
                                                     name="tidemq-lmq-stats", daemon=True)
                    self._stats_thread.start()
        return None if stats is None else (stats[1], stats[2])

    def first_stats(self) -> tuple[int, int] | None:
        """:meth:`cached_stats`, waiting for the walk under way when no walk has ended
        yet: for a caller that may block (a worker thread, not the event loop). ``None``
        only when that walk failed."""
        figures = self.cached_stats()
        if figures is None:
            counting = self._stats_thread  # None again if it has ended already
            if counting is not None:
                counting.join()
            stats = self._stats
            figures = None if stats is None else (stats[1], stats[2])
        return figures

    def _refresh_stats(self) -> None:
        try:
            written = self.entries_written
            self._stats = (time.monotonic(), *self.stats())
            self._stats_written = written
        except Exception:  # the database closing under it: the next call retries
            log.exception("counting LMQs failed")
        finally:
            self._stats_thread = None

    def _mark_stats_stale(self) -> None:
        stats = self._stats
        if stats is not None:
            self._stats = (0.0, stats[1], stats[2])

    def expiry_due(self, commitlog_min: int) -> bool:
        """Whether :meth:`expire_below` has work: the minimum moved past the last complete
        sweep, or a sweep is half done."""
        return commitlog_min > self._swept_min or self._sweep_after is not None

    def expire_below(self, commitlog_min: int, budget: int = 100_000) -> int:
        """Drop entries pointing below the commit-log minimum and raise queue minimums;
        drop tombstones the minimum passed. Returns the entries dropped.

        Walks the queues' entries (:meth:`_spans`) from where the previous call stopped
        and stops after about ``budget`` keys, so a sweep over millions of queues is spread
        over several housekeeping rounds. Per queue, entries are in record order, so only
        the first live entry is looked for: a queue with nothing expired costs its first
        key.
        """
        self._drop_tombstones(commitlog_min)
        removed = 0
        wb = WriteBatch(raw_mode=True)
        raised: dict[str, int] = {}
        seen = 0
        last: bytes | None = None
        for key, first, end, value in self._spans(self._sweep_after, values=True):
            if seen >= budget:
                break
            last = key
            seen += 1
            if _ENTRY.unpack(value)[0] >= commitlog_min:
                continue
            first_alive, dropped = self._expired_prefix(key, first, end + 1, commitlog_min,
                                                        wb)
            seen += dropped
            removed += dropped
            raised[key.decode()] = first_alive
        else:
            last = None  # the walk reached the end: this sweep is complete
        with self._changing():
            for name, first_alive in raised.items():
                nxt, old_lo, floor = self._meta_of(name)
                lo = max(old_lo, min(first_alive, nxt))
                self._meta[name] = [nxt, lo, floor]
                wb.put(b"M" + name.encode(), _pack_meta(nxt, lo, floor))
            if not wb.is_empty():
                self.db.write(wb)
        self._sweep_after = last
        if last is None:
            self._swept_min = commitlog_min
        if raised:
            self._mark_stats_stale()
        return removed

    def _expired_prefix(self, name: bytes, lo: int, nxt: int, commitlog_min: int,
                        wb: WriteBatch) -> tuple[int, int]:
        """The first offset of ``name`` whose record is still in the commit log, and how
        many entries before it were queued for deletion in ``wb``: whole runs, and the
        expired head of the run holding that offset (the rest is written again under
        the offset of its first live entry)."""
        dropped = 0
        for run_at, run, k in self._runs(name, lo):
            n = len(run) // _ENTRY_SIZE
            alive = _first_where(run, lambda phys, _size: phys >= commitlog_min)
            if alive == 0:
                return run_at, dropped
            wb.delete(k)
            dropped += alive
            if alive < n:
                wb.put(_entry_key(name, run_at + alive), run[alive * _ENTRY_SIZE:])
                return run_at + alive, dropped
        return nxt, dropped

    def _drop_tombstones(self, commitlog_min: int) -> int:
        """Forget the floors the commit log's minimum passed (no old record is left);
        returns how many."""
        gone = [k for k, v in self._items(b"D") if _Q.unpack(v)[0] <= commitlog_min]
        if not gone:
            return 0
        wb = WriteBatch(raw_mode=True)
        with self._changing():
            for k in gone:
                name = k[1:].decode()
                nxt, lo, _old = self._meta_of(name)
                self._meta[name] = [nxt, lo, 0]
                self._floors.pop(name, None)
                if nxt > 0:
                    wb.put(b"M" + k[1:], _pack_meta(nxt, lo, 0))
                else:
                    wb.delete(b"M" + k[1:])
                wb.delete(k)
            self.db.write(wb, write_opt=self._wal)
        return len(gone)

    def close(self) -> None:
        with self._lock:
            self._closing = True
        for thread in (self._warm_thread, self._stats_thread):
            if thread is not None:
                thread.join()
        try:
            self.db.flush()
        finally:
            self.db.close()


def _first_where(run: bytes, test: Callable[[int, int], bool]) -> int:
    """The index of a run's first entry whose ``(phys, size)`` passes ``test``, or the
    run's length. Entries are in record order, so a run splits at that one index."""
    unpack = _ENTRY.unpack_from
    for i in range(len(run) // _ENTRY_SIZE):
        phys, size, _tags, _ts = unpack(run, i * _ENTRY_SIZE)
        if test(phys, size):
            return i
    return len(run) // _ENTRY_SIZE


def split_entry_key(key: bytes) -> tuple[str, int]:
    """``(name, offset)`` of an ``E`` key."""
    return key[1:-9].decode(), int(_Q.unpack(key[-8:])[0])
