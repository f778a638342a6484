"""Each message's result of an answered batch, read from the batch's answer."""

from __future__ import annotations

import copy
import dataclasses
import logging
import pickle
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.batch_results import BatchAnswer, message_results, record_ids
from tidemq.client.batching import _call_all
from tidemq.client.sending import new_send_result
from tidemq.types import MessageQueue, SendResult, SendStatus

QUEUE = MessageQueue("T", "broker-a", 3)
_ID = st.text(st.characters(blacklist_characters=","), max_size=40)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(_ID, min_size=1, max_size=30))
def test_record_ids_are_the_joined_ids_one_by_one(ids: list[str]) -> None:
    got = record_ids(",".join(ids), len(ids))
    assert len(got) == len(ids)
    assert [got[i] for i in range(len(ids))] == ids
    assert list(got) == ids and got[-1] == ids[-1] and got[1:3] == ids[1:3]
    with pytest.raises(IndexError):
        got[len(ids)]


@settings(max_examples=200, deadline=None)
@given(width=st.integers(1, 40), count=st.integers(1, 50), data=st.data())
def test_record_ids_of_one_width(width: int, count: int, data: st.DataObject) -> None:
    ids = data.draw(st.lists(st.text("0123456789ABCDEF", min_size=width, max_size=width),
                             min_size=count, max_size=count))
    got = record_ids(",".join(ids), count)
    assert list(got) == ids and [got[-i - 1] for i in range(count)] == ids[::-1]


@settings(max_examples=100, deadline=None)
@given(joined=_ID, count=st.integers(2, 20))
def test_one_id_is_every_messages(joined: str, count: int) -> None:
    assert list(record_ids(joined, count)) == [joined] * count


def test_ids_of_two_widths_that_add_up_like_one_are_split() -> None:
    # 3 ids, 2 commas, 11 chars: as long as three ids of width 3, but not that layout.
    assert list(record_ids("AB,CDEF,GHI", 3)) == ["AB", "CDEF", "GHI"]


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.text(max_size=6), _ID), min_size=1, max_size=30),
       status=st.sampled_from(list(SendStatus)), first=st.integers(0, 2**63 - 1 - 30),
       txn=st.one_of(st.none(), st.text(max_size=4)))
def test_message_results_equal_one_plain_result_per_message(
        pairs: list[tuple[str, str]], status: SendStatus, first: int,
        txn: str | None) -> None:
    keys, ids = [k for k, _ in pairs], [r for _, r in pairs]
    answer = BatchAnswer(status, QUEUE, first, txn, keys,
                         record_ids(",".join(ids), len(ids)))
    got = message_results(answer, 0, len(pairs))
    assert message_results(answer, 1, len(pairs)) == got[1:]
    want = [SendResult(status, k, r, QUEUE, first + i, txn, 1)
            for i, (k, r) in enumerate(pairs)]
    assert got == want and want == got
    assert got == [new_send_result(status, k, r, QUEUE, first + i, txn)
                   for i, (k, r) in enumerate(pairs)]
    for one, plain in zip(got, want, strict=True):
        assert isinstance(one, SendResult)
        assert (one.status, one.msg_id, one.offset_msg_id, one.queue, one.queue_offset,
                one.transaction_id, one.message_count) == dataclasses.astuple(plain)
        assert one.queue_offsets == plain.queue_offsets
        assert hash(one) == hash(plain) and repr(one) == repr(plain)
        assert dataclasses.asdict(one) == dataclasses.asdict(plain)
        for twin in (copy.copy(one), copy.deepcopy(one), pickle.loads(pickle.dumps(one))):
            assert type(twin) is SendResult and twin == plain
        moved = dataclasses.replace(one, queue_offset=7)
        assert type(moved) is SendResult
        assert moved == dataclasses.replace(plain, queue_offset=7)
    if len(got) > 1:
        assert got[0] != got[1] or pairs[0] == pairs[1]


def test_a_message_result_cannot_be_changed() -> None:
    answer = BatchAnswer(SendStatus.SEND_OK, QUEUE, 5, None, ("k",), ["id"])
    (one,) = message_results(answer, 0, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.queue_offset = 9  # type: ignore[misc]
    assert one.queue_offset == 5


@pytest.mark.parametrize("broken_at", [0, 2, 4])
def test_every_callback_runs_in_order_past_a_failing_one(
        broken_at: int, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[tuple[int, BaseException | None, SendResult | None]] = []

    def callback(i: int) -> Callable[[BaseException | None, SendResult | None], None]:
        def on_delivery(error: BaseException | None, result: SendResult | None) -> None:
            calls.append((i, error, result))
            if i == broken_at:
                raise RuntimeError(f"bug in callback {i}")
        on_delivery.__qualname__ = f"callback_{i}"
        return on_delivery

    callbacks = [callback(i) for i in range(5)]
    answer = BatchAnswer(SendStatus.SEND_OK, QUEUE, 0, None, list("abcde"),
                         record_ids("1,2,3,4,5", 5))
    results = message_results(answer, 0, 5)
    with caplog.at_level(logging.ERROR, logger="tidemq.client.batching"):
        _call_all(callbacks, results)
    assert calls == [(i, None, results[i]) for i in range(5)]
    assert [r.msg_id for _, _, r in calls if r is not None] == list("abcde")
    (record,) = caplog.records
    assert f"callback_{broken_at}" in record.getMessage()
    assert record.exc_info is not None and f"bug in callback {broken_at}" in str(
        record.exc_info[1])
