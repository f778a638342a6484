"""A trace's note that its consume records may not be indexed yet: a send and no
delivery, of a message stored a few seconds ago or less (the consumer sends its records a
moment after consuming, the broker indexes them a moment after storing them)."""

from __future__ import annotations

import pytest

from tidemq.client.trace_view import (
    RECENT_MS,
    ConsumeTrace,
    MessageTrace,
    SendTrace,
    TransactionTrace,
    consumes_may_lag,
)

STORED = 1_700_000_000_000


def _send(store_ms: int = STORED, send_ms: int = STORED - 3) -> SendTrace:
    return SendTrace("pg", "10.0.0.1", send_ms, 3, True, "T", "", "", "10.0.0.2:10911",
                     "0A00000200002A9F0000000000000000", store_ms)


def _trace(sends: list[SendTrace], consumes: list[ConsumeTrace] | None = None,
           transactions: list[TransactionTrace] | None = None) -> MessageTrace:
    return MessageTrace("ID", sends, consumes or [], [], transactions or [])


@pytest.mark.parametrize("after", [0, 100, RECENT_MS - 1, -2000])  # -: the clocks differ
def test_a_send_stored_a_moment_ago_without_a_delivery_may_lack_its_consumes(
        after: int) -> None:
    assert consumes_may_lag(_trace([_send()]), STORED + after)


@pytest.mark.parametrize("after", [RECENT_MS, 60_000])
def test_an_older_send_without_a_delivery_was_not_consumed(after: int) -> None:
    assert not consumes_may_lag(_trace([_send()]), STORED + after)


def test_a_delivery_or_no_send_says_nothing() -> None:
    consumed = ConsumeTrace("cg", "10.0.0.3", STORED + 5, 0, 2, True)
    assert not consumes_may_lag(_trace([_send()], [consumed]), STORED)
    assert not consumes_may_lag(_trace([]), STORED)


def test_without_a_store_time_the_send_time_counts() -> None:
    unknown = _send(store_ms=0, send_ms=STORED)
    assert consumes_may_lag(_trace([unknown]), STORED + RECENT_MS - 1)
    assert not consumes_may_lag(_trace([unknown]), STORED + RECENT_MS)


def test_the_latest_send_or_commit_counts() -> None:
    old, new = _send(STORED - 60_000), _send(STORED)
    assert consumes_may_lag(_trace([old, new]), STORED + 1)
    committed = TransactionTrace("pg", "10.0.0.1", STORED, "COMMIT_MESSAGE", False, "ID",
                                 "10.0.0.2:10911")
    assert consumes_may_lag(_trace([old], transactions=[committed]), STORED + 1)
