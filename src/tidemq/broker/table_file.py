"""When a broker table's file is written (``topics.json``, ``subscriptionGroup.json``).

A change writes the file at once, before the change returns, so that nothing acknowledged
after it can outlive it -- unless it is made inside :meth:`TableFile.deferred`. Then it
only marks the table changed, and the caller has the file written on a thread: waited for
before it answers (:meth:`TableFile.write_pending`), or not waited for
(:meth:`TableFile.write_soon`). Thousands of entries take a while to encode, and the
event loop serves on meanwhile.

Writes are safe from any thread and do not overlap. The table is marked written before
its write reads it, so a change made meanwhile marks it changed again, for the next write;
a write that fails leaves it marked. :meth:`TableFile.write_pending` returns only once no
write that began before it is under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

__all__ = ["TableFile"]

log = logging.getLogger(__name__)


class TableFile:
    """``write`` (which reads the table and writes its file) run at the right moments;
    ``what`` names the table in the log."""

    def __init__(self, write: Callable[[], None], what: str) -> None:
        self._write = write
        self.what = what
        #: A change only marks the table changed (see :meth:`deferred`).
        self.later = False
        self._dirty = False
        self._lock = threading.Lock()

    def write(self) -> None:
        """Write the file now."""
        with self._lock:
            self._write_held()

    def _write_held(self) -> None:
        self._dirty = False  # first: a change while writing is written next time too
        try:
            self._write()
        except BaseException:
            self._dirty = True
            raise

    def changed(self) -> None:
        """The table changed: written now, or marked for later inside :meth:`deferred`."""
        self._dirty = True
        if not self.later:
            self.write()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Changes made inside only mark the table changed, for a write on a thread."""
        self.later = True
        try:
            yield
        finally:
            self.later = False

    @property
    def pending(self) -> bool:
        """Whether a change is not written yet."""
        return self._dirty

    def write_pending(self) -> None:
        """:meth:`write` if the table changed since the last write began; in any case,
        once a write under way is done (it may be the one that holds the change: a
        caller that answers after this must not answer before the file has it)."""
        with self._lock:
            if self._dirty:
                self._write_held()

    def write_soon(self) -> asyncio.Future[None] | None:
        """:meth:`write_pending` on a thread of the running event loop, a failure logged
        (the next change writes again); done at once, and ``None``, without one."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.write_pending()
            return None
        write = loop.run_in_executor(None, self.write_pending)
        write.add_done_callback(self._log_failure)
        return write

    def _log_failure(self, write: asyncio.Future[None]) -> None:
        if not write.cancelled() and (exc := write.exception()) is not None:
            log.error("writing %s failed (the next change writes it again): %s",
                      self.what, exc)
