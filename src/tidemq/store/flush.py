"""Commit-log flushing: ASYNC_FLUSH on an interval, SYNC_FLUSH by group commit.

ASYNC_FLUSH: every ``flushIntervalCommitLog`` ms, fdatasync when at least
``flushCommitLogLeastPages`` pages are dirty, or unconditionally every
``flushCommitLogThoroughInterval`` ms.

SYNC_FLUSH: an append that must be acknowledged as durable joins the open
:class:`FlushGroup`. The flusher thread closes that group (later appends join a new
one), reads the commit-log end -- every member wrote its record before -- runs one
fdatasync and finishes the group, which wakes all its members at once. One fdatasync
typically satisfies many appends, and joining costs a counter increment: no object
per waiter. Waiting is bounded by each member's own deadline; members that need a
:class:`concurrent.futures.Future` (the broker's event loop) get one per member on
request, and a watchdog thread completes those past their deadline with
``FLUSH_DISK_TIMEOUT``, also while the flusher is stuck inside a stalled fdatasync.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable

from tidemq.errors import StoreReadOnly
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import StoreConfig
from tidemq.store.threads import NamedThread

__all__ = ["FLUSHED_GROUP", "FlushGroup", "FlushService", "FlushStatus"]

log = logging.getLogger(__name__)

PAGE = 4096
#: SYNC_FLUSH under load (the last group had several members): before closing the next
#: group, wait this fraction of the last fdatasync's duration (at most GATHER_MAX
#: seconds). With many appender threads (``tidemq bench store``) a group otherwise holds
#: about half of them, as those woken by one flush miss the next. A lone appender never
#: waits for it.
GATHER_FRACTION = 0.25
GATHER_MAX = 0.001
_monotonic = time.monotonic


class FlushStatus(enum.Enum):
    FLUSHED = "FLUSHED"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    WRITE_ERROR = "WRITE_ERROR"


class FlushGroup:
    """The appends one group commit makes durable; its members share it.

    :attr:`status` is ``None`` until the flusher finishes the group. Blocking waiters
    share one event: finishing wakes them all at once. (A lock handed from one waiter
    to the next was tried: the serial wake-ups made the groups smaller.)
    """

    __slots__ = ("_futures", "_gate", "_lock", "members", "status")

    def __init__(self) -> None:
        self._gate = threading.Event()
        self._lock = threading.Lock()
        self._futures: dict[float, concurrent.futures.Future[FlushStatus]] = {}
        self.status: FlushStatus | None = None
        #: Members that joined (approximate under races, but never 0 after a join): the
        #: flusher flushes at once when there are any.
        self.members = 0

    def wait(self, deadline: float, timeout: float | None = None) -> FlushStatus:
        """Block until the group is finished; ``FLUSH_DISK_TIMEOUT`` once ``deadline``
        (monotonic) passes first. Raises :class:`TimeoutError` when ``timeout`` seconds
        run out before either (as ``Future.result`` does)."""
        status = self.status
        if status is not None:
            return status
        remaining = deadline - _monotonic()
        limit = remaining if timeout is None or timeout >= remaining else timeout
        if limit > 0:
            self._gate.wait(limit)
        status = self.status
        if status is not None:
            return status
        if limit < remaining:
            raise TimeoutError(f"not durable within {timeout} s")
        return FlushStatus.FLUSH_DISK_TIMEOUT

    def future(self, deadline: float) -> concurrent.futures.Future[FlushStatus]:
        """A future for the member with ``deadline`` (the same one on every call),
        completed when the group is finished or, by the watchdog, at the deadline."""
        with self._lock:
            fut = self._futures.get(deadline)
            if fut is None:
                fut = self._futures[deadline] = concurrent.futures.Future()
                if self.status is not None:
                    fut.set_result(self.status)
                elif deadline <= _monotonic():
                    fut.set_result(FlushStatus.FLUSH_DISK_TIMEOUT)
            return fut

    def finish(self, status: FlushStatus) -> None:
        """Complete every member with ``status`` (the first call wins)."""
        with self._lock:
            if self.status is not None:
                return
            self.status = status
            futures = list(self._futures.values())
        self._gate.set()
        for fut in futures:
            _complete(fut, status)

    def expire(self, now: float) -> float | None:
        """Time out futures past their deadline; returns the next deadline, if any."""
        with self._lock:
            if self.status is not None or not self._futures:
                return None
            items = list(self._futures.items())
        later = None
        for deadline, fut in items:
            if deadline <= now:
                _complete(fut, FlushStatus.FLUSH_DISK_TIMEOUT)
            elif not fut.done() and (later is None or deadline < later):
                later = deadline
        return later


class _AlreadyDurable(FlushGroup):
    """The group of appends that were durable when they asked: lives forever, so its
    futures are made on demand instead of being kept."""

    __slots__ = ()

    def future(self, deadline: float) -> concurrent.futures.Future[FlushStatus]:
        fut: concurrent.futures.Future[FlushStatus] = concurrent.futures.Future()
        fut.set_result(FlushStatus.FLUSHED)
        return fut


FLUSHED_GROUP: FlushGroup = _AlreadyDurable()
FLUSHED_GROUP.finish(FlushStatus.FLUSHED)


class FlushService:
    def __init__(self, commitlog: CommitLog, config: StoreConfig,
                 on_flushed: Callable[[int], None]) -> None:
        self.commitlog = commitlog
        self.config = config
        self._on_flushed = on_flushed
        self._listeners: list[Callable[[int], None]] = []
        self._cond = threading.Condition()  # ASYNC_FLUSH interval and stop
        self._group = FlushGroup()  # the open group: the next flush finishes it
        #: Closed groups with the commit-log end their members are below, not finished.
        self._inflight: list[tuple[int, FlushGroup]] = []
        self._idle = False
        self._gather = False  # the last group had several members: the next may gather
        self._wakeup = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._watch_stop = threading.Event()
        self.flushed_offset = commitlog.flushed_offset
        self.flush_count = 0
        self.last_flush_ms = 0.0
        self._flush_lock = threading.Lock()
        self.timeout = config.sync_flush_timeout / 1000

    def start(self) -> None:
        target = self._run_sync if self.config.sync_flush else self._run_async
        self._thread = NamedThread(target=target, name="tidemq-flush", daemon=True)
        self._thread.start()
        if self.config.sync_flush:
            self._watchdog = NamedThread(target=self._run_watchdog,
                                         name="tidemq-flush-watchdog", daemon=True)
            self._watchdog.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._wakeup.set()
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

    def join(self, end_offset: int) -> FlushGroup:
        """The group whose commit makes ``end_offset`` durable (SYNC_FLUSH). The record
        must be in the commit log already (the append returned)."""
        if end_offset <= self.flushed_offset:
            return FLUSHED_GROUP
        group = self._group
        group.members += 1
        if self._idle:
            self._wakeup.set()
        return group

    def request(self, end_offset: int) -> concurrent.futures.Future[FlushStatus]:
        """A future completed once ``end_offset`` is durable (SYNC_FLUSH)."""
        return self.join(end_offset).future(_monotonic() + self.timeout)

    def add_flush_listener(self, listener: Callable[[int], None]) -> None:
        """Also call ``listener(offset)`` from the flushing thread each time the durable
        offset advances to ``offset`` (one call per group commit). It must be quick and
        must not raise; a caller on an event loop posts one callback from it."""
        self._listeners.append(listener)

    def wake(self) -> None:
        self._wakeup.set()
        with self._cond:
            self._cond.notify()

    # ------------------------------------------------------------------ work

    def flush_now(self) -> int:
        """Flush from another thread (the store's checkpoint), counted and announced like
        the flusher's own flushes; the flushed offset."""
        return self._flush()

    def _flush(self) -> int:
        with self._flush_lock:  # the flushed offset only advances, listeners in order
            t0 = time.perf_counter()
            offset = self.commitlog.flush()
            self.last_flush_ms = (time.perf_counter() - t0) * 1000
            self.flush_count += 1
            if offset > self.flushed_offset:
                self.flushed_offset = offset
                self._on_flushed(offset)
                for listener in self._listeners:
                    listener(offset)
        return offset

    def _complete_all(self) -> None:
        groups = [*self._inflight, (self.commitlog.max_offset, self._group)]
        self._inflight = []
        for target, group in groups:
            group.finish(FlushStatus.FLUSHED if target <= self.flushed_offset
                         else FlushStatus.FLUSH_DISK_TIMEOUT)

    def _run_watchdog(self) -> None:
        """Time out member futures past their deadline, whatever the flusher is doing."""
        while True:
            now = _monotonic()
            later = [d for _, group in (*self._inflight, (0, self._group))
                     if (d := group.expire(now)) is not None]
            if self._watch_stop.wait(min(later) - now if later else self.timeout):
                return

    def _close_group(self) -> FlushGroup | None:
        """Wait for a member (flushing at once) or 10 ms (flushing writes nobody waits
        for, WAIT=false, so they become visible); the group to flush, or ``None``."""
        group = self._group
        if not group.members and not self._stop:
            self._idle = True  # announce sleep, then re-check: a join is never lost
            if not group.members:
                self._wakeup.wait(0.01)
            self._wakeup.clear()
            self._idle = False
            self._gather = False
            if not group.members and self.commitlog.max_offset <= self.flushed_offset:
                return None
        if self._stop:
            return None
        if self._gather:
            # Under load: the members the last flush just woke are appending again; a
            # moment (a fraction of one fdatasync) lets them into this group instead of
            # the next, so groups stop splitting into two alternating halves.
            time.sleep(min(GATHER_MAX, self.last_flush_ms / 1000 * GATHER_FRACTION))
        self._gather = group.members > 1  # several appenders: the next group may gather
        self._group = FlushGroup()
        self._inflight.append((self.commitlog.max_offset, group))
        return group

    def _run_sync(self) -> None:
        while not self._stop:
            if self._close_group() is None:
                continue
            status = FlushStatus.FLUSHED
            try:
                flushed = self._flush()
            except StoreReadOnly:
                flushed = self.flushed_offset
                status = FlushStatus.WRITE_ERROR
            keep = []
            for target, group in self._inflight:
                if target <= flushed:
                    group.finish(FlushStatus.FLUSHED)
                elif status is FlushStatus.WRITE_ERROR:
                    group.finish(status)
                else:
                    keep.append((target, group))
            self._inflight = keep

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
