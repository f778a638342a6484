"""The ``ends`` field of a QUERY_LOGICAL_QUEUE_MAPPING answer (:mod:`tidemq.codec.logical_ends`)
and the broker's record of the ends it has seen
(:mod:`tidemq.broker.processors.logical.ends`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.processors.logical.ends import KnownEnds
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.logical_ends import decode_ends, encode_ends
from tidemq.errors import ResponseCode

ENDS = st.dictionaries(st.tuples(st.text(max_size=12), st.integers(0, 1 << 16)),
                       st.integers(0, 1 << 62), max_size=20)


@given(ENDS)
def test_ends_round_trip(ends: dict[tuple[str, int], int]) -> None:
    assert decode_ends(encode_ends(ends)) == ends


@given(st.text(max_size=40))
def test_a_malformed_field_is_no_evidence_and_no_error(text: str) -> None:
    out = decode_ends(text)
    assert isinstance(out, dict)


def test_malformed_examples_decode_to_nothing() -> None:
    for text in (None, "", "{", "[[1]]", '[["a", "x", 3]]', '{"a": 1}', "[1, 2]"):
        assert decode_ends(text) == {}
    assert decode_ends('[["a", 1, 5], ["a", 1, 3]]') == {("a", 1): 5}  # the highest


def _send(code: int, qid: int) -> RemotingCommand:
    keys = ("b", "e") if code != RequestCode.SEND_MESSAGE else ("topic", "queueId")
    return RemotingCommand.request(code, {keys[0]: "T", keys[1]: str(qid), "lo": "false"})


def test_a_stored_send_raises_the_known_end_by_what_it_carried() -> None:
    ends = KnownEnds()
    single = _send(RequestCode.SEND_MESSAGE_V2, 2)
    ends.saw_send("b", single, single.response(ext_fields={"queueOffset": "7", "msgId": "X"}))
    assert ends.get("T", "b", 2) == 8
    batch = _send(RequestCode.SEND_BATCH_MESSAGE, 2)
    ends.saw_send("b", batch, batch.response(ext_fields={"queueOffset": "8",
                                                         "msgId": "X,Y,Z"}))
    assert ends.get("T", "b", 2) == 11
    old = _send(RequestCode.SEND_MESSAGE, 2)  # an older answer never lowers it
    ends.saw_send("b", old, old.response(ext_fields={"queueOffset": "1", "msgId": "X"}))
    assert ends.get("T", "b", 2) == 11
    timeout = _send(RequestCode.SEND_MESSAGE, 3)  # stored, not yet flushed: it is there
    ends.saw_send("b", timeout, timeout.response(ResponseCode.FLUSH_DISK_TIMEOUT,
                                                 ext_fields={"queueOffset": "4"}))
    assert ends.get("T", "b", 3) == 5
    refused = _send(RequestCode.SEND_MESSAGE, 4)
    ends.saw_send("b", refused, refused.response(ResponseCode.SYSTEM_BUSY, "moved",
                                                 ext_fields={"queueOffset": "9"}))
    assert ends.get("T", "b", 4) == -1


def test_own_ends_raise_what_is_known_and_a_deleted_topic_is_forgotten() -> None:
    ends = KnownEnds()
    ends.take("T", encode_ends({("a", 0): 5, ("b", 1): 9}))
    assert decode_ends(ends.encode("T", {("b", 1): 4, ("c", 0): 2})) == {
        ("a", 0): 5, ("b", 1): 9, ("c", 0): 2}
    assert ends.encode("U", {}) == "[]"
    ends.forget("T")
    assert ends.get("T", "a", 0) == -1
