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
from tidemq.store.lmq_store import LmqEntry, LmqStore
from tidemq.store.queues import ConsumeQueueSet

__all__ = ["DispatchBatch", "DispatchHook", "Dispatcher", "IndexSink"]

#: Rounds this small wait ``linger`` before being taken.
LINGER_BELOW = 64

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
            for g in group:
                touched[key] = cq.append(g.queue_offset, g.phys, g.sizes, g.tags,
                                         store_ts=g.store_timestamp, batch_sizes=g.batch_sizes)
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


def _apply_lmq(lmq: LmqStore, batches: list[DispatchBatch],
               touched: dict[tuple[str, int], int]) -> None:
    """Fan records out to their light message queues (queue id 0), one write batch."""
    entries: list[LmqEntry] = []
    for b in batches:
        if not b.lmq:
            continue
        for i, target in enumerate(b.lmq):
            if target is None:
                continue
            names, offsets = target
            phys, size, tags = b.phys[i], b.sizes[i], b.tags[i]
            for name, offset in zip(names, offsets, strict=True):
                entries.append(LmqEntry(name, offset, phys, size, tags, b.store_timestamp))
    if entries:
        for name, max_offset in lmq.write(entries, batches[-1].end).items():
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
        self._last_lag_warning = 0.0
        self.error: BaseException | None = None
        self._busy = False
        self._paused = False
        self._idle = False
        self.linger = linger_ms / 1000
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
            while self.error is None and (
                self._busy or (self._pending and self._pending[0].end <= target)
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._wakeup.set()
                self._cond.wait(min(remaining, 0.05))
        return self.error is None

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
        """Store timestamp of the oldest record not yet visible (0 if none)."""
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
                confirm = self._confirm()
                out = []
                while pending and pending[0].end <= confirm:
                    out.append(pending.popleft())
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
        while True:
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
            lag_ms = self._clock() - batches[0].store_timestamp
            now = time.monotonic()
            if lag_ms > self.lag_warn_ms and now - self._last_lag_warning > 10:
                self._last_lag_warning = now
                log.warning("dispatch lag %.0f ms exceeds %d ms", lag_ms, self.lag_warn_ms)
