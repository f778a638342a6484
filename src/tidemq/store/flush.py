"""Commit-log flushing: ASYNC_FLUSH on an interval, SYNC_FLUSH by group commit.

ASYNC_FLUSH: every ``flushIntervalCommitLog`` ms, fdatasync when at least
``flushCommitLogLeastPages`` pages are dirty, or unconditionally every
``flushCommitLogThoroughInterval`` ms.

SYNC_FLUSH: each acknowledged append registers a waiter ``(end offset, future, deadline)``.
The flusher thread takes every waiter queued so far, runs one fdatasync for all of them,
and completes them in order. One fdatasync typically satisfies many appends. A watchdog
thread completes every waiter past its deadline with ``FLUSH_DISK_TIMEOUT``, also while
the flusher is stuck inside a stalled fdatasync.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from tidemq.errors import StoreReadOnly
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import StoreConfig

__all__ = ["FlushService", "FlushStatus"]

log = logging.getLogger(__name__)

PAGE = 4096


class FlushStatus(enum.Enum):
    FLUSHED = "FLUSHED"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    WRITE_ERROR = "WRITE_ERROR"


#: A SYNC_FLUSH waiter: (end offset to make durable, its future, monotonic deadline).
Waiter = tuple[int, concurrent.futures.Future[FlushStatus], float]


class FlushService:
    def __init__(self, commitlog: CommitLog, config: StoreConfig,
                 on_flushed: Callable[[int], None]) -> None:
        self.commitlog = commitlog
        self.config = config
        self._on_flushed = on_flushed
        self._cond = threading.Condition()
        self._waiters: deque[Waiter] = deque()
        self._inflight: list[Waiter] = []  # taken by the flusher, not yet completed
        self._stop = False
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._watch_stop = threading.Event()
        self.flushed_offset = commitlog.flushed_offset
        self.flush_count = 0
        self.last_flush_ms = 0.0

    def start(self) -> None:
        target = self._run_sync if self.config.sync_flush else self._run_async
        self._thread = threading.Thread(target=target, name="tidemq-flush", daemon=True)
        self._thread.start()
        if self.config.sync_flush:
            self._watchdog = threading.Thread(target=self._run_watchdog,
                                              name="tidemq-flush-watchdog", daemon=True)
            self._watchdog.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._watch_stop.set()
        if self._watchdog is not None:
            self._watchdog.join()
            self._watchdog = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with contextlib.suppress(StoreReadOnly):
            self._flush()
        self._complete_all()

    # ------------------------------------------------------------------ API

    def request(self, end_offset: int) -> concurrent.futures.Future[FlushStatus]:
        """A future completed once ``end_offset`` is durable (SYNC_FLUSH)."""
        fut: concurrent.futures.Future[FlushStatus] = concurrent.futures.Future()
        if end_offset <= self.flushed_offset:
            fut.set_result(FlushStatus.FLUSHED)
            return fut
        deadline = time.monotonic() + self.config.sync_flush_timeout / 1000
        with self._cond:
            self._waiters.append((end_offset, fut, deadline))
            self._cond.notify()
        return fut

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    # ------------------------------------------------------------------ work

    def _flush(self) -> int:
        t0 = time.perf_counter()
        offset = self.commitlog.flush()
        self.last_flush_ms = (time.perf_counter() - t0) * 1000
        self.flush_count += 1
        if offset > self.flushed_offset:
            self.flushed_offset = offset
            self._on_flushed(offset)
        return offset

    def _complete_all(self) -> None:
        with self._cond:
            waiters, self._waiters = list(self._waiters), deque()
        for end, fut, _ in waiters:
            _complete(fut, FlushStatus.FLUSHED if end <= self.flushed_offset
                      else FlushStatus.FLUSH_DISK_TIMEOUT)

    def _run_watchdog(self) -> None:
        """Time out waiters past their deadline, whatever the flusher is doing."""
        timeout = self.config.sync_flush_timeout / 1000
        while True:
            with self._cond:
                live = [w for w in (*self._inflight, *self._waiters) if not w[1].done()]
            now = time.monotonic()
            later = [deadline for _, fut, deadline in live if deadline > now]
            for _, fut, deadline in live:
                if deadline <= now:
                    _complete(fut, FlushStatus.FLUSH_DISK_TIMEOUT)
            if self._watch_stop.wait(min(later) - now if later else timeout):
                return

    def _run_sync(self) -> None:
        while True:
            with self._cond:
                # Waiters are served at once; writes nobody waits for (WAIT=false) are
                # flushed within 10 ms too, so they become visible to consumers.
                while (not self._waiters and not self._stop
                       and self.commitlog.max_offset <= self.flushed_offset):
                    self._cond.wait(0.01)
                if not self._waiters and not self._stop:
                    self._cond.wait(0.01)
                if self._stop:
                    return
                batch = list(self._waiters)
                self._waiters.clear()
                self._inflight = batch
            status = FlushStatus.FLUSHED
            try:
                flushed = self._flush()
            except StoreReadOnly:
                flushed = self.flushed_offset
                status = FlushStatus.WRITE_ERROR
            now = time.monotonic()
            retry: list[Waiter] = []
            for item in batch:
                end, fut, deadline = item
                if fut.done():  # the watchdog timed it out
                    continue
                if end <= flushed:
                    _complete(fut, FlushStatus.FLUSHED)
                elif status is FlushStatus.WRITE_ERROR:
                    _complete(fut, status)
                elif now > deadline:
                    _complete(fut, FlushStatus.FLUSH_DISK_TIMEOUT)
                else:
                    retry.append(item)
            with self._cond:
                self._inflight = []
                if retry:
                    self._waiters.extendleft(reversed(retry))

    def _run_async(self) -> None:
        interval = self.config.flush_interval_commit_log / 1000
        least = self.config.flush_commit_log_least_pages * PAGE
        thorough = self.config.flush_commit_log_thorough_interval / 1000
        last_thorough = time.monotonic()
        while True:
            with self._cond:
                if not self._stop:
                    self._cond.wait(interval)
                stopping = self._stop
            if stopping:
                return
            now = time.monotonic()
            dirty = self.commitlog.dirty_bytes()
            if dirty and (dirty >= least or now - last_thorough >= thorough):
                try:
                    self._flush()
                except StoreReadOnly:
                    log.error("commit-log flush failed; the store is read-only")
                    return
                if now - last_thorough >= thorough:
                    last_thorough = now


def _complete(fut: concurrent.futures.Future[FlushStatus], status: FlushStatus) -> None:
    """Set the result unless the flusher or the watchdog already did."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        fut.set_result(status)
