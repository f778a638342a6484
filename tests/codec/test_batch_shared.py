"""The batch protocol's shared-header pull form (tidemq.codec.batch_protocol)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.codec.test_batch_protocol import over_the_wire

from tidemq.codec.batch_protocol import (
    CHILD_FORM_KEY,
    CHILD_FORMS_KEY,
    SHARED_FORM,
    BatchFormatError,
    batch_response,
    decode_batch_request,
    decode_batch_response,
    encode_batch_request,
    encode_shared_request,
    shared_position,
)
from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode
from tidemq.codec.frame import frame_bytes
from tidemq.errors import LocalProtocolError, ProtocolError

PULL = RequestCode.PULL_MESSAGE
EXT = {"consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": "0",
       "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
       "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}


def pull(queue_id: int = 0, offset: int = 0) -> RemotingCommand:
    return RemotingCommand.request(PULL, {**EXT, "queueId": str(queue_id),
                                          "queueOffset": str(offset)})


def test_shared_parent_layout() -> None:
    template = pull(3, 7)
    parent = encode_shared_request(PULL, template, [(3, 7), (5, 1 << 40)])
    assert parent.ext_fields == {"dispatchCode": "11", CHILD_FORM_KEY: SHARED_FORM}
    head = frame_bytes(template)
    assert parent.full_body() == (
        head  # the template: one complete child frame (opaque 1), no body
        + struct.pack(">i", 3) + struct.pack(">q", 7)  # child 1: queueId, queueOffset
        + struct.pack(">i", 5) + struct.pack(">q", 1 << 40))  # child 2


def test_shared_children_are_the_template_at_their_positions() -> None:
    req = decode_batch_request(over_the_wire(
        encode_shared_request(PULL, pull(), [(0, 5), (1, 9), (2, 0)])))
    assert req.dispatch_code == PULL
    got = [(c.opaque, c.command.opaque, c.command.code, c.command.ext_fields)
           for c in req.children if c.command is not None]
    assert got == [(i + 1, i + 1, PULL, {**EXT, "queueId": str(q), "queueOffset": str(o)})
                   for i, (q, o) in enumerate([(0, 5), (1, 9), (2, 0)])]


@pytest.mark.parametrize("mutate, reason", [
    (lambda b: b + b"\0" * 5, "not 12-byte children"),
    (lambda b: b[:3], "trailing bytes"),
])
def test_malformed_shared_parents(mutate: object, reason: str) -> None:
    parent = over_the_wire(encode_shared_request(PULL, pull(), [(0, 1), (1, 1)]))
    parent.body = mutate(bytes(parent.body))  # type: ignore[operator]
    with pytest.raises(BatchFormatError, match=reason):
        decode_batch_request(parent)


def test_shared_form_is_for_pulls_only() -> None:
    parent = over_the_wire(encode_batch_request(30, [RemotingCommand.request(30, {})]))
    parent.ext_fields[CHILD_FORM_KEY] = SHARED_FORM
    with pytest.raises(BatchFormatError, match="childForm"):
        decode_batch_request(parent)
    parent.ext_fields[CHILD_FORM_KEY] = "other"
    with pytest.raises(BatchFormatError, match="childForm"):
        decode_batch_request(parent)
    with pytest.raises(LocalProtocolError):
        encode_shared_request(30, RemotingCommand.request(30, {}), [(0, 0)])
    with pytest.raises(LocalProtocolError):
        encode_shared_request(PULL, pull(), [(1 << 31, 0)])
    too_many = over_the_wire(encode_shared_request(PULL, pull(), [(0, i) for i in range(5)]))
    with pytest.raises(BatchFormatError, match="more than 4"):
        decode_batch_request(too_many, max_children=4)


def test_template_must_be_a_bodiless_request_of_the_code() -> None:
    other = RemotingCommand.request(PULL, dict(EXT), b"body")
    parent = RemotingCommand.request(RequestCode.BATCH_REQUEST, {
        "dispatchCode": "11", CHILD_FORM_KEY: SHARED_FORM}, frame_bytes(other))
    with pytest.raises(BatchFormatError, match="template"):
        decode_batch_request(over_the_wire(parent))


def test_compact_answers_round_trip() -> None:
    request = over_the_wire(encode_shared_request(PULL, pull(), [(q, 0) for q in range(5)]))
    stored = memoryview(bytearray(b"RECORDS"))
    offsets = {"nextBeginOffset": "7", "minOffset": "0", "maxOffset": "9",
               "suggestWhichBrokerId": "0"}
    answers = [
        RemotingCommand(code=0, remark="FOUND", ext_fields=dict(offsets), body_parts=[stored]),
        RemotingCommand(code=19, remark="OFFSET_OVERFLOW_ONE", ext_fields=dict(offsets)),
        RemotingCommand(code=17, remark="topic[X] not exist"),  # no ext, a remark
        RemotingCommand(code=20, ext_fields={**offsets, "other": "x"}),  # a full frame
        RemotingCommand(code=21, remark="", ext_fields={**offsets, "minOffset": "007"}),
    ]
    for i, a in enumerate(answers, 1):
        a.opaque, a.flag = i, FLAG_RESPONSE
    resp = batch_response(request, answers)
    assert resp.ext_fields == {CHILD_FORM_KEY: SHARED_FORM}
    assert resp.body_parts is not None and any(p is stored for p in resp.body_parts)
    back = decode_batch_response(over_the_wire(resp), [1, 2, 3, 4, 5])
    assert [(r.code, r.opaque, r.remark, r.ext_fields, bytes(r.body), r.is_response)
            for r in back] == [(a.code, a.opaque, a.remark, a.ext_fields, a.full_body(), True)
                               for a in answers]
    with pytest.raises(BatchFormatError):
        decode_batch_response(over_the_wire(resp), [1, 2, 3, 4])
    with pytest.raises(BatchFormatError):
        decode_batch_response(over_the_wire(resp), [1, 2, 3, 4, 5, 6])


def test_a_standard_parent_offering_the_form_learns_it() -> None:
    plain = over_the_wire(encode_batch_request(PULL, [pull(0), pull(1)]))
    assert CHILD_FORMS_KEY not in batch_response(plain, []).ext_fields  # never asked
    plain.ext_fields[CHILD_FORMS_KEY] = "other,shared"
    assert batch_response(plain, []).ext_fields == {CHILD_FORMS_KEY: SHARED_FORM}


def test_shared_position() -> None:
    assert shared_position(pull(3, 1 << 50)) == (3, 1 << 50)
    assert shared_position(pull(-1, -5)) == (-1, -5)
    for q, o in (("03", "0"), ("1", "+1"), ("1", " 1"), ("1", "1_0"), ("x", "0"),
                 (str(1 << 31), "0"), ("0", str(1 << 63))):
        assert shared_position(RemotingCommand.request(
            PULL, {**EXT, "queueId": q, "queueOffset": o})) is None
    assert shared_position(RemotingCommand.request(PULL, dict(EXT), b"x")) is None
    missing = dict(EXT)
    del missing["queueOffset"]
    assert shared_position(RemotingCommand.request(PULL, missing)) is None


@settings(deadline=None, max_examples=200)
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)),
                max_size=20))
def test_positions_round_trip(positions: list[tuple[int, int]]) -> None:
    req = decode_batch_request(over_the_wire(encode_shared_request(PULL, pull(), positions)))
    assert [(int(c.command.ext_fields["queueId"]), int(c.command.ext_fields["queueOffset"]))
            for c in req.children if c.command is not None] == positions


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=200), st.integers(0, 5))
def test_garbage_compact_answers_raise_only_protocol_errors(body: bytes, n: int) -> None:
    resp = RemotingCommand(code=0, flag=FLAG_RESPONSE, remark="merged",
                           ext_fields={CHILD_FORM_KEY: SHARED_FORM}, body=body)
    with contextlib.suppress(ProtocolError):
        decode_batch_response(resp, list(range(1, n + 1)))


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=120), st.booleans())
def test_garbage_shared_parents_raise_only_protocol_errors(tail: bytes, template: bool
                                                           ) -> None:
    body = (frame_bytes(pull()) if template else b"") + tail
    parent = RemotingCommand.request(RequestCode.BATCH_REQUEST, {
        "dispatchCode": "11", CHILD_FORM_KEY: SHARED_FORM}, body)
    with contextlib.suppress(ProtocolError):
        req = decode_batch_request(parent)
        assert all(c.command is not None for c in req.children)
