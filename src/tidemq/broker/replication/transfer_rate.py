"""Bytes a second over an HA link, as upstream's ``transferredByteInSecond``: the bytes
of the last whole second counted, 0 once a second has passed without any."""

from __future__ import annotations

__all__ = ["TransferRate"]


class TransferRate:
    """Counts bytes in one-second windows of the caller's clock (``time.monotonic()``
    seconds, given with each call: the caller has a reading at hand)."""

    __slots__ = ("_count", "_last", "_start")

    def __init__(self) -> None:
        self._start = 0.0
        self._count = 0
        self._last = 0

    def add(self, nbytes: int, now: float) -> None:
        if now - self._start >= 1.0:
            self._last = self._count if now - self._start < 2.0 else 0
            self._start = now
            self._count = 0
        self._count += nbytes

    def per_second(self, now: float) -> int:
        """The bytes of the last whole window; 0 when none ended within a second."""
        elapsed = now - self._start
        if elapsed < 1.0:
            return self._last
        return self._count if elapsed < 2.0 else 0
