"""Pull-body decoding and send-request building (remoting.md §3, store.md §3.6)."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.codec import message
from tidemq.codec.command import RequestCode
from tidemq.codec.compression import CompressionType, compress, decompress, sys_flag_for
from tidemq.codec.headers import (
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    decode_send_header,
)
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import CorruptRecord, LocalProtocolError
from tidemq.formats.batch import encode_batch, iter_batch
from tidemq.formats.msgid import decode_offset_msg_id, encode_offset_msg_id
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import HostAddr, encode_blank, encode_record
from tidemq.types import Message

STORE = HostAddr(bytes([10, 0, 0, 5]), 10911)
BORN = HostAddr(bytes([10, 0, 0, 9]), 50123)
UNWRAP = 0x40 | 0x80


def _record(body: bytes = b"hello", props: dict[str, str] | None = None, **kw: Any) -> bytes:
    args: dict[str, Any] = dict(
        topic=b"Orders",
        queue_id=3,
        body=body,
        properties=encode_properties(props if props is not None else {"TAGS": "a"}),
        flag=5,
        born_timestamp=1000,
        born_host=BORN,
        store_host=STORE,
        store_timestamp=2000,
        queue_offset=40,
        physical_offset=123456,
        reconsume_times=1,
    )
    args.update(kw)
    return bytes(encode_record(**args))


def test_plain_records() -> None:
    body = _record() + _record(b"two", {"UNIQ_KEY": "U2"}, queue_offset=41, physical_offset=9)
    first, second = message.decode_messages(body)
    assert (first.topic, first.body, first.queue_id, first.queue_offset, first.flag) == (
        "Orders",
        b"hello",
        3,
        40,
        5,
    )
    assert first.properties == {"TAGS": "a"} and first.tags == "a"
    assert (first.born_host, first.store_host) == ("10.0.0.9:50123", "10.0.0.5:10911")
    assert (first.born_timestamp, first.store_timestamp, first.reconsume_times) == (1000, 2000, 1)
    assert first.commit_log_offset == 123456 and first.store_size == len(_record())
    assert first.msg_id == encode_offset_msg_id(STORE, 123456)
    assert decode_offset_msg_id(first.msg_id) == (STORE, 123456)
    assert second.msg_id == "U2" and second.queue_offset == 41


def test_empty_body() -> None:
    assert message.decode_messages(b"") == []


def test_v2_topic_and_ipv6_hosts_take_the_general_path() -> None:
    topic = b"T" * 200
    v6 = HostAddr(bytes(15) + b"\x01", 8080)
    body = _record(topic=topic, born_host=v6, store_host=v6) + _record()
    first, second = message.decode_messages(body)
    assert first.topic == "T" * 200
    assert first.store_host == "::1:8080" and first.sys_flag & 0x30 == 0x30
    assert first.msg_id == encode_offset_msg_id(v6, 123456) and len(first.msg_id) == 56
    assert second.topic == "Orders"


@pytest.mark.parametrize(
    ("ctype", "sys_flag"),
    [
        *((t, sys_flag_for(t)) for t in CompressionType),
        (CompressionType.ZLIB, 0x1),  # type bits 0 also mean zlib
    ],
)
def test_compressed_record(ctype: CompressionType, sys_flag: int) -> None:
    payload = b"payload " * 1000
    rec = _record(compress(payload, ctype), sys_flag=sys_flag | 0x4)
    (msg,) = message.decode_messages(rec, check_crc=True)
    assert msg.body == payload
    assert msg.sys_flag & 0x1 == 0 and msg.sys_flag & 0x4  # COMPRESSED cleared, rest kept


def test_decompression_bomb_is_rejected() -> None:
    bomb = compress(b"\0" * 20_000_000, CompressionType.ZSTD)
    body = _record() + _record(bomb, sys_flag=sys_flag_for(CompressionType.ZSTD))
    with pytest.raises(CorruptRecord, match="beyond") as info:
        message.decode_messages(body, max_decompressed=1_000_000)
    assert info.value.offset == len(_record())


def _batch(n: int) -> bytes:
    return encode_batch(
        [
            (b"m%d" % i, encode_properties({"UNIQ_KEY": f"K{i}", "TAGS": "t"}), 100 + i)
            for i in range(n)
        ]
    )


@pytest.mark.parametrize("ctype", [None, *CompressionType])
def test_inner_batch_is_unwrapped(ctype: CompressionType | None) -> None:
    batch = _batch(3)
    sys_flag = UNWRAP
    if ctype is not None:
        batch = compress(batch, ctype)
        sys_flag |= sys_flag_for(ctype)
    rec = _record(
        batch, {"INNER_NUM": "3", "INNER_BASE": "40", "UNIQ_KEY": "OUTER"}, sys_flag=sys_flag
    )
    msgs = message.decode_messages(_record() + rec + _record())
    assert len(msgs) == 5
    subs = msgs[1:4]
    assert [m.queue_offset for m in subs] == [40, 41, 42]
    assert [m.body for m in subs] == [b"m0", b"m1", b"m2"]
    assert [m.flag for m in subs] == [100, 101, 102]
    assert [m.msg_id for m in subs] == ["K0", "K1", "K2"]
    assert all(m.properties == {"UNIQ_KEY": m.msg_id, "TAGS": "t"} for m in subs)
    assert all(
        m.commit_log_offset == 123456 and m.topic == "Orders" and m.queue_id == 3 for m in subs
    )
    # COMPRESSED is cleared once decompressed; the type bits (0x700) stay as stored
    assert all(m.sys_flag & ~0x700 == UNWRAP for m in subs)


def test_inner_batch_kept_whole_without_unwrap() -> None:
    rec = _record(_batch(2), {"INNER_NUM": "2"}, sys_flag=UNWRAP)
    (msg,) = message.decode_messages(rec, unwrap=False)
    assert msg.body == _batch(2)


def test_only_both_bits_unwrap() -> None:
    (msg,) = message.decode_messages(_record(_batch(2), sys_flag=0x80))
    assert msg.body == _batch(2)


def test_sub_message_without_uniq_key_gets_the_offset_id() -> None:
    batch = encode_batch([(b"x", b"", 0)])
    (msg,) = message.decode_messages(_record(batch, sys_flag=UNWRAP))
    assert msg.msg_id == encode_offset_msg_id(STORE, 123456)


def test_corrupt_inner_batch() -> None:
    with pytest.raises(CorruptRecord, match="inner batch"):
        message.decode_messages(_record(_batch(2)[:-1], sys_flag=UNWRAP))


def test_crc_check() -> None:
    good = _record()
    bad = bytearray(good)
    struct.pack_into(">i", bad, 8, 1)  # BODYCRC
    assert message.decode_messages(bytes(bad))[0].body == b"hello"
    with pytest.raises(CorruptRecord, match="CRC"):
        message.decode_messages(bytes(bad), check_crc=True)


@pytest.mark.parametrize(
    "body",
    [
        _record()[:-1],
        _record() + b"\0" * 7,
        encode_blank(64) + bytes(56),
        b"\xff" * 100,
    ],
)
def test_malformed_bodies(body: bytes) -> None:
    with pytest.raises(CorruptRecord):
        message.decode_messages(body)


def test_memoryview_input() -> None:
    data = bytearray(b"xx" + _record())
    assert message.decode_messages(memoryview(data)[2:])[0].body == b"hello"


_props = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "X"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=0x7FF), min_size=1, max_size=10),
    max_size=4,
)


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    kw: dict[str, Any] = dict(
        topic=draw(st.sampled_from([b"T", b"Orders", b"%RETRY%g", b"L" * 130])),
        queue_id=draw(st.integers(0, 1000)),
        body=draw(st.binary(max_size=64)),
        properties=encode_properties(draw(_props)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        sys_flag=draw(st.sampled_from([0, 0x2, 0x4, 0x8])),
        queue_offset=draw(st.integers(0, 2**40)),
        physical_offset=draw(st.integers(0, 2**40)),
        born_host=draw(st.sampled_from([BORN, HostAddr(bytes(16), 1)])),
        store_host=draw(st.sampled_from([STORE, HostAddr(bytes(15) + b"\x01", 2)])),
    )
    return bytes(encode_record(**kw)), kw


@settings(deadline=None, max_examples=200)
@given(st.lists(records(), max_size=6))
def test_fast_and_general_paths_agree(recs: list[tuple[bytes, dict[str, Any]]]) -> None:
    body = b"".join(r for r, _ in recs)
    msgs = message.decode_messages(body, check_crc=True)
    dec = message._Decoder(True, True, 1 << 20)
    general: list[Any] = []
    pos = 0
    while pos < len(body):
        pos = dec.general(memoryview(body), pos, general)
    assert msgs == general
    for msg, (_, kw) in zip(msgs, recs, strict=True):
        assert msg.body == kw["body"] and msg.queue_offset == kw["queue_offset"]
        assert msg.properties == decode_properties(kw["properties"])


@settings(deadline=None, max_examples=1000)
@given(
    st.lists(records(), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_mutated_bodies_raise_only_corrupt_record(
    recs: list[tuple[bytes, dict[str, Any]]], flips: list[tuple[int, int]]
) -> None:
    data = bytearray(b"".join(r for r, _ in recs))
    for pos, value in flips:
        data[pos % len(data)] = value
    with contextlib.suppress(CorruptRecord):
        message.decode_messages(bytes(data), max_decompressed=1 << 16)


@settings(deadline=None, max_examples=500)
@given(st.binary(max_size=400))
def test_garbage_raises_only_corrupt_record(data: bytes) -> None:
    with contextlib.suppress(CorruptRecord):
        message.decode_messages(data, max_decompressed=1 << 16)


# ---------------------------------------------------------------- building sends

KEYS = UniqKeyGenerator("10.0.0.1", 4242, 0xCAFE)
NOW = 1726700000000


def test_send_request_v2() -> None:
    msg = Message("Orders", b"hi", {"TAGS": "a", "KEYS": "k1 k2"}, flag=3)
    opts = message.SendOptions(producer_group="pg")
    cmd = message.send_request(msg, opts, queue_id=2, now_ms=NOW, keys=KEYS, broker_name="b")
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.body == b"hi"
    h = decode_send_header(cmd.code, cmd.ext_fields)
    assert (h.producer_group, h.topic, h.default_topic, h.default_topic_queue_nums) == (
        "pg",
        "Orders",
        "TBW102",
        4,
    )
    assert (h.queue_id, h.sys_flag, h.born_timestamp, h.flag, h.batch, h.broker_name) == (
        2,
        0,
        NOW,
        3,
        False,
        "b",
    )
    assert h.properties is not None
    props = decode_properties(h.properties.encode())
    assert props["TAGS"] == "a" and len(props["UNIQ_KEY"]) == 32
    assert "UNIQ_KEY" not in msg.properties
    assert set(cmd.ext_fields) >= {"a", "b", "c", "d", "e", "f", "g", "h", "i"}


def test_send_headers_kept_by_the_options_follow_them() -> None:
    """The header template a SendOptions keeps per topic and broker is its own: options
    made from it by replace() start without, and equal options still compare equal."""
    opts = message.SendOptions(producer_group="pg")
    first = message.send_request(Message("T", b"x"), opts, queue_id=1, now_ms=NOW, keys=KEYS,
                                 broker_name="b")
    other = dataclasses.replace(opts, producer_group="other", default_topic="Mine")
    second = message.send_request(Message("T", b"x"), other, queue_id=1, now_ms=NOW,
                                  keys=KEYS, broker_name="b")
    assert (first.ext_fields["a"], second.ext_fields["a"]) == ("pg", "other")
    assert second.ext_fields["c"] == "Mine"
    again = message.send_request(Message("T", b"y"), opts, queue_id=3, now_ms=NOW + 1,
                                 keys=KEYS, broker_name="b")
    assert (again.ext_fields["a"], again.ext_fields["e"], again.ext_fields["g"]) == (
        "pg", "3", str(NOW + 1))
    assert list(opts.templates) == [("T", "b")]
    assert opts == message.SendOptions(producer_group="pg")
    assert hash(opts) == hash(message.SendOptions(producer_group="pg"))


def test_send_request_keeps_an_existing_key_and_v1_form() -> None:
    msg = Message("T", b"x", {"UNIQ_KEY": "MINE"})
    opts = message.SendOptions(producer_group="pg", v1=True)
    cmd = message.send_request(msg, opts, queue_id=0, now_ms=NOW, keys=KEYS)
    assert cmd.code == RequestCode.SEND_MESSAGE
    h = SendMessageRequestHeader.from_ext(cmd.ext_fields)
    assert h.properties == "UNIQ_KEY\x01MINE\x02"


def test_large_bodies_are_compressed_like_java() -> None:
    body = b"abcdefgh" * 1024
    opts = message.SendOptions(producer_group="pg")
    cmd = message.send_request(Message("T", body), opts, queue_id=0, now_ms=NOW, keys=KEYS)
    h = decode_send_header(cmd.code, cmd.ext_fields)
    assert h.sys_flag == 0x301
    assert decompress(cmd.body, CompressionType.ZLIB, len(body)) == body
    never = message.SendOptions(producer_group="pg", compress_over=0)
    off = message.send_request(Message("T", body), never, queue_id=0, now_ms=NOW, keys=KEYS)
    assert off.body == body


_int = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**64), 2**64))


@settings(max_examples=300, deadline=None)
@given(topic=st.text(min_size=1, max_size=20), group=st.text(max_size=10),
       broker=st.one_of(st.none(), st.text(max_size=10)), queue_id=_int, sys_flag=_int,
       flag=_int, now=st.one_of(st.integers(0, 2**63 - 1), st.integers(-(2**64), 2**70)),
       props=st.dictionaries(st.text("abcKEYS", min_size=1, max_size=5),
                             st.text("xyz ", max_size=5), max_size=3))
def test_a_usual_send_is_what_the_header_schema_gives(
        topic: str, group: str, broker: str | None, queue_id: int, sys_flag: int,
        flag: int, now: int, props: dict[str, str]) -> None:
    """The usual send's ext comes from a template; it must be the schema's, key order
    included, and anything the schema refuses is refused the same way."""
    opts = message.SendOptions(producer_group=group, compress_over=0)
    msg = Message(topic, b"x", {**props, "UNIQ_KEY": "K"}, flag=flag)

    def by_schema() -> dict[str, str]:
        header = SendMessageRequestHeader(
            producer_group=group, topic=topic, default_topic="TBW102",
            default_topic_queue_nums=4, queue_id=queue_id, sys_flag=sys_flag,
            born_timestamp=now, flag=flag,
            properties=encode_properties(msg.properties).decode(), broker_name=broker)
        return header.convert(SendMessageRequestHeaderV2).to_ext()

    try:
        want: dict[str, str] | type[Exception] = by_schema()
    except (LocalProtocolError, OverflowError) as exc:
        want = type(exc)
    try:
        cmd = message.send_request(msg, opts, queue_id=queue_id, now_ms=now, keys=KEYS,
                                   broker_name=broker, sys_flag=sys_flag)
    except (LocalProtocolError, OverflowError) as exc:
        assert want is type(exc)
        return
    assert isinstance(want, dict)
    assert list(cmd.ext_fields.items()) == list(want.items())


def test_send_validation() -> None:
    opts = message.SendOptions(producer_group="pg")
    with pytest.raises(LocalProtocolError, match="topic"):
        message.send_request(Message("", b"x"), opts, queue_id=0, now_ms=NOW, keys=KEYS)
    with pytest.raises(LocalProtocolError, match="properties"):
        message.send_request(
            Message("T", b"x", {"K": "v" * 40000}), opts, queue_id=0, now_ms=NOW, keys=KEYS
        )


def _batch_msgs() -> list[Message]:
    return [Message("Orders", b"b%d" % i, {"TAGS": "t", "WAIT": "true"}, flag=i) for i in range(3)]


@pytest.mark.parametrize("v1", [False, True])
def test_batch_send_request(v1: bool) -> None:
    opts = message.SendOptions(producer_group="pg", v1=v1)
    cmd = message.batch_send_request(_batch_msgs(), opts, queue_id=1, now_ms=NOW, keys=KEYS)
    assert cmd.code == (RequestCode.SEND_MESSAGE if v1 else RequestCode.SEND_BATCH_MESSAGE)
    h = decode_send_header(cmd.code, cmd.ext_fields)
    assert h.batch is True and h.queue_id == 1 and h.topic == "Orders"
    assert h.properties is not None
    batch_props = decode_properties(h.properties.encode())
    assert batch_props["WAIT"] == "true"
    entries = list(iter_batch(cmd.body))
    assert [bytes(e.body) for e in entries] == [b"b0", b"b1", b"b2"]
    assert [e.flag for e in entries] == [0, 1, 2]
    keys = [decode_properties(e.properties)["UNIQ_KEY"] for e in entries]
    assert len({*keys, batch_props["UNIQ_KEY"]}) == 4


def test_compressed_batch_round_trips_as_an_inner_batch() -> None:
    opts = message.SendOptions(producer_group="pg")
    cmd = message.batch_send_request(
        _batch_msgs(), opts, queue_id=0, now_ms=NOW, keys=KEYS, compression=CompressionType.LZ4
    )
    h = decode_send_header(cmd.code, cmd.ext_fields)
    assert h.sys_flag == sys_flag_for(CompressionType.LZ4)
    stored = _record(bytes(cmd.body), {"INNER_NUM": "3"}, sys_flag=h.sys_flag | UNWRAP)
    msgs = message.decode_messages(stored)
    assert [m.body for m in msgs] == [b"b0", b"b1", b"b2"]
    assert [m.queue_offset for m in msgs] == [40, 41, 42]


@pytest.mark.parametrize(
    ("msgs", "match"),
    [
        ([], "at least one"),
        ([Message("A", b""), Message("B", b"")], "mixes topics"),
        ([Message("A", b"", {"WAIT": "true"}), Message("A", b"")], "WAIT"),
        ([Message("A", b"", {"DELAY": "3"})], "delay"),
        ([Message("%RETRY%g", b"")], "retry"),
        ([Message("A", b"", {"K": "v" * 40000})], "properties"),
    ],
)
def test_batch_validation(msgs: list[Message], match: str) -> None:
    with pytest.raises(LocalProtocolError, match=match):
        message.batch_send_request(
            msgs, message.SendOptions(producer_group="pg"), queue_id=0, now_ms=NOW, keys=KEYS
        )


def test_encode_batch_body_matches_the_layout() -> None:
    body = message.encode_batch_body([Message("T", b"abc", {"A": "b"}, flag=9)])
    props = b"A\x01b\x02"
    assert body == (
        struct.pack(">i", 22 + 3 + len(props))  # TOTALSIZE
        + struct.pack(">i", 0)  # MAGICCODE
        + struct.pack(">i", 0)  # BODYCRC
        + struct.pack(">i", 9)  # FLAG
        + struct.pack(">i", 3)  # BODYLENGTH
        + b"abc"  # BODY
        + struct.pack(">h", len(props))  # PROPERTIESLENGTH
        + props  # PROPERTIES
    )
