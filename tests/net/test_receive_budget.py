"""ReceiveBudget: which connections a server closes when incomplete frames pile up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.net.receive_budget import ReceiveBudget, Verdict


def test_within_the_limit_nobody_is_named() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    assert budget.update("a", 60, now=0.0) == ((), ())
    assert budget.update("b", 40, now=1.0) == ((), ())
    assert (budget.total, len(budget)) == (100, 2)
    assert budget.update("a", 0, now=2.0) == ((), ())  # its frame completed
    assert (budget.total, budget.held("a"), len(budget)) == (40, 0, 1)


def test_the_most_bytes_for_the_longest_go_first() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    budget.update("slow", 30, now=0.0)  # trickling for 10 s: 300 byte-seconds
    budget.update("big", 50, now=9.0)  # more bytes, held 1 s: 50 byte-seconds
    verdict = budget.update("fast", 30, now=10.0)  # 110 > 100: one must go
    assert verdict == Verdict((), ("slow",))
    assert budget.total == 80 and budget.held("slow") == 0


def test_as_many_go_as_it_takes_and_the_reporter_may_be_one() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    for i, name in enumerate("abcd"):
        budget.update(name, 25, now=float(i))
    assert budget.update("e", 90, now=10.0).close == ("a", "b", "c", "d")
    assert budget.total == 90
    assert budget.update("e", 150, now=11.0).close == ("e",)  # alone over the limit
    assert budget.total == 0


def test_a_completed_frame_restarts_the_clock() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    budget.update("streamer", 40, now=0.0)
    budget.update("streamer", 40, now=50.0, completed=True)  # a new frame since
    budget.update("stuck", 40, now=45.0)
    assert budget.update("x", 30, now=51.0).close == ("stuck",)  # 240 vs 40 byte-seconds


def test_release_forgets() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    budget.update("a", 70, now=0.0)
    budget.release("a")
    budget.release("a")
    assert budget.total == 0 and budget.update("b", 100, now=1.0) == ((), ())


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ReceiveBudget(0)


def test_spare_buffers_are_given_back_before_anyone_is_closed() -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(100)
    assert budget.update("idle1", 0, now=0.0, spare=30) == ((), ())
    assert budget.update("idle2", 0, now=0.0, spare=20) == ((), ())
    budget.update("slow", 40, now=0.0)
    assert budget.update("new", 20, now=5.0) == Verdict(("idle1",), ())  # 110: one trim
    assert (budget.total, budget.spare("idle1"), budget.spare("idle2")) == (80, 0, 20)
    assert budget.update("new", 70, now=6.0) == Verdict(("idle2",), ("slow",))
    assert budget.total == 70
    budget.update("new", 0, now=7.0, spare=64)  # frame done, buffer kept
    assert (budget.held("new"), budget.spare("new"), budget.total) == (0, 64, 64)
    budget.release("new")
    assert budget.total == 0 and len(budget) == 0


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 300), st.booleans(),
                          st.integers(0, 200)), max_size=60))
def test_the_total_is_the_sum_held_and_ends_within_the_limit(
        reports: list[tuple[str, int, bool, int]]) -> None:
    budget: ReceiveBudget[str] = ReceiveBudget(500)
    held: dict[str, int] = {}
    spare: dict[str, int] = {}
    for t, (name, n, completed, buffer) in enumerate(reports):
        kept = 0 if n else buffer  # a buffer is spare only between frames
        trim, close = budget.update(name, n, now=float(t), completed=completed, spare=kept)
        held[name], spare[name] = n, kept
        for victim in trim:
            spare[victim] = 0
        for victim in close:
            held[victim] = 0
        assert budget.total == sum(held.values()) + sum(spare.values()) <= 500
        assert all(budget.held(k) == v for k, v in held.items())
        assert all(budget.spare(k) == v for k, v in spare.items())
