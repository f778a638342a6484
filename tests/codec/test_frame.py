"""Frames and header serializations (docs/reference/remoting.md §1.2-§1.4)."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.codec.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    PlainText,
    RemotingCommand,
    RequestCode,
    SerializeType,
)
from tidemq.codec.frame import FrameDecoder, encode_command, frame_bytes
from tidemq.errors import LocalProtocolError, ProtocolError, RemoteProtocolError

# ---------------------------------------------------------------- golden bytes


def test_json_frame_golden_bytes() -> None:
    """The request of the §1.3 example, byte for byte."""
    cmd = RemotingCommand(
        code=105, opaque=17, language="JAVA", version=479, ext_fields={"topic": "Orders"}
    )
    header = (
        b'{"code":105,"extFields":{"topic":"Orders"},"flag":0,"language":"JAVA",'
        b'"opaque":17,"serializeTypeCurrentRPC":"JSON","version":479}'
    )
    expected = (
        struct.pack(">i", 4 + len(header))  # length: header word + header, no body
        + struct.pack(">i", (0 << 24) | len(header))  # type 0 = JSON, header length
        + header
    )
    assert frame_bytes(cmd) == expected
    dec = FrameDecoder()
    dec.receive_data(expected)
    assert dec.next_command() == cmd


def test_rocketmq_frame_golden_bytes() -> None:
    cmd = RemotingCommand(
        code=11,
        opaque=7,
        flag=FLAG_RESPONSE,
        language="CPP",
        version=63,
        remark="ok",
        ext_fields={"queueId": "3"},
        body=b"BODY",
        serialize_type=SerializeType.ROCKETMQ,
    )
    ext = (
        struct.pack(">h", 7)  # key length (short)
        + b"queueId"  # key
        + struct.pack(">i", 1)  # value length (int)
        + b"3"  # value
    )
    header = (
        struct.pack(">h", 11)  # code
        + struct.pack(">B", 1)  # language CPP
        + struct.pack(">h", 63)  # version
        + struct.pack(">i", 7)  # opaque
        + struct.pack(">i", 1)  # flag: response
        + struct.pack(">i", 2)  # remark length
        + b"ok"  # remark
        + struct.pack(">i", len(ext))  # ext block length
        + ext  # ext entries
    )
    expected = (
        struct.pack(">i", 4 + len(header) + 4)  # length
        + struct.pack(">i", (1 << 24) | len(header))  # type 1 = ROCKETMQ, header length
        + header
        + b"BODY"  # body: the rest of the frame
    )
    assert frame_bytes(cmd) == expected
    dec = FrameDecoder()
    dec.receive_data(expected)
    assert dec.next_command() == cmd


def test_rocketmq_header_zero_length_strings_are_absent() -> None:
    header = (
        struct.pack(">hBhii", 34, 0, 479, 1, 0)  # code, JAVA, version, opaque, flag
        + struct.pack(">i", 0)  # no remark
    )
    ext = struct.pack(">h", 1) + b"a" + struct.pack(">i", 0)  # "a" -> "" (null in Java)
    ext += struct.pack(">h", 1) + b"b" + struct.pack(">i", 1) + b"x"
    header += struct.pack(">i", len(ext)) + ext
    frame = struct.pack(">ii", 4 + len(header), (1 << 24) | len(header)) + header
    dec = FrameDecoder()
    dec.receive_data(frame)
    cmd = dec.next_command()
    assert cmd is not None
    assert cmd.remark is None
    assert cmd.ext_fields == {"b": "x"}
    assert cmd.language == "JAVA"


def test_json_ext_values_of_any_scalar_type_become_text() -> None:
    """The C++ client sends numbers (§1.3, §5.3)."""
    header = json.dumps(
        {
            "code": 11,
            "language": "CPP",
            "version": 63,
            "opaque": 0,
            "flag": 0,
            "extFields": {"queueId": 0, "sysFlag": 6, "batch": True, "x": None, "f": 1.5},
        }
    ).encode()
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    dec = FrameDecoder()
    dec.receive_data(frame)
    cmd = dec.next_command()
    assert cmd is not None
    assert cmd.ext_fields == {"queueId": "0", "sysFlag": "6", "batch": "true", "f": "1.5"}


def test_language_ordinal_and_unknown() -> None:
    header = json.dumps({"code": 1, "language": 3}).encode()
    dec = FrameDecoder()
    dec.receive_data(struct.pack(">ii", 4 + len(header), len(header)) + header)
    cmd = dec.next_command()
    assert cmd is not None and cmd.language == "PYTHON"
    header = json.dumps({"code": 1, "language": [1]}).encode()
    dec.receive_data(struct.pack(">ii", 4 + len(header), len(header)) + header)
    cmd = dec.next_command()
    assert cmd is not None and cmd.language == "OTHER"


def test_response_and_oneway_flags() -> None:
    req = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"a": "b"}, oneway=True)
    assert req.is_oneway and not req.is_response
    req.opaque = 99
    resp = req.response(remark="fine")
    assert resp.flag == FLAG_RESPONSE and resp.opaque == 99 and resp.is_response
    assert not resp.flag & FLAG_ONEWAY


def test_body_parts_are_passed_through_uncopied() -> None:
    part = memoryview(b"stored-record")
    cmd = RemotingCommand(code=0, flag=FLAG_RESPONSE, body_parts=[part, b"", b"tail"])
    bufs = encode_command(cmd)
    assert bufs[1] is part and len(bufs) == 3
    dec = FrameDecoder()
    dec.receive_data(b"".join(bufs))
    got = dec.next_command()
    assert got is not None and got.body == b"stored-recordtail"


# ---------------------------------------------------------------- limits and errors


def test_oversized_length_is_rejected_before_the_body_arrives() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    dec.receive_data(struct.pack(">ii", 1025, 0))  # the length field and an empty header
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        dec.next_command()


@pytest.mark.parametrize("length", [-1, 0, 3, -(2**31)])
def test_length_below_minimum(length: int) -> None:
    dec = FrameDecoder()
    dec.receive_data(struct.pack(">i", length))
    with pytest.raises(RemoteProtocolError):
        dec.next_command()


def test_header_longer_than_frame() -> None:
    dec = FrameDecoder()
    dec.receive_data(struct.pack(">ii", 8, 5) + b"1234")
    with pytest.raises(RemoteProtocolError, match="header length"):
        dec.next_command()


def test_unknown_serialization_type() -> None:
    dec = FrameDecoder()
    dec.receive_data(struct.pack(">ii", 4, 2 << 24))
    with pytest.raises(RemoteProtocolError, match="serialization"):
        dec.next_command()


def test_deeply_nested_json_header_is_a_protocol_error() -> None:
    header = b'{"code":1,"extFields":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    dec = FrameDecoder()
    dec.receive_data(struct.pack(">ii", 4 + len(header), len(header)) + header)
    with pytest.raises(RemoteProtocolError):
        dec.next_command()


@pytest.mark.parametrize(
    "member",
    [
        '"code":99999999999',
        '"opaque":-2147483649',
        '"code":"1_0"',
        '"code":" 5"',
        '"flag":true',
        '"code":1.0',
        '"version":{}',
    ],
)
def test_json_header_ints_follow_java(member: str) -> None:
    header = ("{" + member + (',"code":1' if '"code"' not in member else "") + "}").encode()
    dec = FrameDecoder()
    dec.receive_data(struct.pack(">ii", 4 + len(header), len(header)) + header)
    with pytest.raises(RemoteProtocolError):
        dec.next_command()


@pytest.mark.parametrize(
    ("cmd", "match"),
    [
        (RemotingCommand(code=200151, serialize_type=SerializeType.ROCKETMQ), "code"),
        (RemotingCommand(code=1, opaque=2**31), "opaque"),
        (RemotingCommand(code=2**31), "code 2147483648"),
        (RemotingCommand(code=1, flag=-(2**31) - 1), "flag"),
        (RemotingCommand(code=1, version=2**40), "version"),
        (RemotingCommand(code=1, remark="\ud800"), "UTF-8"),
        (
            RemotingCommand(
                code=1, ext_fields={"k": "\udc00"}, serialize_type=SerializeType.ROCKETMQ
            ),
            "UTF-8",
        ),
        (
            RemotingCommand(
                code=1, ext_fields={"k" * 40000: "v"}, serialize_type=SerializeType.ROCKETMQ
            ),
            "short",
        ),
    ],
)
def test_unencodable_commands_raise_local_protocol_error(cmd: RemotingCommand, match: str) -> None:
    with pytest.raises(LocalProtocolError, match=match):
        encode_command(cmd)


def test_partial_frames_need_more_data() -> None:
    data = frame_bytes(RemotingCommand(code=10, opaque=1, body=b"x" * 100))
    dec = FrameDecoder()
    dec.receive_data(data[:50])
    assert dec.next_command() is None
    assert dec.buffered == 50
    dec.receive_data(data[50:])
    assert dec.next_command() is not None
    assert dec.next_command() is None
    assert dec.buffered == 0


# ---------------------------------------------------------------- properties

_text = st.text(st.characters(codec="utf-8"), max_size=20)
_nonempty = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)
_i32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def commands(draw: st.DrawFn, stype: SerializeType | None = None) -> RemotingCommand:
    """Commands that survive a round trip in their serialization."""
    if stype is None:
        stype = draw(st.sampled_from(SerializeType))
    binary = stype is SerializeType.ROCKETMQ
    values = _nonempty if binary else _text
    keys = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
    return RemotingCommand(
        code=draw(st.integers(-(2**15), 2**15 - 1) if binary else _i32),
        opaque=draw(_i32),
        flag=draw(_i32),
        language=draw(st.sampled_from([lang.name for lang in LanguageCode])),
        version=draw(st.integers(0, 2**15 - 1) if binary else _i32),
        remark=draw(st.none() | (_nonempty if binary else _text)),
        ext_fields=draw(st.dictionaries(keys, values, max_size=6)),
        body=draw(st.binary(max_size=64)),
        serialize_type=stype,
    )


@settings(deadline=None, max_examples=300)
@given(commands())
def test_frame_round_trip(cmd: RemotingCommand) -> None:
    dec = FrameDecoder()
    dec.receive_data(frame_bytes(cmd))
    assert dec.next_command() == cmd
    assert dec.next_command() is None


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands(), min_size=1, max_size=5))
def test_one_byte_at_a_time_equals_all_at_once(cmds: list[RemotingCommand]) -> None:
    data = b"".join(frame_bytes(c) for c in cmds)
    whole = FrameDecoder()
    whole.receive_data(data)
    at_once = []
    while (c := whole.next_command()) is not None:
        at_once.append(c)
    trickle = FrameDecoder()
    one_by_one = []
    for i in range(len(data)):
        trickle.receive_data(data[i : i + 1])
        while (c := trickle.next_command()) is not None:
            one_by_one.append(c)
    assert at_once == one_by_one == cmds


def _drain(data: bytes, max_frame_size: int = 4096) -> None:
    """Feed ``data``; anything but a ProtocolError escaping is a bug."""
    dec = FrameDecoder(max_frame_size=max_frame_size)
    dec.receive_data(data)
    try:
        while dec.next_command() is not None:
            pass
    except ProtocolError:
        pass


@settings(deadline=None, max_examples=1500)
@given(st.binary(max_size=300))
def test_random_garbage_raises_only_protocol_errors(data: bytes) -> None:
    _drain(data)


@settings(deadline=None, max_examples=1500)
@given(st.sampled_from([0, 1, 2, 255]), st.binary(max_size=300), st.binary(max_size=16))
def test_garbage_headers_raise_only_protocol_errors(stype: int, header: bytes, body: bytes) -> None:
    """Well-formed frames around random headers reach the header decoders."""
    frame = struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header))
    _drain(frame + header + body)


_json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | _text
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=5,
)
_header_keys = st.sampled_from(
    [
        "code",
        "opaque",
        "flag",
        "language",
        "version",
        "remark",
        "extFields",
        "serializeTypeCurrentRPC",
    ]
)


@settings(deadline=None, max_examples=300)
@given(st.dictionaries(_header_keys, _json_values | st.dictionaries(_text, _json_values)))
def test_type_confused_json_headers_raise_only_protocol_errors(obj: dict[str, object]) -> None:
    header = json.dumps(obj).encode()
    _drain(struct.pack(">ii", 4 + len(header), len(header)) + header, 1 << 20)


@settings(deadline=None, max_examples=1000)
@given(
    commands(),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
)
def test_mutated_frames_raise_only_protocol_errors(
    cmd: RemotingCommand, flips: list[tuple[int, int]]
) -> None:
    data = bytearray(frame_bytes(cmd))
    for pos, value in flips:
        data[pos % len(data)] = value
    _drain(bytes(data))


# ---------------------------------------------------------------- plain text values

_PLAIN_CHARS = st.characters(min_codepoint=0x20, blacklist_characters='"\\',
                             blacklist_categories=("Cs",))  # surrogates: not UTF-8 at all


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(plain=st.text(_PLAIN_CHARS, max_size=300),
       others=st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=4),
       stype=st.sampled_from(list(SerializeType)))
def test_a_plain_text_value_encodes_as_its_str(plain: str, others: dict[str, str],
                                               stype: SerializeType) -> None:
    """A PlainText ext value (no quote, backslash or control character) gives the bytes
    its plain ``str`` gives, in either serialization, and decodes back to that ``str``."""
    def command(value: str) -> RemotingCommand:
        return RemotingCommand(code=0, opaque=3, flag=FLAG_RESPONSE,
                               ext_fields={**others, "msgId": value}, serialize_type=stype)

    data = frame_bytes(command(PlainText(plain)))
    assert data == frame_bytes(command(plain))
    dec = FrameDecoder()
    dec.receive_data(data)
    back = dec.next_command()
    assert back is not None and back.ext_fields.get("msgId", "") == plain


def test_an_unknown_ext_value_type_is_refused() -> None:
    with pytest.raises(TypeError, match="object"):
        frame_bytes(RemotingCommand(code=0, ext_fields={"a": object()}))  # type: ignore[dict-item]
