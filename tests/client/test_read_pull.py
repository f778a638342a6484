"""The consumers' one-pass pull reader agrees with ``pull.read_pull_response`` (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.consumer import _QueueState, read_pull
from tidemq.client.pull import read_pull_response
from tidemq.client.subscription import Subscription
from tidemq.codec.command import RemotingCommand
from tidemq.formats.batch import encode_batch
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import encode_record, pack_host
from tidemq.types import MessageExt, MessageQueue

MQ = MessageQueue("T", "broker-a", 1)


def _record(offset: int, tags: str | None) -> bytes:
    props = {"TAGS": tags, "UNIQ_KEY": f"U{offset}"} if tags else {}
    return bytes(encode_record(topic=b"T", queue_id=9, body=f"m{offset}".encode(),
                               properties=encode_properties(props), queue_offset=offset,
                               physical_offset=offset * 100,
                               store_host=pack_host("127.0.0.1:10911")))


def _inner(base: int, n: int) -> bytes:
    entries = [(f"e{base + i}".encode(), encode_properties({"TAGS": "a" if i % 2 else "b"}), 0)
               for i in range(n)]
    return bytes(encode_record(topic=b"T", queue_id=9, body=encode_batch(entries),
                               properties=b"", sys_flag=0xC0, queue_offset=base,
                               physical_offset=base * 100))


def _ext(next_offset: int) -> dict[str, str]:
    return {"nextBeginOffset": str(next_offset), "minOffset": "0", "maxOffset": "9",
            "suggestWhichBrokerId": "0"}


def _same(a: list[MessageExt], b: list[MessageExt]) -> None:
    assert a == b
    assert [list(m.properties.items()) for m in a] == [list(m.properties.items()) for m in b]


@settings(deadline=None, max_examples=100)
@given(st.lists(st.sampled_from(["a", "b", None]), max_size=6),
       st.sampled_from(["*", "a", "a || b"]), st.integers(0, 8), st.booleans())
def test_agrees_with_read_pull_response(tags: list[str | None], expression: str,
                                        offset: int, inner: bool) -> None:
    body = b"".join(_record(i, t) for i, t in enumerate(tags))
    if inner:
        body += _inner(len(tags), 4)
    response = RemotingCommand(code=0, ext_fields=_ext(len(tags) + 4), body=body)
    sub = Subscription.parse("T", expression)
    fast = read_pull(response, MQ, sub, address="b", offset=offset)
    plain = read_pull_response(response, MQ, sub, address="b", offset=offset)
    assert fast[:4] == plain[:4]
    _same(fast.messages, plain.messages)
    _same(read_pull(response, MQ, sub, address="b").messages,
          read_pull_response(response, MQ, sub, address="b").messages)


@pytest.mark.parametrize("code", [19, 20, 21])
def test_not_found_statuses_are_the_plain_readers(code: int) -> None:
    response = RemotingCommand(code=code, ext_fields=_ext(4))
    sub = Subscription.parse("T")
    assert read_pull(response, MQ, sub, address="b") == read_pull_response(
        response, MQ, sub, address="b")


def test_queue_state_buffer_takes_slices_in_order() -> None:
    body = b"".join(_record(i, "a") for i in range(6))
    msgs = read_pull(RemotingCommand(code=0, ext_fields=_ext(6), body=body), MQ,
                     Subscription.parse("T"), address="b").messages
    state = _QueueState(fetch_offset=6)
    state.add(msgs[:4])
    assert (state.position, state.buffered) == (0, 4)
    assert [m.queue_offset for m in state.take(3)] == [0, 1, 2]
    state.add(msgs[4:])
    assert (state.position, state.buffered) == (3, 3)
    assert [m.queue_offset for m in state.take(10)] == [3, 4, 5]
    assert (state.position, state.buffered) == (6, 0)
    state.add(msgs[:2])
    state.reset(9)
    assert (state.position, state.buffered) == (9, 0)
