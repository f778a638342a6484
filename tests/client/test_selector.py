"""Queue selection and the send-attempt plan (pure)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.selector import (
    RoundRobin,
    SendPlan,
    is_retriable,
    select_by_key,
    select_round_robin,
)
from tidemq.errors import ConnectionLost, RequestTimeout, error_for_code
from tidemq.formats.hashing import java_string_hash
from tidemq.types import Message, MessageQueue

QUEUES = [MessageQueue("T", b, i) for b in ("a", "b") for i in range(4)]
MSG = Message("T", b"x")


def test_round_robin_walks_every_queue() -> None:
    counter = RoundRobin(0)
    assert [select_round_robin(QUEUES, counter) for _ in range(9)] == QUEUES + QUEUES[:1]


def test_round_robin_skips_the_failed_broker() -> None:
    counter = RoundRobin(1)  # would pick a/1
    mq = select_round_robin(QUEUES, counter, avoid_broker="a")
    assert mq.broker_name == "b"


def test_round_robin_falls_back_when_one_broker() -> None:
    only_a = QUEUES[:4]
    assert select_round_robin(only_a, RoundRobin(0), avoid_broker="a").broker_name == "a"


def test_round_robin_needs_queues() -> None:
    with pytest.raises(ValueError):
        select_round_robin([], RoundRobin(0))


@settings(deadline=None, max_examples=200)
@given(st.text(min_size=1, max_size=40))
def test_select_by_key_matches_java(key: str) -> None:
    h = java_string_hash(key)
    java = int(abs(h) % len(QUEUES))  # Java: (h % n), then abs: same value
    assert select_by_key(QUEUES, key) == QUEUES[java]
    assert select_by_key(QUEUES, key) == select_by_key(list(QUEUES), key)


def test_select_by_key_vector() -> None:
    # "TagA".hashCode() == 2598919; 2598919 % 8 == 7
    assert select_by_key(QUEUES, "TagA") == QUEUES[7]


def test_retriable() -> None:
    assert is_retriable(error_for_code(2))
    assert is_retriable(error_for_code(17))
    assert not is_retriable(error_for_code(13))
    assert is_retriable(ConnectionLost("x"))
    assert is_retriable(RequestTimeout("x", 310, 1, 10))
    assert not is_retriable(ValueError())


def test_plan_retries_on_another_broker() -> None:
    plan = SendPlan(MSG, attempts=3, counter=RoundRobin(0))
    first = plan.next_queue(QUEUES)
    assert first == QUEUES[0]
    assert plan.failed(first, error_for_code(2))
    second = plan.next_queue(QUEUES)
    assert second is not None and second.broker_name == "b"
    assert plan.failed(second, error_for_code(1))
    third = plan.next_queue(QUEUES)
    assert third is not None and third.broker_name == "a"
    assert not plan.failed(third, error_for_code(1))  # no attempt left
    assert plan.next_queue(QUEUES) is None
    assert len(plan.errors) == 3


def test_plan_stops_on_non_retriable() -> None:
    plan = SendPlan(MSG, attempts=3, counter=RoundRobin(0))
    mq = plan.next_queue(QUEUES)
    assert mq is not None
    assert not plan.failed(mq, error_for_code(13))


@pytest.mark.parametrize("kind", ["queue", "key", "selector"])
def test_plan_with_fixed_choice_tries_once(kind: str) -> None:
    def pick_last(queues: Sequence[MessageQueue], _msg: Message) -> MessageQueue:
        return queues[-1]

    args: dict[str, object] = {
        "queue": {"queue": QUEUES[2]},
        "key": {"sharding_key": "order-1"},
        "selector": {"selector": pick_last},
    }[kind]  # type: ignore[assignment]
    plan = SendPlan(MSG, attempts=3, counter=RoundRobin(0), **args)  # type: ignore[arg-type]
    mq = plan.next_queue(QUEUES)
    assert mq is not None
    assert not plan.failed(mq, error_for_code(2))
    assert plan.next_queue(QUEUES) is None


def test_plan_rejects_two_choices() -> None:
    with pytest.raises(ValueError):
        SendPlan(MSG, attempts=1, counter=RoundRobin(0), queue=QUEUES[0], sharding_key="k")


def test_plan_rejects_a_queue_of_another_topic() -> None:
    with pytest.raises(ValueError, match="not a queue of topic 'T'"):
        SendPlan(MSG, attempts=1, counter=RoundRobin(0), queue=MessageQueue("U", "a", 0))


def test_selector_must_choose_a_publish_queue() -> None:
    plan = SendPlan(MSG, attempts=1, counter=RoundRobin(0),
                    selector=lambda _q, _m: MessageQueue("T", "zzz", 0))
    with pytest.raises(ValueError, match="not a publish queue"):
        plan.next_queue(QUEUES)
