"""A flag one thread sleeps on until another sets it.

The store's dispatch thread sleeps whenever it has dispatched everything, and the
appender sets its flag on the next append: on a broker answering one send at a time,
once per send, on the event loop's thread. :class:`threading.Event` is a
:class:`threading.Condition` underneath: each ``set`` takes its lock and walks its
waiters in Python, each ``wait`` makes a lock of its own. :class:`Wakeup` keeps the
same ``set`` / ``wait`` / ``clear`` with one lock, held while the flag is clear: setting
it is one ``release``, waiting one ``acquire`` (then a ``release``, since a set flag
stays set until cleared), clearing one ``acquire`` that does not block. A ``set`` may
land between a waiter's ``acquire`` and its ``release``: it releases the lock first, and
the waiter's ``release`` then finds the flag set already.
"""

from __future__ import annotations

import threading

__all__ = ["Wakeup"]


class Wakeup:
    """``set`` / ``wait`` / ``clear`` / ``is_set`` as :class:`threading.Event`'s."""

    __slots__ = ("_clear",)

    def __init__(self) -> None:
        self._clear = threading.Lock()  # held while the flag is clear
        self._clear.acquire()

    def set(self) -> None:
        try:  # noqa: SIM105 - suppress() would cost the appender a context manager
            self._clear.release()  # any thread may release a Lock
        except RuntimeError:
            pass  # set already

    def is_set(self) -> bool:
        return not self._clear.locked()

    def wait(self, timeout: float | None = None) -> bool:
        """Return once the flag is set (``True``) or after ``timeout`` seconds
        (``False``)."""
        if self._clear.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            try:  # noqa: SIM105 - as in set()
                self._clear.release()  # still set, until cleared
            except RuntimeError:
                pass  # a set() on another thread released it first: set all the same
            return True
        return False

    def clear(self) -> None:
        self._clear.acquire(blocking=False)
