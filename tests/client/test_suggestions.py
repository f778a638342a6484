"""Which member of a broker group a pull goes to: the suggestion kept per queue and the
member a route lists for it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.suggestions import PullSuggestions
from tidemq.client.topic_route import MASTER_ID, read_member
from tidemq.codec.command import RemotingCommand
from tidemq.types import MessageQueue

MQ = MessageQueue("T", "broker-a", 0)


def answer(suggest: str | None) -> RemotingCommand:
    ext = {"nextBeginOffset": "1", "minOffset": "0", "maxOffset": "1"}
    if suggest is not None:
        ext["suggestWhichBrokerId"] = suggest
    return RemotingCommand(0, 1, ext_fields=ext)


def test_a_suggestion_is_kept_per_queue_until_the_master_is_suggested_again() -> None:
    s = PullSuggestions()
    other = MQ._replace(queue_id=1)
    assert s.broker_id(MQ) == MASTER_ID
    s.note(MQ, answer("1"))
    assert (s.broker_id(MQ), s.broker_id(other)) == (1, MASTER_ID)
    s.note(MQ, answer("0"))
    assert s.broker_id(MQ) == MASTER_ID
    assert len(s) == 0  # only non-master suggestions take room


def test_a_suggestion_that_is_no_broker_id_leaves_the_master() -> None:
    s = PullSuggestions()
    for text in ("x", "-1", str(1 << 40), "", None):
        s.note(MQ, answer("2"))
        s.note(MQ, answer(text))
        assert s.broker_id(MQ) == MASTER_ID, text


def test_a_failed_member_is_forgotten() -> None:
    s = PullSuggestions()
    s.note(MQ, answer("1"))
    s.forget(MQ)
    assert s.broker_id(MQ) == MASTER_ID


def test_read_member_follows_upstreams_order() -> None:
    both = {0: "m", 1: "r1"}
    assert read_member(both, 1) == 1
    assert read_member(both, 0) == 0
    assert read_member({0: "m", 2: "r2"}, 1) == 2  # the next id, as upstream
    assert read_member({0: "m", 3: "r3"}, 1) == 0  # else the master
    assert read_member({2: "r2", 5: "r5"}, 0) == 2  # the master is down: lowest replica


@given(st.dictionaries(st.integers(0, 8), st.just("a"), min_size=1), st.integers(0, 8))
def test_read_member_always_picks_a_listed_member(addrs: dict[int, str], wanted: int) -> None:
    member = read_member(addrs, wanted)
    assert member in addrs
    if wanted in addrs:
        assert member == wanted
    elif MASTER_ID in addrs and wanted + 1 not in addrs:
        assert member == MASTER_ID
