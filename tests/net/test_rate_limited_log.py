"""RateLimitedLog: a burst per period, the rest counted and reported."""

from __future__ import annotations

import logging

import pytest

from tidemq.net.rate_limited_log import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_per_period_then_the_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("t.limited"), burst=3, period=10.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="t.limited"):
        sent = [limited.warning("bad frame from %s", f"peer{i}") for i in range(10)]
        assert sent == [True] * 3 + [False] * 7
        assert limited.suppressed == 7
        clock.now += 10.0  # a new period
        assert limited.warning("bad frame from %s", "peer10")
    assert [r.getMessage() for r in caplog.records] == [
        "bad frame from peer0", "bad frame from peer1", "bad frame from peer2",
        "bad frame from peer10 [7 similar lines suppressed]"]
    assert caplog.records[-1].levelno == logging.WARNING


def test_flush_reports_what_no_later_line_did(caplog: pytest.LogCaptureFixture) -> None:
    limited = RateLimitedLog(logging.getLogger("t.flush"), burst=1, period=60.0,
                             clock=Clock())
    with caplog.at_level(logging.INFO, logger="t.flush"):
        limited.info("one")
        limited.info("two")
        limited.info("three")
        limited.flush()
        limited.flush()  # nothing more to say
    assert [r.getMessage() for r in caplog.records] == ["one", "2 similar lines suppressed"]


def test_a_disabled_level_costs_nothing_and_counts_nothing() -> None:
    logger = logging.getLogger("t.quiet")
    logger.setLevel(logging.ERROR)
    limited = RateLimitedLog(logger, burst=1, period=60.0, clock=Clock())
    assert not any(limited.warning("x") for _ in range(5))
    assert limited.suppressed == 0


def test_bad_settings() -> None:
    with pytest.raises(ValueError):
        RateLimitedLog(logging.getLogger("t"), burst=0)
