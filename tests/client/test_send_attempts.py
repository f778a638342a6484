"""The attempts of one send (no I/O): queue choice over routes, deadline, failures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.errors import NoRouteError
from tidemq.client.selector import RoundRobin, SendPlan
from tidemq.client.send_attempts import MIN_WAIT, SendAttempts
from tidemq.client.topic_route import TopicRoute
from tidemq.codec.bodies import BrokerData, QueueData, TopicRouteData
from tidemq.errors import (
    ConnectionLost,
    RequestTimeout,
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.types import Message, MessageQueue

MSG = Message("T", b"x")

_RETRIABLE = st.sampled_from([ConnectionLost("x"), RequestTimeout("x", 310, 1, 1.0),
                              error_for_code(ResponseCode.SYSTEM_BUSY)])


def _route(*brokers: str, masters: bool = True) -> TopicRoute:
    return TopicRoute.build("T", TopicRouteData(
        queue_datas=[QueueData(broker_name=b, read_queue_nums=2, write_queue_nums=2, perm=6)
                     for b in brokers],
        broker_datas=[BrokerData(cluster="c", broker_name=b,
                                 broker_addrs={0 if masters else 1: f"{b}:10911"})
                      for b in brokers]))


def _attempts(route: TopicRoute, *, attempts: int = 3, budget: float = 3.0,
              queue: MessageQueue | None = None) -> SendAttempts:
    plan = SendPlan(MSG, attempts=attempts, counter=RoundRobin(0), queue=queue)
    return SendAttempts(plan, route, budget=budget, now=10.0)


def test_a_failed_attempt_moves_to_another_broker_of_the_new_route() -> None:
    attempts = _attempts(_route("a", "b"))
    mq = attempts.next(10.0)
    assert mq == MessageQueue("T", "a", 0)
    assert attempts.address(mq) == "a:10911"
    assert attempts.wait(11.0) == pytest.approx(2.0)
    assert attempts.failed(mq, "a:10911", ConnectionLost("a:10911"))
    attempts.rerouted(_route("a", "b", "c"))
    second = attempts.next(11.0)
    assert second is not None and second.broker_name != "a"
    assert attempts.address(second) == f"{second.broker_name}:10911"


def test_the_last_failure_is_the_error_when_attempts_run_out() -> None:
    attempts = _attempts(_route("a", "b"), attempts=2)
    errors = [error_for_code(ResponseCode.SYSTEM_BUSY), ConnectionLost("b:10911")]
    for exc in errors[:1]:
        mq = attempts.next(10.0)
        assert mq is not None and attempts.failed(mq, "x", exc)
    mq = attempts.next(10.0)
    assert mq is not None and not attempts.failed(mq, "x", errors[1])
    assert attempts.next(10.0) is None
    assert attempts.exhausted() is errors[1]


def test_a_failure_that_is_not_retriable_ends_the_send() -> None:
    attempts = _attempts(_route("a", "b"))
    mq = attempts.next(10.0)
    assert mq is not None
    assert not attempts.failed(mq, "a:10911", error_for_code(ResponseCode.MESSAGE_ILLEGAL))


def test_a_fixed_queue_is_tried_once() -> None:
    fixed = MessageQueue("T", "b", 1)
    attempts = _attempts(_route("a", "b"), queue=fixed)
    assert attempts.next(10.0) == fixed
    assert not attempts.failed(fixed, "b:10911", ConnectionLost("b:10911"))
    assert attempts.next(10.0) is None


def test_no_attempt_starts_after_the_deadline_and_the_error_is_a_timeout() -> None:
    attempts = _attempts(_route("a"), budget=2.0)
    assert attempts.next(12.0) is None
    err = attempts.exhausted()
    assert isinstance(err, RequestTimeout) and err.timeout_ms == pytest.approx(2000.0)
    assert err.address == "T"


def test_an_attempt_near_the_deadline_still_gets_a_short_wait() -> None:
    attempts = _attempts(_route("a"), budget=2.0)
    assert attempts.next(11.9999) is not None
    assert attempts.wait(12.5) == MIN_WAIT


def test_a_failed_refresh_keeps_the_route() -> None:
    route = _route("a")
    attempts = _attempts(route)
    attempts.rerouted(ConnectionLost("ns:9876"))
    assert attempts.route is route


def test_a_route_without_writable_masters_has_no_queue_to_choose() -> None:
    attempts = _attempts(_route("a", masters=False))
    with pytest.raises(NoRouteError):
        attempts.next(10.0)
    fixed = MessageQueue("T", "a", 0)
    pinned = _attempts(_route("a", masters=False), queue=fixed)
    assert pinned.next(10.0) == fixed
    assert pinned.address(fixed) is None  # the driver asks its cache


@given(attempts=st.integers(min_value=1, max_value=6),
       budget=st.floats(min_value=0.5, max_value=10.0),
       steps=st.lists(st.floats(min_value=0.0, max_value=3.0), min_size=1, max_size=10),
       failures=st.lists(_RETRIABLE, min_size=10, max_size=10))
def test_never_more_attempts_than_planned_nor_one_after_the_deadline(
        attempts: int, budget: float, steps: list[float],
        failures: list[TideMQError]) -> None:
    sends = _attempts(_route("a", "b"), attempts=attempts, budget=budget)
    now, tried = 10.0, 0
    for step, exc in zip(steps, failures, strict=False):
        now += step
        mq = sends.next(now)
        if mq is None:
            break
        assert now < sends.deadline
        assert sends.wait(now) >= MIN_WAIT
        tried += 1
        if not sends.failed(mq, "x", exc):
            break
    assert tried <= attempts
    if tried == attempts:
        assert sends.next(now) is None
    if tried:
        assert sends.exhausted() is failures[tried - 1]
    else:
        assert isinstance(sends.exhausted(), RequestTimeout)
