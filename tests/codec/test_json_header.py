"""The JSON header's compiled writer (``json_header`` of ``tidemq.formats._crecords``)
against its twin, :func:`~tidemq.codec.header.py_encode_json`: the same bytes for every
command it writes, and ``None`` -- the twin's result or error -- for every other; and the
frame head it writes given a body length, against the general path of
:func:`~tidemq.codec.frame.encode_command`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.codec import frame, header
from tidemq.codec.command import PlainText, RemotingCommand, RequestCode, SerializeType
from tidemq.codec.frame import FrameTooLargeToSend, encode_command
from tidemq.codec.header import decode_header, encode_header, py_encode_json
from tidemq.errors import LocalProtocolError, ResponseCode

_INT32 = st.integers(-(2**31), 2**31 - 1)
#: Text with every kind of character an escape treats apart: quotes, backslashes,
#: control characters, DEL, multi-byte characters, and lone surrogates (not UTF-8).
_TEXT = st.text(st.one_of(st.characters(max_codepoint=0x7F),
                          st.sampled_from('"\\\x00\x1f\x7f\u2028é\U0001F600\ud800')),
                max_size=12)
_PLAIN = st.text("0123456789ABCDEF,", max_size=40).map(PlainText)
#: Text like a property string: clean runs of any length between characters to escape
#: (the writer checks eight bytes a step again after each escape).
_RUNS = st.lists(st.one_of(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E),
                                   max_size=30),
                           st.sampled_from(["\x01", "\x02", '"', "\\", "é"])),
                 max_size=12).map("".join)


def _args(cmd: RemotingCommand) -> tuple[Any, ...]:
    return (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version, cmd.remark,
            cmd.ext_fields, PlainText)


@st.composite
def commands(draw: st.DrawFn, odd: bool = False) -> RemotingCommand:
    """Commands of JSON headers; ``odd``: also numbers and texts the writer leaves to the
    twin (out of range, bools, other types)."""
    number = (st.one_of(_INT32, st.integers(), st.booleans(),
                        st.sampled_from([ResponseCode.SYSTEM_ERROR, RequestCode.SEND_MESSAGE]))
              if odd else st.one_of(_INT32, st.sampled_from([RequestCode.SEND_MESSAGE_V2])))
    value = (st.one_of(_TEXT, _PLAIN, st.integers(), st.none()) if odd
             else st.one_of(_TEXT, _PLAIN, _RUNS))
    ext = draw(st.dictionaries(_TEXT, value, max_size=20))
    return RemotingCommand(code=draw(number), opaque=draw(number), flag=draw(number),
                           language=draw(st.one_of(st.sampled_from(["JAVA", "PYTHON"]), _TEXT)),
                           version=draw(number), remark=draw(st.one_of(st.none(), _TEXT)),
                           ext_fields=ext, serialize_type=SerializeType.JSON)


@settings(max_examples=600, deadline=None)
@given(cmd=commands())
def test_the_writer_gives_the_twins_bytes(cmd: RemotingCommand) -> None:
    native = compiled()
    try:
        want: bytes | None = py_encode_json(cmd)
    except UnicodeEncodeError:  # a lone surrogate: the writer leaves it to the twin
        want = None
    assert native.json_header(*_args(cmd)) == want


def _encoded(cmd: RemotingCommand) -> bytes | type[Exception]:
    try:
        return encode_header(cmd)
    except (LocalProtocolError, TypeError) as exc:
        return type(exc)


@settings(max_examples=600, deadline=None)
@given(cmd=commands(odd=True))
def test_whatever_the_writer_leaves_the_twin_encodes_or_refuses(cmd: RemotingCommand) -> None:
    """encode_header answers as it does on the twin alone: the same bytes or the same
    refusal."""
    native = compiled()
    got = _encoded(cmd)
    saved, header._compiled_json = header._compiled_json, None
    try:
        want = _encoded(cmd)
    finally:
        header._compiled_json = saved
    assert got == want
    head = native.json_header(*_args(cmd))
    assert head is None or head == want


def test_a_header_written_decodes_to_the_command() -> None:
    compiled()
    cmd = RemotingCommand(code=0, opaque=7, flag=1, remark='say "no"\n',
                          ext_fields={"msgId": PlainText("7F0000010000", ), "queueId": "3",
                                      "b\\k": "\x01é"})
    head = encode_header(cmd)
    assert head == py_encode_json(cmd)
    back = decode_header(head, SerializeType.JSON)
    assert (back.code, back.opaque, back.flag, back.remark, back.ext_fields) == (
        0, 7, 1, 'say "no"\n', cmd.ext_fields)


@pytest.mark.parametrize("ext", [{}, {f"k{i:02d}": str(i) for i in range(40)}])
def test_no_ext_and_many_ext_fields(ext: dict[str, str]) -> None:
    native = compiled()
    cmd = RemotingCommand(code=17, ext_fields=ext)
    assert native.json_header(*_args(cmd)) == py_encode_json(cmd)


def _frame(cmd: RemotingCommand, limit: int | None) -> list[bytes] | type[Exception]:
    try:
        return [bytes(part) for part in encode_command(cmd, limit)]
    except (LocalProtocolError, TypeError) as exc:
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(cmd=commands(odd=True), body=st.binary(max_size=40),
       limit=st.one_of(st.none(), st.integers(0, 400)))
def test_a_frame_head_written_in_one_call_is_the_general_paths(
        cmd: RemotingCommand, body: bytes, limit: int | None) -> None:
    """encode_command gives the same buffers, or the same refusal, with the compiled
    frame head as on the general path alone; the writer's head is that path's head."""
    native = compiled()
    cmd.body = body
    got = _frame(cmd, limit)
    saved, frame._compiled_head = frame._compiled_head, None
    try:
        want = _frame(cmd, limit)
    finally:
        frame._compiled_head = saved
    assert got == want
    head = native.json_header(*_args(cmd), len(body))
    if head is not None:
        general = _frame(cmd, None)
        assert isinstance(general, list) and head == general[0]


@pytest.mark.parametrize("body_len", [-1, 2**31, 2**31 - 60, 2**64, 1.0, True])
def test_a_body_length_the_frame_cannot_carry_is_left_to_the_general_path(
        body_len: object) -> None:
    native = compiled()
    assert native.json_header(*_args(RemotingCommand(code=17)), body_len) is None


def test_a_frame_at_the_limit_is_written_and_one_over_refused() -> None:
    compiled()
    cmd = RemotingCommand(code=17, body=b"x" * 10)
    length = len(encode_command(cmd)[0]) - 4 + 10
    assert b"".join(encode_command(cmd, length)).endswith(b"x" * 10)
    with pytest.raises(FrameTooLargeToSend):
        encode_command(cmd, length - 1)
