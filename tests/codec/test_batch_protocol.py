"""The batch protocol's parent layout (tidemq.codec.batch_protocol)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.codec.batch_protocol import (
    DISPATCH_CODE_KEY,
    MERGED_REMARK,
    BatchChild,
    BatchFormatError,
    batch_response,
    child_error_response,
    decode_batch_request,
    decode_batch_response,
    decode_children,
    encode_batch_request,
    encode_batch_requests,
    encode_children,
)
from tidemq.codec.command import (
    FLAG_RESPONSE,
    RemotingCommand,
    RequestCode,
    SerializeType,
)
from tidemq.codec.frame import FrameDecoder, frame_bytes
from tidemq.errors import LocalProtocolError, ProtocolError, ResponseCode

MAX = RequestCode.GET_MAX_OFFSET


def over_the_wire(cmd: RemotingCommand) -> RemotingCommand:
    """``cmd`` encoded into one frame and decoded again, as a peer receives it."""
    dec = FrameDecoder()
    dec.receive_data(frame_bytes(cmd))
    got = dec.next_command()
    assert got is not None
    return got


def child(queue_id: int, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(MAX, {"topic": "T", "queueId": str(queue_id)}, body)


# ---------------------------------------------------------------- golden bytes


def test_parent_body_is_the_child_frames_end_to_end() -> None:
    kids = [child(0), child(1, b"xy")]
    parent = encode_batch_request(MAX, kids)
    assert parent.code == RequestCode.BATCH_REQUEST == 20000
    assert parent.ext_fields == {DISPATCH_CODE_KEY: "30"}
    h1 = (b'{"code":30,"extFields":{"queueId":"0","topic":"T"},"flag":0,"language":"PYTHON",'
          b'"opaque":1,"serializeTypeCurrentRPC":"JSON","version":479}')
    h2 = h1.replace(b'"0"', b'"1"').replace(b'"opaque":1', b'"opaque":2')
    expected = (
        struct.pack(">i", 4 + len(h1))  # child 1: length = header word + header, no body
        + struct.pack(">i", len(h1))  # type 0 (JSON) << 24 | header length
        + h1
        + struct.pack(">i", 4 + len(h2) + 2)  # child 2: with its 2-byte body
        + struct.pack(">i", len(h2))
        + h2
        + b"xy"
    )
    assert parent.full_body() == expected


def test_merged_response_layout_and_zero_copy_parts() -> None:
    request = over_the_wire(encode_batch_request(MAX, [child(0), child(1)]))
    stored = memoryview(bytearray(b"RECORDS-FROM-THE-STORE"))
    answers = [RemotingCommand(code=0, opaque=1, flag=FLAG_RESPONSE, body_parts=[stored]),
               RemotingCommand(code=19, opaque=2, flag=FLAG_RESPONSE, remark="none")]
    resp = batch_response(request, answers)
    assert (resp.code, resp.remark, resp.opaque) == (0, MERGED_REMARK, request.opaque)
    assert resp.body_parts is not None
    assert any(part is stored for part in resp.body_parts)  # not copied, not joined
    back = decode_batch_response(over_the_wire(resp), [1, 2])
    assert [(r.code, r.opaque, bytes(r.body)) for r in back] == [
        (0, 1, b"RECORDS-FROM-THE-STORE"), (19, 2, b"")]



# ---------------------------------------------------------------- request decoding


def test_children_decode_with_bodies_as_views_of_the_parent() -> None:
    got = decode_batch_request(over_the_wire(
        encode_batch_request(MAX, [child(3, b"abc"), child(4)])))
    assert got.dispatch_code == MAX
    cmds = [c.command for c in got.children]
    assert [c.ext_fields["queueId"] for c in cmds if c] == ["3", "4"]
    assert [c.opaque for c in got.children] == [1, 2]
    first = cmds[0]
    assert first is not None and isinstance(first.body, memoryview)
    assert bytes(first.body) == b"abc"


def test_rocketmq_serialized_children_are_read_too() -> None:
    kid = child(2)
    kid.serialize_type = SerializeType.ROCKETMQ
    got = decode_batch_request(over_the_wire(encode_batch_request(MAX, [kid])))
    assert got.children[0].command is not None
    assert got.children[0].command.serialize_type is SerializeType.ROCKETMQ


def test_a_malformed_child_is_reported_not_raised() -> None:
    good, other = child(0), RemotingCommand.request(RequestCode.GET_MIN_OFFSET, {})
    good.opaque, other.opaque = 1, 2
    garbage = struct.pack(">ii", 4 + 3, 3) + b"{x}"
    reply = child(1)
    reply.opaque, reply.flag = 3, FLAG_RESPONSE
    body = b"".join(bytes(p) for p in encode_children([good, other])) + garbage
    body += b"".join(bytes(p) for p in encode_children([reply]))
    parent = RemotingCommand.request(RequestCode.BATCH_REQUEST, {DISPATCH_CODE_KEY: "30"}, body)
    kids = decode_batch_request(parent).children
    assert kids[0].command is not None and not kids[0].error
    assert kids[1].command is None and "differs from dispatchCode" in kids[1].error
    assert kids[1].opaque == 2
    assert kids[2].command is None and "unreadable" in kids[2].error and kids[2].opaque == 0
    assert kids[3].command is None and "response flag" in kids[3].error
    err = child_error_response(kids[1], ResponseCode.INVALID_PARAMETER, kids[1].error)
    assert (err.opaque, err.flag, err.code) == (2, FLAG_RESPONSE, 29)


@pytest.mark.parametrize(("ext", "body", "reason"), [
    ({}, b"", "missing"),
    ({DISPATCH_CODE_KEY: "x"}, b"", "not an int"),
    ({DISPATCH_CODE_KEY: "30"}, b"\x00\x00\x00", "trailing"),
    ({DISPATCH_CODE_KEY: "30"}, struct.pack(">ii", 3, 0), "claims 3"),
    ({DISPATCH_CODE_KEY: "30"}, struct.pack(">ii", 400, 0), "claims 400"),
])
def test_malformed_parents_raise_batch_format_error(ext: dict[str, str], body: bytes,
                                                    reason: str) -> None:
    with pytest.raises(BatchFormatError, match=reason):
        decode_batch_request(RemotingCommand.request(RequestCode.BATCH_REQUEST, ext, body))


def test_limits_and_duplicate_opaques() -> None:
    parent = over_the_wire(encode_batch_request(MAX, [child(q) for q in range(5)]))
    assert len(decode_batch_request(parent, max_children=5).children) == 5
    with pytest.raises(BatchFormatError, match="more than 4 children"):
        decode_batch_request(parent, max_children=4)
    with pytest.raises(BatchFormatError, match="exceeds the limit of 100"):
        decode_batch_request(parent, max_bytes=100)
    a, b = child(0), child(1)
    a.opaque = b.opaque = 9
    body = b"".join(bytes(p) for p in encode_children([a, b]))
    dup = RemotingCommand.request(RequestCode.BATCH_REQUEST, {DISPATCH_CODE_KEY: "30"}, body)
    with pytest.raises(BatchFormatError, match="opaque 9"):
        decode_batch_request(dup)


# ---------------------------------------------------------------- responses


def test_response_decoding_checks_count_opaques_and_flags() -> None:
    request = over_the_wire(encode_batch_request(MAX, [child(0), child(1)]))
    sent = [1, 2]
    ok = [RemotingCommand(code=0, opaque=1, flag=FLAG_RESPONSE),
          RemotingCommand(code=0, opaque=2, flag=FLAG_RESPONSE)]
    assert len(decode_batch_response(batch_response(request, ok), sent)) == 2
    with pytest.raises(BatchFormatError, match="1 child responses for 2"):
        decode_batch_response(batch_response(request, ok[:1]), sent)
    with pytest.raises(BatchFormatError, match="carries opaque 2"):
        decode_batch_response(batch_response(request, ok[::-1]), sent)
    not_flagged = [ok[0], RemotingCommand(code=0, opaque=2)]
    with pytest.raises(BatchFormatError, match="response flag"):
        decode_batch_response(batch_response(request, not_flagged), sent)


# ---------------------------------------------------------------- encoding


def test_encoding_refuses_children_of_another_code() -> None:
    with pytest.raises(LocalProtocolError, match="not dispatchCode"):
        encode_batch_request(MAX, [child(0), RemotingCommand.request(11, {})])


def test_splitting_by_count_and_bytes_numbers_each_parent_from_one() -> None:
    kids = [child(q, b"x" * 100) for q in range(7)]
    parents = encode_batch_requests(MAX, kids, max_children=3)
    assert [len(m) for _, m in parents] == [3, 3, 1]
    assert [[c.opaque for c in m] for _, m in parents] == [[1, 2, 3], [1, 2, 3], [1]]
    for parent, members in parents:
        got = decode_batch_request(over_the_wire(parent))
        assert [c.command.ext_fields["queueId"] for c in got.children if c.command] == [
            m.ext_fields["queueId"] for m in members]
    one_frame = len(frame_bytes(kids[0]))
    parents = encode_batch_requests(MAX, kids, max_bytes=2 * one_frame + 10)
    assert [len(m) for _, m in parents] == [2, 2, 2, 1]
    alone = encode_batch_requests(MAX, kids[:2], max_bytes=10)  # too big alone: own parent
    assert [len(m) for _, m in alone] == [1, 1]


# ---------------------------------------------------------------- properties

def _request(ext: dict[str, str], body: bytes, rocketmq: bool) -> RemotingCommand:
    cmd = RemotingCommand.request(MAX, ext, body)
    cmd.serialize_type = SerializeType.ROCKETMQ if rocketmq else SerializeType.JSON
    return cmd


_ext = st.dictionaries(st.text(min_size=1, max_size=6), st.text(min_size=1, max_size=12),
                       max_size=4)  # ROCKETMQ headers read an empty value as absent
_children = st.lists(st.builds(_request, _ext, st.binary(max_size=40), st.booleans()),
                     max_size=12)


@settings(max_examples=200, deadline=None)
@given(kids=_children)
def test_request_round_trip(kids: list[RemotingCommand]) -> None:
    got = decode_batch_request(over_the_wire(encode_batch_request(MAX, kids)))
    assert got.dispatch_code == MAX
    assert [(c.command.ext_fields, bytes(c.command.body)) for c in got.children
            if c.command is not None] == [(k.ext_fields, bytes(k.body)) for k in kids]
    assert [c.opaque for c in got.children] == list(range(1, len(kids) + 1))


@settings(max_examples=200, deadline=None)
@given(kids=_children, codes=st.lists(st.sampled_from([0, 1, 19, 21, 29]), max_size=12))
def test_response_round_trip(kids: list[RemotingCommand], codes: list[int]) -> None:
    request = over_the_wire(encode_batch_request(MAX, kids))
    children = [c.command for c in decode_batch_request(request).children]
    answers = [c.response(codes[i % len(codes)] if codes else 0, None, c.ext_fields, c.body)
               for i, c in enumerate(children) if c is not None]
    for a in answers:
        a.flag |= FLAG_RESPONSE
    got = decode_batch_response(over_the_wire(batch_response(request, answers)),
                                [k.opaque for k in kids])
    assert [(r.code, r.opaque, bytes(r.body)) for r in got] == [
        (a.code, a.opaque, bytes(a.body)) for a in answers]


@st.composite
def mangled_bodies(draw: st.DrawFn) -> bytes:
    """A valid parent body with bytes flipped, cut, or garbage spliced in."""
    kids = draw(_children)
    body = bytearray(encode_batch_request(MAX, kids).full_body()) if kids else bytearray()
    for _ in range(draw(st.integers(0, 4))):
        if body and draw(st.booleans()):
            i = draw(st.integers(0, len(body) - 1))
            body[i] = draw(st.integers(0, 255))
        else:
            i = draw(st.integers(0, len(body)))
            body[i:i + draw(st.integers(0, 8))] = draw(st.binary(max_size=12))
    return bytes(body)


@settings(max_examples=200, deadline=None)
@given(body=mangled_bodies() | st.binary(max_size=200),
       code=st.sampled_from(["30", "11", "-1", "x", "99999999999"]))
def test_garbage_parents_raise_only_protocol_errors(body: bytes, code: str) -> None:
    parent = RemotingCommand.request(RequestCode.BATCH_REQUEST, {DISPATCH_CODE_KEY: code}, body)
    try:
        got = decode_batch_request(parent, max_children=50)
    except ProtocolError:
        return
    for kid in got.children:
        assert isinstance(kid, BatchChild)
        assert (kid.command is None) == bool(kid.error)
    with contextlib.suppress(ProtocolError):
        decode_batch_response(RemotingCommand(code=0, flag=FLAG_RESPONSE, body=body), [])


@settings(max_examples=100, deadline=None)
@given(body=mangled_bodies())
def test_decode_children_never_raises_anything_else(body: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_children(body)
