"""Rebalance strategies: Java's splits, and properties every strategy must have."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client import (
    AllocateStrategy,
    allocate_averagely,
    allocate_by_circle,
    allocate_consistent_hash,
    consistent_hash,
)
from tidemq.client.allocate import _md5_hash, java_queue_string
from tidemq.types import MessageQueue

STRATEGIES: list[AllocateStrategy] = [allocate_averagely, allocate_by_circle,
                                      allocate_consistent_hash, consistent_hash(3)]


def _queues(n: int, brokers: int = 2) -> list[MessageQueue]:
    per = -(-n // brokers)
    out = [MessageQueue("T", f"broker-{b}", q) for b in range(brokers) for q in range(per)]
    return sorted(out)[:n]


def _split(strategy: AllocateStrategy, queues: list[MessageQueue],
           clients: list[str]) -> dict[str, list[MessageQueue]]:
    return {c: strategy("g", c, queues, clients) for c in clients}


def _ids(split: dict[str, list[MessageQueue]], queues: list[MessageQueue]) -> dict[str, list[int]]:
    return {c: [queues.index(q) for q in qs] for c, qs in split.items()}


def test_averagely_matches_java() -> None:
    queues = [MessageQueue("T", "b", i) for i in range(10)]
    clients = ["c0", "c1", "c2", "c3"]
    assert _ids(_split(allocate_averagely, queues, clients), queues) == {
        "c0": [0, 1, 2], "c1": [3, 4, 5], "c2": [6, 7], "c3": [8, 9]}
    few = queues[:3]
    five = [f"c{i}" for i in range(5)]
    assert _ids(_split(allocate_averagely, few, five), few) == {
        "c0": [0], "c1": [1], "c2": [2], "c3": [], "c4": []}
    eight = [MessageQueue("T", "b", i) for i in range(8)]
    assert _ids(_split(allocate_averagely, eight, clients), eight) == {
        "c0": [0, 1], "c1": [2, 3], "c2": [4, 5], "c3": [6, 7]}


def test_by_circle_matches_java() -> None:
    queues = [MessageQueue("T", "b", i) for i in range(10)]
    clients = ["c0", "c1", "c2", "c3"]
    assert _ids(_split(allocate_by_circle, queues, clients), queues) == {
        "c0": [0, 4, 8], "c1": [1, 5, 9], "c2": [2, 6], "c3": [3, 7]}


def test_consistent_hash_ring_keys_match_java() -> None:
    mq = MessageQueue("TopicTest", "broker-a", 3)
    assert java_queue_string(mq) == "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=3]"
    digest = hashlib.md5(b"client-1-0").digest()
    assert _md5_hash("client-1-0") == (digest[0] << 24 | digest[1] << 16 | digest[2] << 8
                                       | digest[3])


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
def test_unknown_client_or_empty_inputs_take_nothing(strategy: AllocateStrategy) -> None:
    queues = _queues(4)
    assert strategy("g", "stranger", queues, ["a", "b"]) == []
    assert strategy("g", "a", [], ["a"]) == []
    assert strategy("g", "a", queues, []) == []
    with pytest.raises(ValueError):
        strategy("g", "", queues, ["a"])


def test_consistent_hash_needs_virtual_nodes() -> None:
    with pytest.raises(ValueError):
        consistent_hash(0)


client_ids = st.lists(st.integers(0, 99_999), min_size=1, max_size=12, unique=True).map(
    lambda ns: [f"10.0.{n % 7}.{n % 251}@inst{n}@{n * 7919 % 65_536}" for n in ns])


@settings(deadline=None, max_examples=200)
@given(n=st.integers(0, 40), brokers=st.integers(1, 4), clients=client_ids,
       which=st.sampled_from(STRATEGIES))
def test_every_queue_assigned_exactly_once(n: int, brokers: int, clients: list[str],
                                           which: AllocateStrategy) -> None:
    queues = _queues(n, brokers)
    ordered = sorted(clients)
    split = _split(which, queues, ordered)
    taken = [q for qs in split.values() for q in qs]
    assert sorted(taken) == queues  # each exactly once
    # deterministic, whatever order the caller received the ids in before sorting
    assert _split(which, queues, sorted(reversed(clients))) == split
    if which in (allocate_averagely, allocate_by_circle):
        sizes = [len(qs) for qs in split.values()]
        assert max(sizes) - min(sizes) <= 1


@settings(deadline=None, max_examples=100)
@given(n=st.integers(1, 40), clients=client_ids, newcomer=st.text("xyz", min_size=1,
                                                                    max_size=6))
def test_consistent_hash_moves_queues_only_to_a_newcomer(n: int, clients: list[str],
                                                          newcomer: str) -> None:
    queues = _queues(n)
    before = _split(allocate_consistent_hash, queues, sorted(clients))
    after = _split(allocate_consistent_hash, queues, sorted([*clients, newcomer]))
    for cid in clients:
        assert set(after[cid]) <= set(before[cid])
