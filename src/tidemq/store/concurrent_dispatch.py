"""Concurrent consume-queue dispatch with in-order visibility
(``enableBuildConsumeQueueConcurrently=true``).

The serial :class:`~tidemq.store.dispatch.Dispatcher` builds and applies every entry on
one thread. This one splits each dispatch *round* (the batches confirmed at one moment)
into two phases:

1. **Prepare**, on ``workers`` threads, rounds in any order: the round's consume-queue
   columns become numpy arrays per queue; its LMQ fan-out becomes a ready RocksDB
   ``WriteBatch`` (keys and values built in bulk: one value per record, cached key
   prefixes, one metadata record per queue); index keys are grouped per record.
2. **Commit**, on one committer thread, strictly in round order: copy the prepared
   consume-queue arrays into their files, hand the LMQ batch to RocksDB (which releases
   the GIL while it writes), queue the index keys, then advance the commit position and
   fire the ``on_dispatched`` hooks.

Rounds carry sequence numbers; prepared rounds wait in an ordered ring and the committer
takes slot ``commit_seq`` only, so nothing beyond the commit position is written where a
pull can see it, and long-poll wake-ups happen at commit. A reader therefore never sees
an entry before every earlier entry of its queue. The ring holds ``ring_size`` rounds;
the round builder blocks when it is full (back-pressure instead of unbounded memory).

Why threads and this split, measured on the 2-core machine (docs/benchmarks.md, "dispatch
serial vs concurrent"): under the GIL, threads that run Python do not run in parallel, so
a design that only spreads the same per-entry Python work over threads gains nothing.
What does gain is (a) doing less Python per entry (bulk preparation), and (b) overlapping
the parts that release the GIL -- RocksDB's write of the LMQ batch and numpy copies --
with the preparation of the next round. Processes were rejected: every entry would
cross a pipe or shared memory, and the LMQ RocksDB can only have one writing process.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import struct
import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from rocksdict import WriteBatch

from tidemq.store.batch_consume_queue import BatchConsumeQueue
from tidemq.store.consume_queue import CQ_DTYPE
from tidemq.store.dispatch import DispatchBatch, Dispatcher, IndexSink
from tidemq.store.queues import ConsumeQueueSet

__all__ = ["ConcurrentDispatcher", "PreparedRound"]

log = logging.getLogger(__name__)

_ENTRY = struct.Struct(">qiqq")
_META = struct.Struct(">qq")
_Q = struct.Struct(">q")


@dataclasses.dataclass(slots=True)
class PreparedRound:
    seq: int
    batches: list[DispatchBatch]
    #: (topic, queue id) -> (first offset, phys, sizes, tags) for classic queues
    columns: dict[tuple[str, int], tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64],
                                         npt.NDArray[np.int64]]]
    batch_queue_groups: dict[tuple[str, int], list[DispatchBatch]]
    lmq_batch: WriteBatch | None = None
    lmq_last: dict[str, int] = dataclasses.field(default_factory=dict)  # name -> last offset
    lmq_entries: int = 0


class ConcurrentDispatcher(Dispatcher):
    def __init__(self, queues: ConsumeQueueSet, index: IndexSink | None,
                 confirm_offset: Callable[[], int], start_offset: int,
                 lag_warn_ms: int = 1000, clock: Callable[[], int] | None = None,
                 linger_ms: float = 0.0, *, workers: int = 2, ring_size: int = 16) -> None:
        super().__init__(queues, index, confirm_offset, start_offset, lag_warn_ms, clock,
                         linger_ms)
        self.workers = max(1, workers)
        self.ring_size = ring_size
        self._work: queue.Queue[tuple[int, list[DispatchBatch]] | None] = queue.Queue()
        self._ring: dict[int, PreparedRound | BaseException] = {}
        self._ring_cond = threading.Condition()
        self._next_seq = 0
        self.commit_seq = 0  # the next round to commit: everything before it is visible
        self._threads: list[threading.Thread] = []
        self._lmq_prefixes: dict[str, bytes] = {}
        self._round_ts: dict[int, int] = {}  # seq -> store time of its first record

    # ------------------------------------------------------------------ threads

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._prepare_loop, name=f"tidemq-prep-{i}",
                                          daemon=True) for i in range(self.workers)]
        self._threads.append(threading.Thread(target=self._commit_loop, name="tidemq-commit",
                                              daemon=True))
        for t in self._threads:
            t.start()
        super().start()  # the round builder: Dispatcher._run -> run_once below

    def stop(self) -> None:
        super().stop()
        for _ in range(self.workers):
            self._work.put(None)
        with self._ring_cond:
            self._ring_cond.notify_all()
        for t in self._threads:
            t.join()
        self._threads = []

    def run_once(self, batches: list[DispatchBatch]) -> None:
        """Called by the builder thread with each confirmed round: number it and hand it
        to the preparers; block while the ring is full. ``_busy`` stays set until the
        committer has made the round visible (see :meth:`_commit`)."""
        with self._ring_cond:
            while self._next_seq - self.commit_seq >= self.ring_size and not self._stop:
                self._ring_cond.wait(0.1)
            seq = self._next_seq
            self._next_seq += 1
            self._round_ts[seq] = batches[0].store_timestamp
        self._work.put((seq, batches))

    def _oldest_undispatched(self) -> int:
        with self._ring_cond:
            if self._round_ts:
                return self._round_ts[min(self._round_ts)]
        return super()._oldest_undispatched()

    def _prepare_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            seq, batches = item
            result: PreparedRound | BaseException
            try:
                result = self._prepare(seq, batches)
            except BaseException as exc:
                result = exc
            with self._ring_cond:
                self._ring[seq] = result
                self._ring_cond.notify_all()

    def _commit_loop(self) -> None:
        while True:
            with self._ring_cond:
                while self.commit_seq not in self._ring:
                    if self._stop and self.commit_seq >= self._next_seq:
                        return
                    self._ring_cond.wait(0.05)
                item = self._ring.pop(self.commit_seq)
            if isinstance(item, BaseException):
                self._fail(item)
                return
            try:
                self._commit(item)
            except BaseException as exc:
                self._fail(exc)
                return

    def _fail(self, exc: BaseException) -> None:
        log.error("concurrent dispatch failed; consume queues stop advancing", exc_info=exc)
        with self._cond:
            self.error = exc
            self._busy = False
            self._cond.notify_all()

    # ------------------------------------------------------------------ prepare

    def _prepare(self, seq: int, batches: list[DispatchBatch]) -> PreparedRound:
        grouped: dict[tuple[str, int], list[DispatchBatch]] = {}
        for b in batches:
            grouped.setdefault((b.topic, b.queue_id), []).append(b)
        columns = {}
        batch_groups = {}
        for key, group in grouped.items():
            if key[0] in self.queues.batch_topics:
                batch_groups[key] = group
                continue
            if len(group) == 1:
                g = group[0]
                phys, sizes, tags = g.phys, g.sizes, g.tags
            else:
                phys = [p for g in group for p in g.phys]
                sizes = [s for g in group for s in g.sizes]
                tags = [t for g in group for t in g.tags]
            columns[key] = (group[0].queue_offset, np.asarray(phys, dtype=np.int64),
                            np.asarray(sizes, dtype=np.int64), np.asarray(tags, dtype=np.int64))
        prepared = PreparedRound(seq, batches, columns, batch_groups)
        if self.queues.lmq is not None:
            self._prepare_lmq(prepared)
        return prepared

    def _prepare_lmq(self, prepared: PreparedRound) -> None:
        wb: WriteBatch | None = None
        last = prepared.lmq_last
        prefixes = self._lmq_prefixes
        lmq = self.queues.lmq
        assert lmq is not None
        floor_of = lmq.floor
        count = 0
        for b in prepared.batches:
            if not b.lmq:
                continue
            for i, target in enumerate(b.lmq):
                if target is None:
                    continue
                if wb is None:
                    wb = WriteBatch(raw_mode=True)
                value = _ENTRY.pack(b.phys[i], b.sizes[i], b.tags[i], b.store_timestamp)
                names, offsets = target
                phys = b.phys[i]
                for name, offset in zip(names, offsets, strict=True):
                    if phys < floor_of(name):
                        continue  # a deleted generation of this queue (tombstone)
                    prefix = prefixes.get(name)
                    if prefix is None:
                        if len(prefixes) > 1_000_000:
                            prefixes.clear()
                        prefix = prefixes[name] = b"E" + name.encode() + b"\x00"
                    wb.put(prefix + _Q.pack(offset), value)
                    last[name] = offset
                    count += 1
        prepared.lmq_batch = wb
        prepared.lmq_entries = count

    # ------------------------------------------------------------------ commit

    def _commit(self, p: PreparedRound) -> None:
        touched: dict[tuple[str, int], int] = {}
        for key, (first, phys, sizes, tags) in p.columns.items():
            cq = self.queues.get_or_create(*key)
            if isinstance(cq, BatchConsumeQueue):  # the topic turned BatchCQ meanwhile
                p.batch_queue_groups[key] = [b for b in p.batches
                                             if (b.topic, b.queue_id) == key]
                continue
            touched[key] = cq.append(first, phys, sizes, tags)  # type: ignore[arg-type]
        for key, group in p.batch_queue_groups.items():
            bcq = self.queues.get_or_create(*key)
            for g in group:
                touched[key] = bcq.append(g.queue_offset, g.phys, g.sizes, g.tags,
                                          store_ts=g.store_timestamp,
                                          batch_sizes=g.batch_sizes)  # type: ignore[call-arg]
        lmq = self.queues.lmq
        end = p.batches[-1].end
        if lmq is not None and p.lmq_batch is not None:
            for name, max_offset in lmq.write_prepared(p.lmq_batch, p.lmq_last, end,
                                                       p.lmq_entries).items():
                touched[(name, 0)] = max_offset
        if self.index is not None:
            for b in p.batches:
                if b.keys:
                    for keys, phys_off in zip(b.keys, b.phys, strict=True):
                        if keys:
                            self.index.put_keys(b.topic, keys, phys_off, b.store_timestamp)
        with self._ring_cond:
            self.commit_seq = p.seq + 1
            self._round_ts.pop(p.seq, None)
            self._ring_cond.notify_all()
        self._publish(p.batches, touched)

    def _publish(self, batches: list[DispatchBatch],
                 touched: dict[tuple[str, int], int]) -> None:
        """Advance the commit position and wake readers (the serial dispatcher's tail)."""
        last = batches[-1]
        with self._cond:
            self.dispatched_offset = last.end
            self._busy = self.commit_seq < self._next_seq
            self._cond.notify_all()
        self.last_store_timestamp = last.store_timestamp
        self.dispatched_entries += sum(len(b.phys) for b in batches)
        self._fire(touched, batches)


_ = CQ_DTYPE  # the classic entry layout the prepared columns are written as
