"""``pull.read_pull_response`` reads found messages in one pass (queue id, broker and
offset bounds set while decoding, properties left undecoded) with the result of the
straightforward reading: decode, filter, then set each message's fields (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.pull import PullResult, _offsets, read_pull_response
from tidemq.client.queue_state import QueueState
from tidemq.client.subscription import Subscription
from tidemq.codec.command import RemotingCommand
from tidemq.codec.headers import PullMessageResponseHeader
from tidemq.codec.message import decode_messages
from tidemq.errors import TideMQError
from tidemq.formats.batch import encode_batch
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import encode_record, pack_host
from tidemq.types import MessageExt, MessageQueue, PullStatus

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


def _reference(response: RemotingCommand, sub: Subscription,
               offset: int | None = None) -> PullResult:
    """The reading without the one-pass shortcuts: every message decoded, filtered by
    offset and tags, then given the queue id, broker and bounds one by one."""
    ext = response.ext_fields
    low, high = int(ext["minOffset"]), int(ext["maxOffset"])
    kept = []
    for msg in decode_messages(response.full_body()):
        if offset is not None and msg.queue_offset < offset:
            continue
        if sub.tags and msg.properties.get("TAGS") not in sub.tags:
            continue
        msg.queue_id, msg.broker_name = MQ.queue_id, MQ.broker_name
        msg.properties.update({"MIN_OFFSET": str(low), "MAX_OFFSET": str(high)})
        kept.append(msg)
    return PullResult(PullStatus.FOUND, int(ext["nextBeginOffset"]), low, high, kept)


def _same(a: list[MessageExt], b: list[MessageExt]) -> None:
    assert a == b
    assert [list(m.properties.items()) for m in a] == [list(m.properties.items()) for m in b]


@settings(deadline=None, max_examples=100)
@given(st.lists(st.sampled_from(["a", "b", None]), max_size=6),
       st.sampled_from(["*", "a", "a || b"]), st.integers(0, 8), st.booleans())
def test_agrees_with_the_straightforward_reading(tags: list[str | None], expression: str,
                                                 offset: int, inner: bool) -> None:
    body = b"".join(_record(i, t) for i, t in enumerate(tags))
    if inner:
        body += _inner(len(tags), 4)
    response = RemotingCommand(code=0, ext_fields=_ext(len(tags) + 4), body=body)
    sub = Subscription.parse("T", expression)
    fast = read_pull_response(response, MQ, sub, address="b", offset=offset)
    plain = _reference(response, sub, offset)
    assert fast[:4] == plain[:4]
    _same(fast.messages, plain.messages)
    _same(read_pull_response(response, MQ, sub, address="b").messages,
          _reference(response, sub).messages)


@pytest.mark.parametrize(("code", "status"), [(19, PullStatus.NO_NEW_MSG),
                                              (20, PullStatus.NO_MATCHED_MSG),
                                              (21, PullStatus.OFFSET_ILLEGAL)])
def test_not_found_statuses_carry_no_messages(code: int, status: PullStatus) -> None:
    response = RemotingCommand(code=code, ext_fields=_ext(4))
    assert read_pull_response(response, MQ, Subscription.parse("T"), address="b") == (
        PullResult(status, 4, 0, 9, []))


def test_queue_state_buffer_takes_slices_in_order() -> None:
    body = b"".join(_record(i, "a") for i in range(6))
    msgs = read_pull_response(RemotingCommand(code=0, ext_fields=_ext(6), body=body), MQ,
                     Subscription.parse("T"), address="b").messages
    state = QueueState(fetch_offset=6)
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


_EDGES = (2**63 - 1, 2**63, -(2**63), -(2**63) - 1)
_NUMBER = st.one_of(st.integers(-(2**64), 2**64).map(str), st.sampled_from(_EDGES).map(str),
                    st.sampled_from(["007", "-0", "+1", " 1", "1.0", "", "x"]))
_KEYS = ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId")


@settings(max_examples=300)
@given(st.fixed_dictionaries(dict.fromkeys(_KEYS, _NUMBER), optional={"other": st.just("1")}),
       st.sets(st.sampled_from(_KEYS), max_size=1))
def test_offsets_read_as_the_header_schema_reads_them(ext: dict[str, str],
                                                      missing: set[str]) -> None:
    """The canonical-text shortcut of a pull response's offsets gives what the header
    schema gives, and whatever the schema refuses reaches it."""
    for key in missing:
        del ext[key]
    try:
        header = PullMessageResponseHeader.from_ext(ext)
    except TideMQError as exc:
        with pytest.raises(type(exc)):
            _offsets(ext)
        return
    assert _offsets(ext) == (header.next_begin_offset, header.min_offset, header.max_offset)
