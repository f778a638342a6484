"""The batch protocol's shared-header send form (tidemq.codec.shared_send)."""

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
    MERGED_REMARK,
    SEND_SHARED_FORM,
    BatchFormatError,
    batch_response,
    encode_batch_request,
)
from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode
from tidemq.codec.frame import frame_bytes
from tidemq.codec.shared_send import (
    PlainAnswer,
    SendAnswer,
    SendEntry,
    compact_send_responses,
    decode_send_answers,
    decode_shared_send,
    encode_shared_send,
    send_answer_command,
    shared_send_child,
    shared_send_entry,
    shared_send_key,
    shared_send_response,
)
from tidemq.errors import LocalProtocolError, ProtocolError

SEND = RequestCode.SEND_MESSAGE_V2
EXT = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0",
       "n": "broker-a"}


def template() -> RemotingCommand:
    return RemotingCommand.request(SEND, dict(EXT))


def test_parent_layout() -> None:
    parent = encode_shared_send(template(), [(3, 0, 1700, 0, b"K\x01v", b"body"),
                                             (7, 1, 1 << 40, 9, b"", b"x")])
    assert parent.code == RequestCode.BATCH_REQUEST
    assert parent.ext_fields == {"dispatchCode": "310", CHILD_FORM_KEY: SEND_SHARED_FORM}
    shared = RemotingCommand.request(SEND, {k: v for k, v in EXT.items() if k not in "efgh"})
    shared.opaque = 1
    assert parent.full_body() == (
        frame_bytes(shared)  # the template: a complete child frame without e..i, no body
        + struct.pack(">i", 3)  # child 1: queueId
        + struct.pack(">i", 0)  # sysFlag
        + struct.pack(">q", 1700)  # bornTimestamp
        + struct.pack(">i", 0)  # flag
        + struct.pack(">H", 3)  # P: properties bytes
        + struct.pack(">I", 4)  # B: body bytes
        + b"K\x01v" + b"body"
        + struct.pack(">iiqiHI", 7, 1, 1 << 40, 9, 0, 1) + b"x")  # child 2, no properties


def test_children_are_the_template_with_their_fields() -> None:
    parent = over_the_wire(encode_shared_send(
        template(), [(3, 0, 1700, 0, b"K\x01v", b"body"), (7, 1, 5, 9, b"", b"x")]))
    tcmd, entries = decode_shared_send(SEND, parent.body, 1000)
    assert entries == [SendEntry(3, 0, 1700, 0, "K\x01v", memoryview(b"body")),
                       SendEntry(7, 1, 5, 9, None, memoryview(b"x"))]
    first = shared_send_child(tcmd, 1, entries[0])  # type: ignore[arg-type]
    assert (first.code, first.opaque, bytes(first.body)) == (SEND, 1, b"body")
    assert first.ext_fields == {**EXT, "e": "3", "f": "0", "g": "1700", "h": "0",
                                "i": "K\x01v"}
    second = shared_send_child(tcmd, 2, entries[1])  # type: ignore[arg-type]
    assert second.ext_fields == {**EXT, "e": "7", "f": "1", "g": "5", "h": "9"}


def test_a_child_with_bad_properties_is_malformed_alone() -> None:
    parent = encode_shared_send(template(), [(0, 0, 0, 0, b"\xff\xfe", b"a"),
                                             (1, 0, 0, 0, b"", b"b")])
    _, entries = decode_shared_send(SEND, parent.full_body(), 1000)
    assert isinstance(entries[0], str) and "UTF-8" in entries[0]
    assert isinstance(entries[1], SendEntry)


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda b: b + b"\0" * 5, "trailing bytes"),
    (lambda b: b[:-1], "cut short"),
    (lambda b: b"", "needs a template"),
    (lambda b: b[:3], "trailing bytes"),
])
def test_malformed_parents(mutate: object, reason: str) -> None:
    body = encode_shared_send(template(), [(0, 0, 0, 0, b"", b"ab")]).full_body()
    with pytest.raises(BatchFormatError, match=reason):
        decode_shared_send(SEND, mutate(body), 1000)  # type: ignore[operator]


def test_the_template_must_be_a_bodiless_request_of_the_code() -> None:
    other = encode_batch_request(30, [RemotingCommand.request(30, {})]).full_body()
    with pytest.raises(BatchFormatError, match="template child must be"):
        decode_shared_send(SEND, other, 1000)
    with pytest.raises(BatchFormatError, match="more than 1 children"):
        decode_shared_send(SEND, encode_shared_send(
            template(), [(0, 0, 0, 0, b"", b"a")] * 2).full_body(), 1)


def test_encoding_refuses_what_the_layout_cannot_hold() -> None:
    with pytest.raises(LocalProtocolError):
        encode_shared_send(RemotingCommand.request(RequestCode.PULL_MESSAGE, {}), [])
    with_body = encode_shared_send(RemotingCommand.request(SEND, dict(EXT), b"body"), [])
    assert with_body.full_body() == encode_shared_send(template(), []).full_body()
    with pytest.raises(LocalProtocolError):
        encode_shared_send(template(), [(1 << 40, 0, 0, 0, b"", b"a")])


def _ok(qid: int, qoff: int, msg_id: str = "7F00000100002A9F" + "0" * 16) -> RemotingCommand:
    return RemotingCommand(code=0, opaque=9, flag=FLAG_RESPONSE, ext_fields={
        "msgId": msg_id, "queueId": str(qid), "queueOffset": str(qoff),
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})


def test_response_layout() -> None:
    request = over_the_wire(encode_shared_send(template(), [(0, 0, 0, 0, b"", b"a")] * 3))
    timeout = RemotingCommand(code=10, opaque=2, flag=FLAG_RESPONSE,
                              remark="flush disk timeout", ext_fields=_ok(2, 5).ext_fields)
    resp = shared_send_response(request, [_ok(1, 4, "AB"), timeout, _ok(3, 1 << 33, "CD")])
    assert (resp.code, resp.remark) == (0, MERGED_REMARK)
    assert resp.ext_fields == {CHILD_FORM_KEY: SEND_SHARED_FORM,
                               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    assert resp.full_body() == (
        struct.pack(">BBiq", 0, 2, 1, 4) + b"AB"  # kind 0, M, queueId, queueOffset, msgId
        + b"\x01" + frame_bytes(timeout)  # kind 1: a standard child response frame
        + struct.pack(">BBiq", 0, 2, 3, 1 << 33) + b"CD")
    answers = decode_send_answers(over_the_wire(resp).body, 3)
    assert answers[0] == SendAnswer("AB", 1, 4)
    assert isinstance(answers[1], RemotingCommand)
    assert (answers[1].code, answers[1].opaque, answers[1].remark) == (
        10, 2, "flush disk timeout")
    assert send_answer_command(answers[2], 3, resp.ext_fields).ext_fields == _ok(
        3, 1 << 33, "CD").ext_fields


def test_a_standard_send_parent_may_offer_the_form() -> None:
    offer = encode_batch_request(SEND, [template()])
    offer.ext_fields[CHILD_FORMS_KEY] = f"shared,{SEND_SHARED_FORM}"
    assert batch_response(offer, []).ext_fields[CHILD_FORMS_KEY] == f"shared,{SEND_SHARED_FORM}"
    pulls = encode_batch_request(RequestCode.PULL_MESSAGE, [])
    pulls.ext_fields[CHILD_FORMS_KEY] = SEND_SHARED_FORM
    assert CHILD_FORMS_KEY not in batch_response(pulls, []).ext_fields


# ---------------------------------------------------------------------------- properties

_i32 = st.integers(-(2**31), 2**31 - 1)
_entries = st.lists(st.tuples(
    _i32, _i32, st.integers(-(2**63), 2**63 - 1), _i32,
    st.text(max_size=30).map(lambda t: t.encode()), st.binary(max_size=40)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(entries=_entries)
def test_request_round_trip(entries: list[tuple[int, int, int, int, bytes, bytes]]) -> None:
    parent = over_the_wire(encode_shared_send(template(), entries))
    tcmd, got = decode_shared_send(SEND, parent.body, 1000)
    assert [(e.queue_id, e.sys_flag, e.born_timestamp, e.flag,
             (e.properties or "").encode(), bytes(e.body)) for e in got  # type: ignore[union-attr]
            ] == entries
    for i, (entry, raw) in enumerate(zip(got, entries, strict=True), 1):
        child = shared_send_child(tcmd, i, entry)  # type: ignore[arg-type]
        assert child.ext_fields["e"] == str(raw[0]) and child.opaque == i
        assert ("i" in child.ext_fields) == bool(raw[4])


_answers = st.lists(st.one_of(
    st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1),
              st.text("0123456789ABCDEF", min_size=1, max_size=40)),
    st.sampled_from([1, 2, 10, 13, 17])), max_size=12)


@settings(max_examples=200, deadline=None)
@given(answers=_answers)
def test_response_round_trip(answers: list[tuple[int, int, str] | int]) -> None:
    responses = [_ok(a[0], a[1], a[2]) if isinstance(a, tuple) else RemotingCommand(
        code=a, opaque=i, flag=FLAG_RESPONSE, remark=f"no {i}")
        for i, a in enumerate(answers, 1)]
    request = encode_shared_send(template(), [(0, 0, 0, 0, b"", b"a")] * len(answers))
    resp = over_the_wire(shared_send_response(request, responses))
    got = decode_send_answers(resp.body, len(answers))
    for i, (answer, want) in enumerate(zip(got, responses, strict=True), 1):
        cmd = send_answer_command(answer, i, resp.ext_fields)
        assert (cmd.code, cmd.opaque, cmd.remark, cmd.ext_fields) == (
            want.code, i, want.remark, want.ext_fields)


_plain = st.builds(
    PlainAnswer,
    msg_id=st.one_of(st.text("0123456789ABCDEF", min_size=1, max_size=40),
                     st.text(max_size=300)),  # also non-ASCII and over 255 characters
    queue_id=st.one_of(st.integers(0, 2**31 - 1), st.integers(-2**40, 2**40)),
    queue_offset=st.integers(0, 2**63 - 1),
    region=st.sampled_from(["DefaultRegion", "Other"]),
    trace=st.sampled_from(["true", "false"]))


@settings(max_examples=300, deadline=None)
@given(answers=st.lists(st.one_of(_plain, st.sampled_from([1, 2, 17])), max_size=10))
def test_a_plain_answer_packs_as_the_command_it_stands_for(
        answers: list[PlainAnswer | int]) -> None:
    """The broker's fast path answers with PlainAnswer; the merged response must be the
    bytes its commands would give, the first answer's region and trace included."""
    plain = [a if isinstance(a, PlainAnswer) else RemotingCommand(
        code=a, flag=FLAG_RESPONSE, remark=f"no {a}") for a in answers]
    commands = [a.command() if isinstance(a, PlainAnswer) else a for a in plain]
    got_ext, got = compact_send_responses(plain)
    want_ext, want = compact_send_responses(commands)
    assert got_ext == want_ext
    assert b"".join(map(bytes, got)) == b"".join(map(bytes, want))


_ODD = {  # one answer made unlike the others, or out of the compact form's range
    "msg_id": ["", "F" * 256, "é"], "queue_id": [-2**31 - 1, 2**31, -2**31, 2**31 - 1],
    "queue_offset": [-2**63 - 1, 2**63, -2**63, 2**63 - 1], "region": ["Other"],
    "trace": ["true"]}


@settings(max_examples=300, deadline=None)
@given(width=st.one_of(st.integers(0, 40), st.just(256)), n=st.integers(1, 12),
       data=st.data(),
       odd=st.one_of(st.none(), st.sampled_from(sorted(_ODD))))
def test_plain_answers_packed_by_column_are_the_commands_bytes(
        width: int, n: int, data: st.DataObject, odd: str | None) -> None:
    """Plain answers only (the broker's usual merged answer) are packed by column when
    they share a region, a trace and a msgId length and their numbers fit; the bytes
    are those of the commands they stand for, whichever way they are packed."""
    plain = [PlainAnswer(data.draw(st.text("0123456789ABCDEF", min_size=width,
                                           max_size=width)),
                         data.draw(st.integers(0, 2**31 - 1)),
                         data.draw(st.integers(0, 2**63 - 1)), "DefaultRegion", "false")
             for _ in range(n)]
    if odd is not None:
        k = data.draw(st.integers(0, n - 1))
        plain[k] = plain[k]._replace(**{odd: data.draw(st.sampled_from(_ODD[odd]))})
    got_ext, got = compact_send_responses(plain)
    want_ext, want = compact_send_responses([a.command() for a in plain])
    assert got_ext == want_ext
    assert b"".join(map(bytes, got)) == b"".join(map(bytes, want))


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=120), count=st.integers(0, 5))
def test_garbage_raises_only_protocol_errors(body: bytes, count: int) -> None:
    for decode in (lambda: decode_shared_send(SEND, body, 10),
                   lambda: decode_send_answers(body, count)):
        with contextlib.suppress(ProtocolError):
            decode()


@settings(max_examples=100, deadline=None)
@given(entries=_entries, cut=st.integers(0, 400))
def test_cut_parents_raise_only_protocol_errors(
        entries: list[tuple[int, int, int, int, bytes, bytes]], cut: int) -> None:
    body = encode_shared_send(template(), entries).full_body()
    with contextlib.suppress(ProtocolError):
        decode_shared_send(SEND, body[:cut], 1000)


def test_requests_the_form_carries_unchanged() -> None:
    cmd = RemotingCommand.request(SEND, {**EXT, "e": "3", "g": "1700", "i": "K\x01v"}, b"b")
    assert shared_send_entry(cmd) == (3, 0, 1700, 0, b"K\x01v", b"b")
    assert shared_send_entry(RemotingCommand.request(SEND, dict(EXT))) == (
        0, 0, 0, 0, b"", b"")
    for bad in ({"e": "03"}, {"e": "-0"}, {"e": str(2**31)}, {"g": "x"}, {"i": ""},
                {"i": "\ud800"}, {"f": ""}):
        assert shared_send_entry(RemotingCommand.request(SEND, {**EXT, **bad})) is None
    no_queue = dict(EXT)
    del no_queue["e"]
    assert shared_send_entry(RemotingCommand.request(SEND, no_queue)) is None
    assert shared_send_entry(RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE,
                                                     dict(EXT))) is None
    a = RemotingCommand.request(SEND, {**EXT, "e": "1"})
    b = RemotingCommand.request(SEND, {**EXT, "e": "2", "i": "x"})
    assert shared_send_key(a) == shared_send_key(b)
    assert shared_send_key(a) != shared_send_key(RemotingCommand.request(SEND, {**EXT,
                                                                                "b": "U"}))


@settings(max_examples=200, deadline=None)
@given(entries=_entries.filter(lambda es: all(e[4] for e in es)))
def test_standard_children_survive_the_form(
        entries: list[tuple[int, int, int, int, bytes, bytes]]) -> None:
    kids = [RemotingCommand.request(SEND, {**EXT, "e": str(q), "f": str(f), "g": str(g),
                                           "h": str(h), "i": p.decode()}, b)
            for q, f, g, h, p, b in entries]
    raw = [shared_send_entry(k) for k in kids]
    assert all(r is not None for r in raw)
    parent = over_the_wire(encode_shared_send(kids[0] if kids else template(),
                                              raw))  # type: ignore[arg-type]
    tcmd, got = decode_shared_send(SEND, parent.body, 1000)
    for i, (kid, entry) in enumerate(zip(kids, got, strict=True), 1):
        child = shared_send_child(tcmd, i, entry)  # type: ignore[arg-type]
        assert (child.ext_fields, bytes(child.body)) == (kid.ext_fields, kid.body)
