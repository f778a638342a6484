"""Planning logic of the source without a cluster: offsets JSON against the queues that
exist, explicit ends beyond a queue's end, partition numbers, splitting, trigger delay."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.spark.access import QueueKey
from tidemq.spark.options import SourceOptionError
from tidemq.spark.plan import (
    check_ending,
    delay_batch,
    named_queues,
    partition_numbers,
    ranges,
    resolve,
)

QUEUES = [QueueKey("T", "broker-a", 0), QueueKey("T", "broker-a", 1),
          QueueKey("T", "broker-b", 0), QueueKey("U", "broker-a", 0)]
BOUNDS = {q: (0, 10) for q in QUEUES}


def test_an_unknown_topic_broker_or_queue_fails_naming_what_exists() -> None:
    with pytest.raises(SourceOptionError, match=r"names topic 'X'.*its topics: T, U"):
        resolve({"X": {"broker-a:0": 1}}, QUEUES, BOUNDS)
    with pytest.raises(SourceOptionError,
                       match=r"T has no broker 'broker-z' .brokers: broker-a, broker-b.*"
                             r"broker-a:0, broker-a:1, broker-b:0"):
        resolve({"T": {"broker-z:0": 1}}, QUEUES, BOUNDS)
    with pytest.raises(SourceOptionError, match=r"T has no queue broker-b:7"):
        resolve({"T": {"broker-b:7": 1}}, QUEUES, BOUNDS, option="endingOffsets")
    with pytest.raises(SourceOptionError, match=r"T has no partition 3; .* 0..2"):
        resolve({"T": {"3": 1}}, QUEUES, BOUNDS)
    with pytest.raises(SourceOptionError, match=r"'endingOffsets'"):
        resolve({"T": {"nope": 1}}, QUEUES, BOUNDS, option="endingOffsets")


def test_kafka_partition_numbers_are_places_in_broker_then_queue_order() -> None:
    numbers = partition_numbers(QUEUES)
    assert [numbers[q] for q in QUEUES] == [0, 1, 2, 0]
    got = resolve({"T": {"2": 4, "broker-a:1": 6}}, QUEUES, BOUNDS)
    assert got == {QUEUES[0]: 0, QUEUES[1]: 6, QUEUES[2]: 4, QUEUES[3]: 0}


def test_an_end_beyond_the_queue_end_is_refused() -> None:
    given_ends = named_queues("endingOffsets", {"T": {"broker-a:1": 11}}, QUEUES)
    with pytest.raises(SourceOptionError, match=r"T broker-a:1: 11 is beyond the queue's "
                                                r"end 10 .*use -1"):
        check_ending("endingOffsets", given_ends, BOUNDS)
    check_ending("endingOffsets", {QUEUES[1]: 10}, BOUNDS)  # the end itself is fine


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 60)), min_size=1, max_size=4),
       st.integers(1, 20), st.none() | st.integers(1, 10))
def test_ranges_cover_every_offset_once_within_max_rows(
        spans: list[tuple[int, int]], max_rows: int, min_parts: int | None) -> None:
    start = {QueueKey("T", "b", i): s for i, (s, _n) in enumerate(spans)}
    end = {QueueKey("T", "b", i): s + n for i, (s, n) in enumerate(spans)}
    out = ranges(start, end, min_parts, max_rows)
    assert all(0 < r.end - r.start <= max_rows for r in out)
    covered = sorted((r.queue.queue_id, o) for r in out for o in range(r.start, r.end))
    assert covered == sorted((q.queue_id, o) for q in end for o in range(start[q], end[q]))


def test_min_offsets_per_trigger_holds_a_batch_until_the_delay() -> None:
    q = QUEUES[0]
    assert delay_batch({q: 0}, {q: 3}, 5, waited_ms=100, max_delay_ms=1000)
    assert not delay_batch({q: 0}, {q: 5}, 5, waited_ms=100, max_delay_ms=1000)
    assert not delay_batch({q: 0}, {q: 3}, 5, waited_ms=1000, max_delay_ms=1000)
    assert not delay_batch({q: 0}, {q: 0}, None, waited_ms=0, max_delay_ms=1000)
