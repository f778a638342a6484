"""Concurrent consume-queue dispatch with in-order visibility
(``enableBuildConsumeQueueConcurrently=true``).

The serial :class:`~tidemq.store.dispatch.Dispatcher` builds and applies every entry on
one thread. This one splits each dispatch *round* (the batches confirmed at one moment,
at most ``round_records`` records) into two phases:

1. **Prepare**, on ``workers`` threads, rounds in any order: the round's consume-queue
   entries are grouped into columns per queue; its LMQ fan-out becomes a ready RocksDB
   ``WriteBatch`` (one value per record, records below a deleted queue's tombstone
   floor skipped, grouped per queue column-wise: :func:`~tidemq.store.lmq_fanout.build_fanout`).
2. **Commit**, on one committer thread, strictly in round order: write the prepared
   consume-queue columns into their files, hand the LMQ batch to RocksDB, queue the index
   keys, then advance the commit position and fire the ``on_dispatched`` hooks.

Rounds carry sequence numbers; prepared rounds wait in an ordered ring and the committer
takes slot ``commit_seq`` only, so nothing beyond the commit position is written where a
pull can see it, and long-poll wake-ups happen at commit. A reader therefore never sees
an entry before every earlier entry of its queue. The ring holds ``ring_size`` rounds;
the round builder blocks when it is full (back-pressure instead of unbounded memory).
Only full rounds (``round_records``: a backlog) take that path; a smaller round is
prepared and committed by the builder itself once the rounds before it are visible
(``inline``): under the GIL the hand-offs buy nothing and cost a thread wake-up each,
up to a switch interval (5 ms) behind a busy producer thread. A round of fewer than
:data:`SERIAL_BELOW` records is applied as the serial dispatcher applies it: the
column-wise preparation has a fixed cost per round and per queue (the fan-out's
dictionaries, arrays and sorts, a RocksDB key per LMQ touched) that only pays off once
a round's LMQs repeat (``benchmarks/dispatch_steps.py`` counts both ways), and a lightly
loaded store dispatches rounds of a few records, one per wake-up. With
nothing in flight such a round takes the serial dispatcher's own steps too: no round
number, no condition of the ring, no prepared round, a fixed cost a round the serial
one does not pay. What the
committer writes is decided by the queues as they are at commit time, exactly as the
serial dispatcher decides (a topic declared BatchCQ after its classic queue exists keeps
writing classic entries; a deleted LMQ's floor is re-checked).

What it buys (``tidemq bench dispatch`` measures it against the serial dispatcher):

- *The threads, very little.* Under the GIL, threads that run Python do not run in
  parallel, and the native calls on this path hold the GIL too: rocksdict 0.3 never
  releases it in ``Rdict.write`` or ``WriteBatch.put`` (its ``flush`` and multi-get
  do), and ``np.asarray`` of lists, ``ndarray.tobytes`` and ``mmap`` slice writes hold
  it; only numpy's column copies release it. With the same per-entry work as the
  serial dispatcher, the pipeline gains little (bounded rounds and back-pressure are
  what it adds).
- *Bulk building per round, most.* The round is the unit the pipeline already has, so
  the LMQ fan-out of a round is built column-wise and written as one *run* per queue
  (:func:`~tidemq.store.lmq_fanout.build_fanout`): one RocksDB key per queue and round
  instead of one per entry, as the serial dispatcher (like upstream) writes. When records
  name several LMQs each out of many, that is several times fewer keys, and most of the
  gain.

One worker is the default because more only add hand-offs. Processes were costed and
not built: shipping a round's records to another process (pickle and unpickle) costs a
sizeable share of the per-record work, the LMQ RocksDB admits one writing process, so
the puts and the write stay in the broker, and parsing the commit log again in the other
process costs more still; what is left to move barely outweighs the hand-off.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import queue
import threading
from collections.abc import Callable, Sequence
from itertools import repeat

from rocksdict import WriteBatch

from tidemq.store.batch_consume_queue import BatchConsumeQueue
from tidemq.store.dispatch import (
    DispatchBatch,
    Dispatcher,
    IndexSink,
    apply_batches,
    fanout_columns,
    index_batches,
)
from tidemq.store.lmq_fanout import FanoutRecords, build_fanout
from tidemq.store.queues import AnyQueue, ConsumeQueueSet
from tidemq.store.threads import NamedThread

__all__ = ["DEFAULT_RING_SIZE", "DEFAULT_ROUND_RECORDS", "DEFAULT_WORKERS", "SERIAL_BELOW",
           "ConcurrentDispatcher", "PreparedRound"]

log = logging.getLogger(__name__)


#: Defaults (``StoreConfig.dispatch_workers`` ...), chosen by ``tidemq bench dispatch``.
DEFAULT_WORKERS = 1
#: Rounds with fewer records are applied the serial way (see the module docstring): on
#: the load of ``tidemq bench dispatch`` (fan-out 10 of 1,000 LMQs over 64 queues) the
#: column-wise way costs more instructions a record below this size and fewer above it
#: (``benchmarks/dispatch_cost.py`` counts both ways under callgrind).
SERIAL_BELOW = 96
DEFAULT_RING_SIZE = 8
DEFAULT_ROUND_RECORDS = 2048

#: A queue's column of a round: the batch's own sequence when one batch, else a list;
#: :meth:`ConsumeQueue.append` picks the cheapest way to write it (a few entries packed,
#: a repeated value broadcast, a range as an arange), as it does for the serial dispatcher.
Column = Sequence[int]
_PHYS = operator.attrgetter("phys")


@dataclasses.dataclass(slots=True)
class PreparedRound:
    seq: int
    batches: list[DispatchBatch]
    #: (topic, queue id) -> (first offset, phys, sizes, tags) for classic queues
    columns: dict[tuple[str, int], tuple[int, Column, Column, Column]]
    batch_queue_groups: dict[tuple[str, int], list[DispatchBatch]]
    lmq_batch: WriteBatch | None = None
    lmq_last: dict[str, int] = dataclasses.field(default_factory=dict)  # name -> last offset
    lmq_first: dict[str, int] = dataclasses.field(default_factory=dict)  # name -> first offset
    lmq_entries: int = 0
    #: The LMQ store's deletion count when the LMQ batch was prepared (tombstone floors
    #: read after it); a deletion before the commit makes the commit prepare again.
    lmq_generation: int = 0
    records: int = 0


class ConcurrentDispatcher(Dispatcher):
    def __init__(self, queues: ConsumeQueueSet, index: IndexSink | None,
                 confirm_offset: Callable[[], int], start_offset: int,
                 lag_warn_ms: int = 1000, clock: Callable[[], int] | None = None,
                 linger_ms: float = 0.0, on_append_records: int = 0, *,
                 workers: int = DEFAULT_WORKERS, ring_size: int = DEFAULT_RING_SIZE,
                 round_records: int = DEFAULT_ROUND_RECORDS, inline: bool = True) -> None:
        super().__init__(queues, index, confirm_offset, start_offset, lag_warn_ms, clock,
                         linger_ms, on_append_records)
        self.workers = max(1, workers)
        self.ring_size = max(1, ring_size)
        self.round_records = max(0, round_records)
        self._work: queue.Queue[tuple[int, list[DispatchBatch]] | None] = queue.Queue()
        self._ring: dict[int, PreparedRound | BaseException] = {}
        ring_lock = threading.RLock()
        #: The builder waits on it for the commit position (or the ring's room) to move.
        self._ring_cond = threading.Condition(ring_lock)
        #: The committer waits on it for the next round to land in the ring (or a stop):
        #: an inline round, committed by the builder, does not wake it.
        self._ring_filled = threading.Condition(ring_lock)
        self._next_seq = 0
        self.commit_seq = 0  # the next round to commit: everything before it is visible
        #: Commit rounds smaller than ``round_records`` on the builder thread, once the
        #: rounds before them are visible (no hand-offs); False: every round is pipelined.
        self.inline = inline
        self._committing = False  # a thread is inside _commit (hooks included)
        self._threads: list[threading.Thread] = []
        self._round_ts: dict[int, int] = {}  # seq -> store time of its first record
        #: Inline rounds with fewer records are applied the serial way (SERIAL_BELOW).
        self.serial_below = SERIAL_BELOW

    # ------------------------------------------------------------------ threads

    def start(self) -> None:
        self._threads = [NamedThread(target=self._prepare_loop, name=f"tidemq-prep-{i}",
                                     daemon=True) for i in range(self.workers)]
        self._threads.append(NamedThread(target=self._commit_loop, name="tidemq-commit",
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
            self._ring_filled.notify_all()
        for t in self._threads:
            t.join()
        self._threads = []

    def run_once(self, batches: list[DispatchBatch]) -> None:
        """Called by the builder thread with each confirmed round: number it, then hand a
        full round (a backlog) to the preparers once the ring has room, or commit a
        smaller one right here once the rounds before it are visible (``inline``).
        Numbered rounds count as in flight until they are visible (:meth:`_in_flight`)."""
        records = (len(batches[0].phys) if len(batches) == 1
                   else sum(map(len, map(_PHYS, batches))))
        inline = self.inline and not 0 < self.round_records <= records
        # commit_seq before _committing: a committer sets _committing before it moves
        # commit_seq and clears it after the round's hooks, so both reads passing means
        # every numbered round is visible and its hooks have run.
        if (inline and records < self.serial_below and self.commit_seq == self._next_seq
                and not self._committing):
            # Nothing in flight: the round is the serial dispatcher's, with its steps and
            # no number (the builder numbers every round, so none can start meanwhile).
            Dispatcher.run_once(self, batches)
            return
        with self._ring_cond:
            seq = self._next_seq
            self._next_seq = seq + 1
            self._round_ts[seq] = batches[0].store_timestamp
            self._busy = False  # the builder holds nothing unnumbered any more
            self._round_start = 0  # the round's lag is measured by _round_ts now
            while not self._stop and self.error is None and (
                    (self.commit_seq < seq or self._committing) if inline
                    else seq - self.commit_seq >= self.ring_size):
                self._ring_cond.wait(0.1)
            if inline and self.commit_seq == seq and not self._committing:
                self._committing = True
            else:
                inline = False  # stopping (or failed) while waiting: the committer takes it
        if not inline:
            self._work.put((seq, batches))
            return
        try:
            if records < self.serial_below:
                touched = apply_batches(self.queues, self.index, batches)
                self._publish(PreparedRound(seq, batches, {}, {}, records=records), touched)
            else:
                self._commit(self._prepare(seq, batches))
        except BaseException as exc:
            self._fail(exc)
        finally:
            with self._ring_cond:
                self._committing = False
                self._ring_cond.notify_all()

    def _quiet(self) -> bool:
        """A round is applied on append only as the builder applies a small one with
        nothing in flight: every numbered round visible and its hooks run (as in
        :meth:`run_once`, ``commit_seq`` before ``_committing``)."""
        return self.inline and self.commit_seq == self._next_seq and not self._committing

    def _in_flight(self) -> bool:
        # ``_busy`` first: it is cleared only after the round got its number.
        return self._busy or self.commit_seq < self._next_seq

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
                if seq == self.commit_seq:
                    self._ring_filled.notify()

    def _commit_loop(self) -> None:
        while True:
            with self._ring_cond:
                while self.commit_seq not in self._ring:
                    if self.error is not None or (self._stop
                                                  and self.commit_seq >= self._next_seq):
                        return
                    self._ring_filled.wait(1.0)  # notified; the timeout is a safety net
                item = self._ring.pop(self.commit_seq)
                self._committing = True
            try:
                if isinstance(item, BaseException):
                    self._fail(item)
                    return
                self._commit(item)
            except BaseException as exc:
                self._fail(exc)
                return
            finally:
                with self._ring_cond:
                    self._committing = False
                    self._ring_cond.notify_all()

    def _fail(self, exc: BaseException) -> None:
        log.error("concurrent dispatch failed; consume queues stop advancing", exc_info=exc)
        with self._cond:
            self.error = exc
            self._busy = False
            self._cond.notify_all()
        with self._ring_cond:
            self._ring_cond.notify_all()  # a builder waiting for room gives up
            self._ring_filled.notify_all()

    # ------------------------------------------------------------------ prepare

    def _prepare(self, seq: int, batches: list[DispatchBatch]) -> PreparedRound:
        grouped: dict[tuple[str, int], list[DispatchBatch]] = {}
        records = 0
        for b in batches:
            grouped.setdefault((b.topic, b.queue_id), []).append(b)
            records += len(b.phys)
        columns = {}
        batch_groups = {}
        batch_topics = self.queues.batch_topics
        for key, group in grouped.items():
            if key[0] in batch_topics:
                batch_groups[key] = group
                continue
            columns[key] = _columns(group)
        prepared = PreparedRound(seq, batches, columns, batch_groups, records=records)
        if self.queues.lmq is not None:
            self._prepare_lmq(prepared)
        return prepared

    def _prepare_lmq(self, prepared: PreparedRound) -> None:
        lmq = self.queues.lmq
        assert lmq is not None
        prepared.lmq_generation = lmq.generation  # before any floor is read
        fanout = build_fanout(FanoutRecords(*fanout_columns(prepared.batches)), lmq.floors,
                              lmq.dispatched)
        if fanout is None:
            prepared.lmq_batch, prepared.lmq_first, prepared.lmq_last = None, {}, {}
            prepared.lmq_entries = 0
            return
        prepared.lmq_batch, prepared.lmq_first, prepared.lmq_last = (
            fanout.batch, fanout.first, fanout.last)
        prepared.lmq_entries = fanout.entries

    # ------------------------------------------------------------------ commit

    @staticmethod
    def _undeleted(p: PreparedRound, key: tuple[str, int], before: int
                   ) -> tuple[int, Column, Column, Column] | None:
        """The columns of ``key``'s records in the round from log offset ``before`` on: a
        deleted topic's records get no queue entry (as in ``apply_batches``), those of the
        topic created again under its name in the same round do."""
        kept = [b for b in p.batches if (b.topic, b.queue_id) == key and b.phys[0] >= before]
        return _columns(kept) if kept else None

    def _commit(self, p: PreparedRound) -> None:
        touched: dict[tuple[str, int], int] = {}
        get_or_create = self.queues.get_or_create
        deleted = self.queues.deleted.before
        for key, prepared in p.columns.items():
            columns: tuple[int, Column, Column, Column] | None = prepared
            if deleted and key[0] in deleted and prepared[1][0] < deleted[key[0]]:
                columns = self._undeleted(p, key, deleted[key[0]])
            if columns is None:
                continue
            first, phys, sizes, tags = columns
            q = get_or_create(*key)
            if isinstance(q, BatchConsumeQueue):  # the topic turned BatchCQ meanwhile
                touched[key] = _append(q, [b for b in p.batches
                                           if (b.topic, b.queue_id) == key
                                           and not self.queues.deleted.hides(key[0], b.phys[0])])
            else:
                touched[key] = q.append(first, phys, sizes, tags)
        for key, group in p.batch_queue_groups.items():
            kept = group if not deleted or key[0] not in deleted else [
                b for b in group if b.phys[0] >= deleted[key[0]]]
            if kept:
                touched[key] = _append(get_or_create(*key), kept)
        lmq = self.queues.lmq
        end = p.batches[-1].end
        while lmq is not None and p.lmq_batch is not None:
            written = lmq.write_prepared(p.lmq_batch, p.lmq_last, end, p.lmq_entries,
                                         p.lmq_first, generation=p.lmq_generation)
            if written is None:  # an LMQ was deleted since: filter by the new floors
                self._prepare_lmq(p)
                continue
            touched.update(zip(zip(written, repeat(0)), written.values(), strict=True))
            break
        if self.index is not None:
            index_batches(self.index, p.batches)
        self._publish(p, touched)

    def _publish(self, p: PreparedRound, touched: dict[tuple[str, int], int]) -> None:
        """Advance the commit position, wake readers, then fire the hooks."""
        last = p.batches[-1]
        with self._cond:
            self.dispatched_offset = last.end
        with self._ring_cond:
            self.commit_seq = p.seq + 1
            self._round_ts.pop(p.seq, None)
            self._ring_cond.notify_all()
            if self.commit_seq in self._ring:  # prepared before the round it follows
                self._ring_filled.notify()
        with self._cond:
            self._cond.notify_all()  # drain() waits on the dispatcher's condition
        self.last_store_timestamp = last.store_timestamp
        self.dispatched_entries += p.records
        self._fire(touched, p.batches)


def _columns(group: list[DispatchBatch]) -> tuple[int, Column, Column, Column]:
    """The classic entries of one queue's batches in a round, as columns."""
    if len(group) == 1:
        g = group[0]
        phys: Sequence[int] = g.phys
        sizes: Sequence[int] = g.sizes
        tags: Sequence[int] = g.tags
    else:
        phys = [x for g in group for x in g.phys]
        sizes = [x for g in group for x in g.sizes]
        tags = [x for g in group for x in g.tags]
    return group[0].queue_offset, phys, sizes, tags


def _append(q: AnyQueue, group: list[DispatchBatch]) -> int:
    """Write one queue's batches as the serial dispatcher does for the queue's type."""
    if isinstance(q, BatchConsumeQueue):
        max_offset = q.max_offset
        for g in group:
            max_offset = q.append(g.queue_offset, g.phys, g.sizes, g.tags,
                                  store_ts=g.store_timestamp, batch_sizes=g.batch_sizes)
        return max_offset
    first, phys, sizes, tags = _columns(group)  # a classic queue of a topic now BatchCQ
    return q.append(first, phys, sizes, tags)
