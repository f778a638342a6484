"""TransferRate against a clock the test moves: a second's bytes, then 0 when idle."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.replication.transfer_rate import TransferRate


def test_the_last_whole_second_is_reported_and_an_idle_link_reads_zero() -> None:
    rate = TransferRate()
    assert rate.per_second(100.0) == 0
    rate.add(300, 100.0)
    rate.add(200, 100.5)
    assert rate.per_second(100.9) == 0  # no window ended yet (the first started at 0)
    assert rate.per_second(101.2) == 500  # the window 100.0-101.0 ended
    rate.add(1000, 101.2)  # a new window: the one before is kept
    assert rate.per_second(101.5) == 500
    assert rate.per_second(102.3) == 1000
    assert rate.per_second(103.3) == 0  # silent for a second and more
    rate.add(10, 110.0)  # after a long silence the window before counts nothing
    assert rate.per_second(110.5) == 0


@given(st.lists(st.tuples(st.floats(0, 5), st.integers(0, 1 << 20)), max_size=30))
def test_a_rate_is_never_more_than_the_bytes_added(steps: list[tuple[float, int]]) -> None:
    rate = TransferRate()
    now, total = 1000.0, 0
    for gap, nbytes in steps:
        now += gap
        rate.add(nbytes, now)
        total += nbytes
        assert 0 <= rate.per_second(now) <= total
