"""Commit-log flushing: ASYNC_FLUSH on an interval, SYNC_FLUSH by group commit.

ASYNC_FLUSH: every ``flushIntervalCommitLog`` ms, fdatasync when at least
``flushCommitLogLeastPages`` pages are dirty, or unconditionally every
``flushCommitLogThoroughInterval`` ms.

SYNC_FLUSH: each acknowledged append registers a waiter ``(end offset, future, deadline)``.
The flusher thread takes every waiter queued so far, runs one fdatasync for all of them,
and completes them in order; a waiter past its deadline completes with
``FLUSH_DISK_TIMEOUT``. One fdatasync typically satisfies many appends.
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


class FlushService:
    def __init__(self, commitlog: CommitLog, config: StoreConfig,
                 on_flushed: Callable[[int], None]) -> None:
        self.commitlog = commitlog
        self.config = config
        self._on_flushed = on_flushed
        self._cond = threading.Condition()
        self._waiters: deque[tuple[int, concurrent.futures.Future[FlushStatus], float]] = deque()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.flushed_offset = commitlog.flushed_offset
        self.flush_count = 0
        self.last_flush_ms = 0.0

    def start(self) -> None:
        target = self._run_sync if self.config.sync_flush else self._run_async
        self._thread = threading.Thread(target=target, name="tidemq-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
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
            if not fut.done():
                fut.set_result(FlushStatus.FLUSHED if end <= self.flushed_offset
                               else FlushStatus.FLUSH_DISK_TIMEOUT)

    def _run_sync(self) -> None:
        while True:
            with self._cond:
                while not self._waiters and not self._stop:
                    self._cond.wait(0.01)
                if self._stop:
                    return
                batch = list(self._waiters)
                self._waiters.clear()
            status = FlushStatus.FLUSHED
            try:
                flushed = self._flush()
            except StoreReadOnly:
                flushed = self.flushed_offset
                status = FlushStatus.WRITE_ERROR
            now = time.monotonic()
            retry: list[tuple[int, concurrent.futures.Future[FlushStatus], float]] = []
            for item in batch:
                end, fut, deadline = item
                if end <= flushed:
                    fut.set_result(FlushStatus.FLUSHED)
                elif status is FlushStatus.WRITE_ERROR:
                    fut.set_result(status)
                elif now > deadline:
                    fut.set_result(FlushStatus.FLUSH_DISK_TIMEOUT)
                else:
                    retry.append(item)
            if retry:
                with self._cond:
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
