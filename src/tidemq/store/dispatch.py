"""Dispatch: turn appended records into consume-queue and index entries, in log order.

The append path already knows everything an entry needs, so it hands the dispatcher a
:class:`DispatchBatch` per put call (specs/store.md §10.17); the commit-log parse path is
kept for recovery only. The serial :class:`Dispatcher` thread drains every batch that is
confirmed (written under ASYNC_FLUSH, flushed under SYNC_FLUSH), groups entries per
queue, writes each queue's run in one bulk copy, indexes keys, advances the dispatched
position and only then fires ``on_dispatched`` hooks, so nothing is visible to pulls or
long-poll wake-ups before it is in its consume queue.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from tidemq.store.batch_consume_queue import BatchConsumeQueue
from tidemq.store.lmq_store import FanOut, LmqStore
from tidemq.store.queues import ConsumeQueueSet

__all__ = ["DispatchBatch", "DispatchHook", "Dispatcher", "IndexSink"]

#: Rounds this small wait ``linger`` before being taken.
LINGER_BELOW = 64
#: Seconds between two dispatch-lag warnings.
LAG_WARN_EVERY = 10.0

log = logging.getLogger(__name__)

#: ``hook(topic, queue_id, new_max_offset)`` called after entries became visible.
DispatchHook = Callable[[str, int, int], None]


@dataclasses.dataclass(slots=True)
class DispatchBatch:
    """Consecutive records of one queue appended by one put call."""

    topic: str
    queue_id: int
    queue_offset: int
    phys: Sequence[int]
    sizes: Sequence[int]
    tags: Sequence[int]
    store_timestamp: int
    end: int  # physical offset just past the last record
    keys: Sequence[tuple[str, ...]] | None = None  # per record: index keys (UNIQ_KEY, KEYS)
    batch_sizes: Sequence[int] | None = None  # per record: offsets covered (inner batches)
    #: per record: the LMQs it fans out to and its offset in each (RIP-28), or None
    lmq: Sequence[tuple[Sequence[str], Sequence[int]] | None] | None = None


class IndexSink(Protocol):
    """What the dispatcher needs from the key index (implemented by ``store.index``)."""

    def put_keys(self, topic: str, keys: tuple[str, ...], phys: int,
                 store_timestamp: int) -> None: ...


def apply_batches(queues: ConsumeQueueSet, index: IndexSink | None,
                  batches: list[DispatchBatch]) -> dict[tuple[str, int], int]:
    """Write ``batches`` (in log order) into their queues; returns new max offsets."""
    grouped: dict[tuple[str, int], list[DispatchBatch]] = {}
    for b in batches:
        grouped.setdefault((b.topic, b.queue_id), []).append(b)
    touched: dict[tuple[str, int], int] = {}
    for key, group in grouped.items():
        cq = queues.get_or_create(*key)
        if isinstance(cq, BatchConsumeQueue):
            touched[key] = _append_batches(cq, group)
            continue
        if len(group) == 1:
            g = group[0]
            touched[key] = cq.append(g.queue_offset, g.phys, g.sizes, g.tags)
            continue
        phys: list[int] = []
        sizes: list[int] = []
        tags: list[int] = []
        for g in group:
            phys += g.phys
            sizes += g.sizes
            tags += g.tags
        touched[key] = cq.append(group[0].queue_offset, phys, sizes, tags)
    if queues.lmq is not None:
        _apply_lmq(queues.lmq, batches, touched)
    if index is not None:
        for b in batches:
            if b.keys:
                for keys, phys_off in zip(b.keys, b.phys, strict=True):
                    if keys:
                        index.put_keys(b.topic, keys, phys_off, b.store_timestamp)
    return touched


def _append_batches(bcq: BatchConsumeQueue, group: list[DispatchBatch]) -> int:
    """Batches of one batch consume queue, in log order: one bulk append when their
    offsets follow each other (the append path's case), else one append each (which
    reports a gap)."""
    phys: list[int] = []
    sizes: list[int] = []
    tags: list[int] = []
    stamps: list[int] = []
    counts: list[int] = []
    expected = group[0].queue_offset
    for g in group:
        own = list(g.batch_sizes) if g.batch_sizes is not None else [1] * len(g.phys)
        if g.queue_offset != expected:
            break
        expected += sum(own)
        phys += g.phys
        sizes += g.sizes
        tags += g.tags
        stamps += [g.store_timestamp] * len(g.phys)
        counts += own
    else:
        return bcq.append(group[0].queue_offset, phys, sizes, tags, store_ts=stamps,
                          batch_sizes=counts)
    for g in group:
        last = bcq.append(g.queue_offset, g.phys, g.sizes, g.tags, store_ts=g.store_timestamp,
                          batch_sizes=g.batch_sizes)
    return last


def _apply_lmq(lmq: LmqStore, batches: list[DispatchBatch],
               touched: dict[tuple[str, int], int]) -> None:
    """Fan records out to their light message queues (queue id 0), one write batch."""
    records: list[FanOut] = []
    for b in batches:
        if not b.lmq:
            continue
        for i, target in enumerate(b.lmq):
            if target is not None:
                records.append((target[0], target[1], b.phys[i], b.sizes[i], b.tags[i],
                                b.store_timestamp))
    if records:
        for name, max_offset in lmq.write_fanout(records, batches[-1].end).items():
            touched[(name, 0)] = max_offset


class Dispatcher:
    """The serial dispatcher thread (the baseline; RIP-52-style concurrency is separate)."""

    def __init__(self, queues: ConsumeQueueSet, index: IndexSink | None,
                 confirm_offset: Callable[[], int], start_offset: int,
                 lag_warn_ms: int = 1000, clock: Callable[[], int] | None = None,
                 linger_ms: float = 0.0) -> None:
        self.queues = queues
        self.index = index
        self._confirm = confirm_offset
        self._pending: deque[DispatchBatch] = deque()
        self._cond = threading.Condition()
        self._hooks: list[DispatchHook] = []
        self._stop = False
        self._thread: threading.Thread | None = None
        self.dispatched_offset = start_offset
        self.last_store_timestamp = 0
        self.lag_warn_ms = lag_warn_ms
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._last_lag_warning: float | None = None  # time.monotonic() of it
        self.error: BaseException | None = None
        self._busy = False
        self._round_start = 0  # store time of the first record of the round in hand
        self._paused = False
        self._idle = False
        self.linger = linger_ms / 1000
        #: Records per round at most (0: everything confirmed is one round).
        self.round_records = 0
        self._wakeup = threading.Event()
        self.dispatched_entries = 0

    # ------------------------------------------------------------------ API

    def add_hook(self, hook: DispatchHook) -> None:
        self._hooks.append(hook)

    def submit(self, batch: DispatchBatch) -> None:
        """Queue a batch; called under the append lock, so batches arrive in log order.

        Lock-free on the hot path: ``deque.append`` is atomic, and the dispatcher is only
        signalled when it announced that it is going to sleep.
        """
        self._pending.append(batch)
        if self._idle and not self._wakeup.is_set():
            self._wakeup.set()

    def wake(self) -> None:
        """The confirm offset moved (a flush finished): re-check pending batches."""
        self._wakeup.set()

    def pause(self) -> None:
        """Stop taking new batches (benchmarks and tests build a backlog this way)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wakeup.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tidemq-dispatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def drain(self, timeout: float = 10.0) -> bool:
        """Block until everything confirmed at the time of the call is dispatched."""
        target = self._confirm()
        deadline = time.monotonic() + timeout
        with self._cond:
            # Pending first, then in flight: a batch leaves ``_pending`` only after
            # :meth:`_take` marked the dispatcher busy, so it is always seen in one of them.
            while self.error is None and (
                (self._pending and self._pending[0].end <= target) or self._in_flight()
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._wakeup.set()
                self._cond.wait(min(remaining, 0.05))
        return self.error is None

    def _in_flight(self) -> bool:
        """Whether batches taken from the pending queue are not visible yet."""
        return self._busy

    @property
    def pending_batches(self) -> int:
        return len(self._pending)

    def lag(self, written_offset: int) -> tuple[int, float]:
        """Dispatch lag: bytes behind the written end, and ms since the oldest waiting batch
        was stored (store timestamps are the append clock)."""
        behind = max(0, written_offset - self.dispatched_offset)
        oldest = self._oldest_undispatched()
        ms = float(max(0, self._clock() - oldest)) if oldest else 0.0
        return behind, ms

    def _oldest_undispatched(self) -> int:
        """Store timestamp of the oldest record not yet visible (0 if none): the round
        being written, else the oldest waiting batch."""
        if self._round_start:
            return self._round_start
        pending = self._pending
        return pending[0].store_timestamp if pending else 0

    # ------------------------------------------------------------------ thread

    def _ready(self) -> bool:
        pending = self._pending
        return bool(pending) and not self._paused and pending[0].end <= self._confirm()

    def _take(self) -> list[DispatchBatch]:
        pending = self._pending
        while True:
            if self._ready():
                if self.linger and len(pending) < LINGER_BELOW and not self._stop:
                    # A round of one batch costs nearly as much as a round of hundreds
                    # (per-queue numpy writes, a GIL hand-off per wake-up): let puts
                    # accumulate briefly. Bounded by ``linger`` seconds of extra latency.
                    time.sleep(self.linger)
                self._busy = True
                self._round_start = pending[0].store_timestamp  # before it leaves pending
                confirm = self._confirm()
                out = []
                limit, records = self.round_records, 0
                while pending and pending[0].end <= confirm:
                    batch = pending.popleft()
                    out.append(batch)
                    if limit:
                        records += len(batch.phys)
                        if records >= limit:
                            break
                return out
            if self._stop:
                return []
            # Announce sleep, then re-check, so a submit in between is never lost.
            self._idle = True
            if not self._ready() and not self._stop:
                self._wakeup.wait(0.05 if pending else 1.0)
            self._wakeup.clear()
            self._idle = False

    def _run(self) -> None:
        while self.error is None:  # a failed dispatcher takes nothing more
            batches = self._take()
            if not batches:
                return
            try:
                self.run_once(batches)
            except BaseException as exc:
                log.exception("dispatch failed; consume queues stop advancing")
                with self._cond:
                    self.error = exc
                    self._busy = False
                    self._cond.notify_all()
                return

    def run_once(self, batches: list[DispatchBatch]) -> None:
        touched = apply_batches(self.queues, self.index, batches)
        last = batches[-1]
        with self._cond:
            self.dispatched_offset = last.end
            self._busy = False
            self._round_start = 0
            self._cond.notify_all()
        self.last_store_timestamp = last.store_timestamp
        self.dispatched_entries += sum(len(b.phys) for b in batches)
        self._fire(touched, batches)

    def _fire(self, touched: dict[tuple[str, int], int], batches: list[DispatchBatch]) -> None:
        """Run the hooks for every queue that moved, then check the lag."""
        for (topic, queue_id), max_offset in touched.items():
            for hook in self._hooks:
                try:
                    hook(topic, queue_id, max_offset)
                except Exception:
                    log.exception("dispatch hook failed")
        if self.lag_warn_ms:
            self.warn_if_lagging(self._clock() - batches[0].store_timestamp)

    def warn_if_lagging(self, lag_ms: float) -> bool:
        """Log a warning when ``lag_ms`` passes ``lag_warn_ms`` (``dispatchLagWarnMs``), at
        most once per :data:`LAG_WARN_EVERY` seconds; returns whether it logged. Called
        with each round's lag and by the store's housekeeper, so a dispatcher that is
        stuck (nothing dispatched, so no round to measure) is reported too."""
        if not self.lag_warn_ms or lag_ms <= self.lag_warn_ms:
            return False
        now = time.monotonic()
        last = self._last_lag_warning
        if last is not None and now - last < LAG_WARN_EVERY:
            return False
        self._last_lag_warning = now
        log.warning("dispatch lag %.0f ms exceeds dispatchLagWarnMs=%d (%d batches waiting)",
                    lag_ms, self.lag_warn_ms, len(self._pending))
        return True
