"""ReceiveBudget: which connections a server closes when incomplete frames pile up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.net.receive_budget import ReceiveBudget


def test_within_the_limit_nobody_is_named() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    assert budget.update("a", 60, now=0.0) == []
    assert budget.update("b", 40, now=1.0) == []
    assert (budget.total, len(budget)) == (100, 2)
    assert budget.update("a", 0, now=2.0) == []  # its frame completed, nothing held
    assert (budget.total, budget.held("a"), len(budget)) == (40, 0, 1)


def test_the_most_bytes_for_the_longest_go_first() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    budget.update("slow", 30, now=0.0)  # trickling for 10 s: 300 byte-seconds
    budget.update("big", 50, now=9.0)  # more bytes, held 1 s: 50 byte-seconds
    victims = budget.update("fast", 30, now=10.0)  # 110 > 100: one must go
    assert victims == ["slow"]
    assert budget.total == 80 and budget.held("slow") == 0


def test_as_many_go_as_it_takes_and_the_reporter_may_be_one() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    for i, name in enumerate("abcd"):
        budget.update(name, 25, now=float(i))
    assert budget.update("e", 90, now=10.0) == ["a", "b", "c", "d"]
    assert budget.total == 90
    assert budget.update("e", 150, now=11.0) == ["e"]  # alone over the limit
    assert budget.total == 0


def test_a_completed_frame_restarts_the_clock() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    budget.update("streamer", 40, now=0.0)
    budget.update("streamer", 40, now=50.0, completed=True)  # a new frame since
    budget.update("stuck", 40, now=45.0)
    assert budget.update("x", 30, now=51.0) == ["stuck"]  # 240 vs 40 byte-seconds


def test_release_forgets() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    budget.update("a", 70, now=0.0)
    budget.release("a")
    budget.release("a")
    assert budget.total == 0 and budget.update("b", 100, now=1.0) == []


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ReceiveBudget(0)


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 300), st.booleans()),
                max_size=60))
def test_the_total_is_the_sum_held_and_ends_within_the_limit(
        reports: list[tuple[str, int, bool]]) -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(500)
    held: dict[str, int] = {}
    for t, (name, n, completed) in enumerate(reports):
        victims = budget.update(name, n, now=float(t), completed=completed)
        held[name] = n
        for victim in victims:
            held[victim] = 0
        assert budget.total == sum(held.values()) <= 500
        assert all(budget.held(k) == v for k, v in held.items())
