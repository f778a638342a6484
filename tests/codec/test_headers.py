"""Custom header schemas (docs/reference/remoting.md §2) and the schema machinery."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.codec import headers
from tidemq.codec.command import RemotingCommand, RequestCode, SerializeType
from tidemq.codec.frame import FrameDecoder, frame_bytes
from tidemq.codec.schema import I64, FieldSpec, Header, HeaderFieldError, Key, Kind
from tidemq.errors import LocalProtocolError, RemoteProtocolError

ALL_HEADERS: list[type[Header]] = [
    cls
    for name in headers.__all__
    if isinstance(cls := getattr(headers, name), type) and issubclass(cls, Header)
]

_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=16)
_BY_KIND: dict[Kind, st.SearchStrategy[Any]] = {
    Kind.STR: _text,
    Kind.INT: st.integers(-(2**31), 2**31 - 1),
    Kind.LONG: st.integers(-(2**63), 2**63 - 1),
    Kind.BOOL: st.booleans(),
}


def field_values(spec: FieldSpec) -> st.SearchStrategy[Any]:
    """Values a field of ``spec``'s kind holds (``None`` too where it may)."""
    base = _BY_KIND[spec.kind]
    return st.none() | base if spec.nullable else base


@st.composite
def header_instances(draw: st.DrawFn, classes: list[type[Header]] = ALL_HEADERS) -> Header:
    cls = draw(st.sampled_from(classes))
    kwargs = {}
    for spec in cls.__schema__:
        if spec.required or draw(st.booleans()):
            kwargs[spec.name] = draw(field_values(spec))
    return cls(**kwargs)


def test_every_header_class_has_a_schema() -> None:
    assert len(ALL_HEADERS) >= 40
    for cls in ALL_HEADERS:
        if cls not in (
            headers.HeartbeatRequestHeader,
            headers.LockBatchMqRequestHeader,
            headers.UnlockBatchMqRequestHeader,
            headers.RpcRequestHeader,
        ):
            assert cls.__schema__, cls


@settings(deadline=None, max_examples=400)
@given(header_instances())
def test_header_round_trip(header: Header) -> None:
    ext = header.to_ext()
    assert all(isinstance(v, str) for v in ext.values())
    assert type(header).from_ext(ext) == header


def _reference_from_ext(cls: type[Header], ext: dict[str, str]) -> Header:
    """What ``from_ext`` must return: each field through its spec, then the dataclass
    ``__init__``."""
    kw: dict[str, Any] = {}
    for spec in cls.__schema__:
        text = next((ext[k] for k in (spec.key, *spec.aliases) if k in ext), None)
        if text is None:
            if spec.required:
                raise HeaderFieldError(cls.__name__, spec.name, spec.key, None, "missing")
            continue
        kw[spec.name] = spec.parse(cls.__name__, text)
    return cls(**kw)


_int_texts = (st.integers(-(2**64), 2**64).map(str) | st.from_regex(r"\A[+-]?[0-9]{0,20}\Z")
              # zero-padded around the digit limit, and far past it
              | st.builds(lambda sign, zeros, n: sign + "0" * zeros + str(n),
                          st.sampled_from(["", "+", "-"]), st.integers(0, 30),
                          st.integers(0, 2**63))
              | st.builds(lambda n: "0" * n + "1", st.integers(4000, 5000))
              | st.sampled_from(["", "٣", "1_000", " 1", "0x10", "\uff11"]))


@settings(deadline=None, max_examples=400)
@given(st.sampled_from(ALL_HEADERS), st.data())
def test_from_ext_agrees_with_each_fields_own_parser(cls: type[Header],
                                                     data: st.DataObject) -> None:
    ext: dict[str, str] = {}
    for spec in cls.__schema__:
        if data.draw(st.integers(0, 9)) == 0:
            continue  # absent
        text = data.draw(_text if spec.kind is Kind.STR else _int_texts
                         if spec.kind in (Kind.INT, Kind.LONG) else st.sampled_from(
                             ["true", "false", "TRUE", "1", "0", "yes"]))
        ext[spec.key] = text
    try:
        expected: Header | type[HeaderFieldError] = _reference_from_ext(cls, ext)
    except HeaderFieldError:
        expected = HeaderFieldError
    if expected is HeaderFieldError:
        with pytest.raises(HeaderFieldError):
            cls.from_ext(ext)
    else:
        assert cls.from_ext(ext) == expected


@settings(deadline=None, max_examples=200)
@given(header_instances(), st.sampled_from(SerializeType))
def test_header_round_trip_through_frames(header: Header, stype: SerializeType) -> None:
    cmd = RemotingCommand(code=1, ext_fields=header.to_ext(), serialize_type=stype)
    dec = FrameDecoder()
    dec.receive_data(frame_bytes(cmd))
    got = dec.next_command()
    assert got is not None
    assert type(header).from_ext(got.ext_fields) == header


def _send_header(**kw: Any) -> headers.SendMessageRequestHeader:
    base: dict[str, Any] = dict(
        producer_group="pg",
        topic="Orders",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=2,
        sys_flag=0x301,
        born_timestamp=1726700000000,
        flag=7,
        properties="TAGS\x01a\x02",
        reconsume_times=1,
        unit_mode=False,
        max_reconsume_times=16,
        batch=True,
        broker_name="broker-a",
    )
    base.update(kw)
    return headers.SendMessageRequestHeader(**base)


def test_send_v2_short_keys() -> None:
    v1 = _send_header()
    v2 = v1.convert(headers.SendMessageRequestHeaderV2)
    assert v2.to_ext() == {
        "a": "pg",
        "b": "Orders",
        "c": "TBW102",
        "d": "4",
        "e": "2",
        "f": "769",
        "g": "1726700000000",
        "h": "7",
        "i": "TAGS\x01a\x02",
        "j": "1",
        "k": "false",
        "l": "16",
        "m": "true",
        "n": "broker-a",
    }
    assert v1.to_ext()["bname"] == "broker-a"
    assert v1.to_ext()["producerGroup"] == "pg"
    back = v2.convert(headers.SendMessageRequestHeader)
    assert back == v1 and type(back) is headers.SendMessageRequestHeader
    assert isinstance(v2, headers.SendMessageRequestHeader)


@settings(deadline=None, max_examples=100)
@given(header_instances([headers.SendMessageRequestHeader, headers.SendMessageRequestHeaderV2]))
def test_send_v1_v2_conversion_round_trip(header: Header) -> None:
    assert isinstance(header, headers.SendMessageRequestHeader)
    v2_ext = header.convert(headers.SendMessageRequestHeaderV2).to_ext()
    assert all(len(k) == 1 or k in ("ns", "nsd", "oway", "lo") for k in v2_ext)
    v2 = headers.SendMessageRequestHeaderV2.from_ext(v2_ext)
    again = v2.convert(headers.SendMessageRequestHeader)
    assert again == header.convert(headers.SendMessageRequestHeader)


def test_decode_send_header_by_code() -> None:
    v1 = _send_header()
    v2_ext = v1.convert(headers.SendMessageRequestHeaderV2).to_ext()
    for code in (
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    ):
        got = headers.decode_send_header(code, v2_ext)
        assert got.convert(headers.SendMessageRequestHeader) == v1
    assert headers.decode_send_header(RequestCode.SEND_MESSAGE, v1.to_ext()) == v1
    with pytest.raises(HeaderFieldError):
        headers.decode_send_header(RequestCode.SEND_MESSAGE, v2_ext)


def test_v2_broker_name_falls_back_to_bname_and_v1_accepts_brokerName() -> None:
    ext = _send_header(broker_name=None).convert(headers.SendMessageRequestHeaderV2).to_ext()
    assert headers.SendMessageRequestHeaderV2.from_ext({**ext, "bname": "b"}).broker_name == "b"
    assert (
        headers.SendMessageRequestHeaderV2.from_ext({**ext, "bname": "b", "n": "n"}).broker_name
        == "n"
    )
    v1 = _send_header(broker_name=None).to_ext()
    assert headers.SendMessageRequestHeader.from_ext({**v1, "brokerName": "x"}).broker_name == "x"


def test_cpp_client_send_ext() -> None:
    """Ext of a SEND_MESSAGE from the C++ client (§5.3), with its numeric/"1" quirks."""
    ext = {
        "producerGroup": "g",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1726700000000",
        "flag": "0",
        "properties": "WAIT\x01true\x02",
        "reconsumeTimes": "0",
        "unitMode": "0",
        "batch": "1",
        "AccessKey": "",
        "Signature": "x",
        "OnsChannel": "ALIYUN",
    }
    h = headers.SendMessageRequestHeader.from_ext(ext)
    assert h.batch is True and h.unit_mode is False and h.queue_id == 0
    assert headers.SendMessageRequestHeader.from_ext({**ext, "batch": "0"}).batch is False


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("+5", 5),
        ("-2147483648", -(2**31)),
        ("2147483647", 2**31 - 1),
    ],
)
def test_java_int_parsing_accepts(text: str, value: int) -> None:
    h = headers.GetMinOffsetRequestHeader.from_ext({"topic": "T", "queueId": text})
    assert h.queue_id == value


@pytest.mark.parametrize(
    "text", ["", " 5", "5 ", "1_0", "5.0", "0x10", "2147483648", "\u0663", "--1", "+", "1e3"]
)
def test_java_int_parsing_rejects(text: str) -> None:
    with pytest.raises(HeaderFieldError) as info:
        headers.GetMinOffsetRequestHeader.from_ext({"topic": "T", "queueId": text})
    err = info.value
    assert isinstance(err, RemoteProtocolError)
    assert (err.header, err.field, err.key, err.value) == (
        "GetMinOffsetRequestHeader",
        "queue_id",
        "queueId",
        text,
    )
    assert "queueId" in str(err)


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize(("text", "ok"), [
    ("0" * 19 + "7", True), ("+" + "0" * 19 + "7", True), ("-" + "0" * 19 + "7", True),
    ("0" * 20 + "7", False), ("+" + "0" * 20 + "7", False), ("0" * 5000 + "7", False),
])
def test_zero_padded_numbers_are_read_up_to_twenty_digits(text: str, ok: bool,
                                                          bits: int) -> None:
    """The generated decoder and the field's own parser agree on zero-padded numbers:
    twenty digits are read, more are refused, saying how many there were."""
    cls = (headers.GetMinOffsetRequestHeader if bits == 32
           else headers.QueryConsumerOffsetResponseHeader)
    key = "queueId" if bits == 32 else "offset"
    ext = {"topic": "T", key: text}
    spec = next(s for s in cls.__schema__ if s.key == key)
    if ok:
        assert spec.parse(cls.__name__, text) == int(text)
        assert getattr(cls.from_ext(ext), spec.name) == int(text)
        return
    for decode in (lambda: cls.from_ext(ext), lambda: spec.parse(cls.__name__, text)):
        with pytest.raises(HeaderFieldError) as info:
            decode()
        digits = len(text.lstrip("+-"))
        assert info.value.reason.endswith(
            f"has {digits} digits; a number has at most 20, leading zeros included")
        assert len(str(info.value)) < 200  # the text is cut, not echoed whole


def test_long_fields_take_64_bits() -> None:
    h = headers.QueryConsumerOffsetResponseHeader.from_ext({"offset": str(2**63 - 1)})
    assert h.offset == 2**63 - 1
    with pytest.raises(HeaderFieldError):
        headers.QueryConsumerOffsetResponseHeader.from_ext({"offset": str(2**63)})


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("false", False),
        ("1", False),
        ("yes", False),
        ("", False),
        ("garbage", False),
    ],
)
def test_java_bool_parsing(text: str, value: bool) -> None:
    h = headers.GetMaxOffsetRequestHeader.from_ext(
        {"topic": "T", "queueId": "1", "committed": text}
    )
    assert h.committed is value


def test_defaults_apply_when_optional_keys_are_missing() -> None:
    h = headers.GetMaxOffsetRequestHeader.from_ext({"topic": "T", "queueId": "1", "junk": "x"})
    assert h.committed is True and h.broker_name is None and h.logic is None


def test_missing_required_field_names_it() -> None:
    with pytest.raises(HeaderFieldError, match="consumerGroup") as info:
        headers.PullMessageRequestHeader.from_ext({"topic": "T"})
    assert info.value.value is None and info.value.reason == "missing required field"


def test_common_optional_keys() -> None:
    ext = {
        "consumerGroup": "g",
        "topic": "T",
        "queueId": "1",
        "queueOffset": "5",
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subscription": "*",
        "subVersion": "0",
        "bname": "broker-a",
        "lo": "false",
        "ns": "n1",
        "nsd": "true",
        "oway": "false",
    }
    h = headers.PullMessageRequestHeader.from_ext(ext)
    assert (h.broker_name, h.logic, h.namespace, h.namespace_applied, h.oneway) == (
        "broker-a",
        False,
        "n1",
        True,
        False,
    )
    assert h.to_ext() == ext


def test_send_response_always_carries_region_and_trace() -> None:
    ext = headers.SendMessageResponseHeader(msg_id="ID", queue_id=1, queue_offset=9).to_ext()
    assert ext == {
        "msgId": "ID",
        "queueId": "1",
        "queueOffset": "9",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }


def test_special_keys() -> None:
    assert headers.UnregisterClientRequestHeader.ext_keys()["client_id"] == "clientID"
    assert headers.QueryMessageRequestHeader.ext_keys()["unique_key_query"] == "_UNIQUE_KEY_QUERY"
    assert headers.BrokerHeartbeatRequestHeader.ext_keys()["heartbeat_timeout_millis"] == (
        "heartbeatTimeoutMills"
    )
    assert headers.PullMessageRequestHeader.ext_keys()["proxy_froward_client_id"] == (
        "proxyFrowardClientId"
    )
    assert headers.HeartbeatResponseHeader(
        is_sub_change=True, is_support_heart_beat_v2=True
    ).to_ext() == {"IS_SUB_CHANGE": "true", "IS_SUPPORT_HEART_BEAT_V2": "true"}


def test_to_ext_rejects_values_java_cannot_parse() -> None:
    with pytest.raises(LocalProtocolError, match="queue_id"):
        headers.GetMinOffsetRequestHeader(topic="T", queue_id=2**31).to_ext()
    with pytest.raises(LocalProtocolError, match="topic"):
        headers.GetMinOffsetRequestHeader(topic=5, queue_id=1).to_ext()  # type: ignore[arg-type]


def test_headers_are_frozen() -> None:
    h = headers.GetMinOffsetRequestHeader(topic="T", queue_id=1)
    with pytest.raises(AttributeError):
        h.topic = "U"  # type: ignore[misc]


def test_registries_point_at_schemas() -> None:
    for table in (headers.REQUEST_HEADERS, headers.RESPONSE_HEADERS):
        for code, cls in table.items():
            assert code in RequestCode._value2member_map_
            assert issubclass(cls, Header)
    batch = headers.REQUEST_HEADERS[RequestCode.SEND_BATCH_MESSAGE]
    assert batch is headers.SendMessageRequestHeaderV2


def test_schema_declaration_errors() -> None:
    with pytest.raises(TypeError, match="duplicate"):

        class Dup(Header):
            a: str
            b: Annotated[str, Key("a")]

    with pytest.raises(TypeError, match="unsupported"):

        class Floaty(Header):
            a: float

    class Ok(Header):
        big: I64 | None = None
        name_of_thing: str = "x"

    assert Ok.ext_keys() == {"big": "big", "name_of_thing": "nameOfThing"}


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("", {}),
        ("+message.type=NORMAL", {"message.type": "NORMAL"}),
        ("+queue.type=BatchCQ,-delete.me", {"queue.type": "BatchCQ", "delete.me": None}),
        ("+a=b=c", {"a": "b=c"}),
    ],
)
def test_attributes(text: str, parsed: dict[str, str | None]) -> None:
    assert headers.parse_attributes(text) == parsed
    assert headers.parse_attributes(headers.format_attributes(parsed)) == parsed


@pytest.mark.parametrize("text", ["a=b", "+a", "-a=b", "+=x", "+a=1,+a=2", ","])
def test_bad_attributes(text: str) -> None:
    with pytest.raises(RemoteProtocolError, match="attributes"):
        headers.parse_attributes(text)


def test_consume_directly_header_uses_upstreams_keys() -> None:
    header = headers.ConsumeMessageDirectlyResultRequestHeader(
        consumer_group="g", client_id="c", msg_id="0A", origin_broker="broker-a",
        topic="T", topic_sys_flag=0, group_sys_flag=1)
    assert header.to_ext() == {"consumerGroup": "g", "clientId": "c", "msgId": "0A",
                               "brokerName": "broker-a", "topic": "T", "topicSysFlag": "0",
                               "groupSysFlag": "1"}
