"""The console's in-memory history: for each series (a group's lag, a topic's put or get
rate), the last ``capacity`` samples as (epoch ms, value).

Memory is bounded twice: each series is a fixed ring of two machine arrays (16 bytes a
sample, allocated once), and there are at most ``max_series`` of them; a new series past
that evicts the one updated longest ago. Samples closer together than ``min_gap_ms``
replace the last one, so page views between two background rounds do not crowd out the
hour the ring is sized for.
"""

from __future__ import annotations

import math
from array import array

__all__ = ["History", "Series"]


class Series:
    """A ring of (epoch ms, value) samples, oldest first when read."""

    __slots__ = ("_count", "_start", "_times", "_values", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a series holds at least one sample")
        self.capacity = capacity
        self._times = array("q", bytes(8 * capacity))
        self._values = array("d", bytes(8 * capacity))
        self._start = 0
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def last_time(self) -> int | None:
        if not self._count:
            return None
        return self._times[(self._start + self._count - 1) % self.capacity]

    def add(self, ts_ms: int, value: float, min_gap_ms: int = 0) -> None:
        last = self.last_time()
        if last is not None and ts_ms - last < min_gap_ms:
            self._values[(self._start + self._count - 1) % self.capacity] = value
            return
        if self._count < self.capacity:
            i = (self._start + self._count) % self.capacity
            self._count += 1
        else:
            i = self._start
            self._start = (self._start + 1) % self.capacity
        self._times[i], self._values[i] = ts_ms, value

    def points(self) -> list[tuple[int, float]]:
        n = self.capacity
        return [(self._times[(self._start + k) % n], self._values[(self._start + k) % n])
                for k in range(self._count)]


class History:
    """Named series sized to keep ``seconds`` of samples taken every ``interval`` s."""

    def __init__(self, *, seconds: float = 3600.0, interval: float = 5.0,
                 max_series: int = 1024, min_gap_ms: int = 1000) -> None:
        self.capacity = max(2, math.ceil(seconds / interval) + 1)
        self.max_series = max_series
        self.min_gap_ms = min_gap_ms
        self._series: dict[str, Series] = {}

    def __len__(self) -> int:
        return len(self._series)

    def add(self, key: str, ts_ms: int, value: float) -> None:
        series = self._series.pop(key, None)  # re-inserted last: the dict is LRU-ordered
        if series is None:
            if len(self._series) >= self.max_series:
                self._series.pop(next(iter(self._series)))
            series = Series(self.capacity)
        series.add(ts_ms, value, self.min_gap_ms)
        self._series[key] = series

    def get(self, key: str) -> list[tuple[int, float]]:
        series = self._series.get(key)
        return series.points() if series is not None else []
