"""The charts' bounded history: rings of samples, merged when too close, evicted when
too many series."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.console.history import History, Series


def test_close_samples_merge_and_the_ring_is_bounded() -> None:
    h = History(seconds=10, interval=5, max_series=2, min_gap_ms=500)
    assert h.capacity == 3
    h.add("lag:g", 1000, 10)
    h.add("lag:g", 1200, 11)  # replaces the last sample's value
    assert h.get("lag:g") == [(1000, 11.0)]
    for i in range(5):
        h.add("lag:g", 2000 + i * 1000, i)
    assert h.get("lag:g") == [(4000, 2.0), (5000, 3.0), (6000, 4.0)]
    h.add("lag:a", 1, 1)
    h.add("lag:b", 1, 1)  # a third series evicts the one updated longest ago
    assert h.get("lag:g") == [] and h.get("lag:b") == [(1, 1.0)] and len(h) == 2


def test_an_hour_at_five_seconds_fits() -> None:
    h = History(seconds=3600, interval=5)
    for i in range(2000):
        h.add("put:T", i * 5000, i)
    points = h.get("put:T")
    assert len(points) == h.capacity == 721
    assert points[-1][0] - points[0][0] == 3600 * 1000


@given(st.integers(1, 20), st.lists(st.tuples(st.integers(0, 50), st.integers(0, 10**6)),
                                   max_size=100))
def test_a_series_keeps_the_last_samples_in_order(capacity: int,
                                                  steps: list[tuple[int, int]]) -> None:
    series = Series(capacity)
    expected: list[tuple[int, float]] = []
    ts = 0
    for gap, value in steps:
        ts += gap
        series.add(ts, value, min_gap_ms=10)
        if expected and ts - expected[-1][0] < 10:
            expected[-1] = (expected[-1][0], float(value))
        else:
            expected.append((ts, float(value)))
    assert series.points() == expected[-capacity:]
    assert len(series) == min(capacity, len(expected))
