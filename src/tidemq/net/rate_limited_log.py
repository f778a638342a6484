"""A logger wrapper that lets a burst of lines through per period and counts the rest.

Lines a peer can cause at will -- protocol errors, oversized frames, bad requests --
go through one of these, so a hostile or broken client cannot flood the log::

    protocol_log = RateLimitedLog(logging.getLogger(__name__), burst=20, period=60.0)
    protocol_log.warning("closing %s: protocol error from peer: %s", address, exc)

In each ``period`` seconds the first ``burst`` lines are logged; later ones are counted,
not formatted. The first line logged after some were dropped ends with how many were
(``[12 similar lines suppressed]``); :meth:`RateLimitedLog.flush` logs the count on its
own (a server calls it when it closes). :attr:`RateLimitedLog.suppressed` is the total
since start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """See the module docstring."""

    def __init__(self, logger: logging.Logger, *, burst: int = 20, period: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or period <= 0:
            raise ValueError("burst must be at least 1 and period positive")
        self.logger = logger
        self.burst = burst
        self.period = period
        self._clock = clock
        self._window_start = -period  # the first line opens a window
        self._in_window = 0  # lines logged in the current window
        self._pending = 0  # lines dropped and not reported yet
        self.suppressed = 0  # lines dropped since start

    def warning(self, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, msg, *args)

    def info(self, msg: str, *args: object) -> bool:
        return self.log(logging.INFO, msg, *args)

    def log(self, level: int, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at ``level`` unless this period's burst is spent; whether it
        was logged."""
        if not self.logger.isEnabledFor(level):
            return False
        now = self._clock()
        if now - self._window_start >= self.period:
            self._window_start, self._in_window = now, 0
        if self._in_window >= self.burst:
            self._pending += 1
            self.suppressed += 1
            return False
        self._in_window += 1
        if self._pending:
            msg = f"{msg} [%d similar lines suppressed]"
            args = (*args, self._pending)
            self._pending = 0
        self.logger.log(level, msg, *args)
        return True

    def flush(self) -> None:
        """Log how many lines were dropped since the last report, if any."""
        if self._pending:
            self.logger.warning("%d similar lines suppressed", self._pending)
            self._pending = 0
