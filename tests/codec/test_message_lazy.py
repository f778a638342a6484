"""decode_messages' one-pass fast path and MessageExt's lazily decoded properties.

Round trips against the record and batch encoders (every field, the properties as
``formats.properties.decode_properties`` reads them, ``msg_id``), what a consumer sets while
decoding (``queue_id``, ``broker_name``, ``extra_properties``), and that garbage raises only
:class:`CorruptRecord` -- at decode time, never later when the properties are first read.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.codec import message
from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.errors import CorruptRecord
from tidemq.formats.batch import encode_batch
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import HostAddr, encode_record
from tidemq.types import MessageExt, _parse_property_text

BORN = HostAddr(b"\x0a\x00\x00\x01", 5555)
STORE = HostAddr(b"\x0a\x00\x00\x02", 10911)
V6 = HostAddr(bytes(15) + b"\x01", 2)

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_props = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "a", "é", "k\x01", "x"]) | _text,
    _text, max_size=5)


def _touch(msg: MessageExt) -> None:
    """Everything a consumer may read."""
    assert isinstance(msg.properties, dict)
    assert isinstance(msg.msg_id, str)
    _ = (msg.tags, msg.keys, msg.uniq_key, repr(msg), msg == msg)


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    kw: dict[str, Any] = dict(
        topic=draw(st.sampled_from([b"T", b"Orders", "Tópico".encode(), b"L" * 130])),
        queue_id=draw(st.integers(0, 1000)),
        body=draw(st.binary(max_size=64)),
        properties=encode_properties(draw(_props)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        sys_flag=draw(st.sampled_from([0, 0x2, 0x4, 0x8])),
        queue_offset=draw(st.integers(0, 2**40)),
        physical_offset=draw(st.integers(-(2**63), 2**63 - 1)),
        reconsume_times=draw(st.integers(0, 16)),
        prepared_tx_offset=draw(st.integers(0, 2**40)),
        born_timestamp=draw(st.integers(0, 2**42)),
        store_timestamp=draw(st.integers(0, 2**42)),
        born_host=draw(st.sampled_from([BORN, STORE, V6])),
        store_host=draw(st.sampled_from([STORE, BORN, HostAddr(b"\x7f\x00\x00\x01", -1), V6])),
    )
    return bytes(encode_record(**kw)), kw


@settings(deadline=None, max_examples=200)
@given(st.lists(records(), max_size=6), st.booleans())
def test_round_trip_against_the_record_encoder(
        recs: list[tuple[bytes, dict[str, Any]]], as_view: bool) -> None:
    body = b"".join(r for r, _ in recs)
    msgs = message.decode_messages(memoryview(bytearray(body)) if as_view else body)
    assert len(msgs) == len(recs)
    for msg, (raw, kw) in zip(msgs, recs, strict=True):
        props = decode_properties(kw["properties"])
        assert msg.topic == kw["topic"].decode()
        assert msg.body == kw["body"] and isinstance(msg.body, bytes)
        assert (msg.queue_id, msg.queue_offset, msg.commit_log_offset) == (
            kw["queue_id"], kw["queue_offset"], kw["physical_offset"])
        assert (msg.flag, msg.reconsume_times, msg.prepared_transaction_offset) == (
            kw["flag"], kw["reconsume_times"], kw["prepared_tx_offset"])
        assert (msg.born_timestamp, msg.store_timestamp) == (
            kw["born_timestamp"], kw["store_timestamp"])
        assert (msg.born_host, msg.store_host) == (str(kw["born_host"]), str(kw["store_host"]))
        assert msg.store_size == len(raw) and msg.broker_name == ""
        assert msg.sys_flag & 0xF == kw["sys_flag"]
        assert msg.msg_id == props.get("UNIQ_KEY") or encode_offset_msg_id(
            kw["store_host"], kw["physical_offset"])
        assert msg.properties == props
        assert list(msg.properties.items()) == list(props.items())


@settings(deadline=None, max_examples=200)
@given(st.lists(records(), min_size=1, max_size=4), st.integers(0, 99), _props,
       st.booleans())
def test_what_a_consumer_sets_while_decoding(recs: list[tuple[bytes, dict[str, Any]]],
                                             queue_id: int, extra: dict[str, str],
                                             read_id_first: bool) -> None:
    body = b"".join(r for r, _ in recs)
    plain = message.decode_messages(body)
    extra = {k: v for k, v in extra.items() if k and v}
    msgs = message.decode_messages(body, queue_id=queue_id, broker_name="b",
                                   extra_properties=extra)
    for msg, before in zip(msgs, plain, strict=True):
        if read_id_first:
            assert msg.msg_id == before.msg_id  # the stored UNIQ_KEY, not an added one
        expected = dict(before.properties)
        expected.update(extra)
        assert list(msg.properties.items()) == list(expected.items())
        assert msg.msg_id == before.msg_id
        assert (msg.queue_id, msg.broker_name) == (queue_id, "b")


_entry_props = st.dictionaries(st.sampled_from(["UNIQ_KEY", "TAGS", "K"]),
                               st.text(max_size=6), max_size=3)


@settings(deadline=None, max_examples=200)
@given(st.lists(st.tuples(st.binary(max_size=8), _entry_props, st.integers(-5, 5)),
                min_size=1, max_size=8),
       st.booleans(), st.sampled_from([None, CompressionType.ZLIB]))
def test_inner_batch_round_trip(entries: list[tuple[bytes, dict[str, str], int]],
                                uniform: bool, ctype: CompressionType | None) -> None:
    if uniform:  # one layout: the column-wise split
        entries = [(b"abcd", {"UNIQ_KEY": f"K{i:03d}"}, flag)
                   for i, (_, _, flag) in enumerate(entries)]
    encoded = [(b, encode_properties(p), f) for b, p, f in entries]
    batch = encode_batch(encoded)
    sys_flag = 0xC0
    if ctype is not None:
        batch = compress(batch, ctype)
        sys_flag |= sys_flag_for(ctype)
    raw = bytes(encode_record(topic=b"T", queue_id=2, body=batch, properties=b"",
                              sys_flag=sys_flag, queue_offset=40, physical_offset=77,
                              store_host=STORE))
    msgs = message.decode_messages(raw, broker_name="b", extra_properties={"X": "1"})
    assert len(msgs) == len(entries)
    for i, (msg, (body, props_text, flag)) in enumerate(zip(msgs, encoded, strict=True)):
        props = decode_properties(props_text)
        assert (msg.body, msg.flag, msg.queue_offset) == (body, flag, 40 + i)
        assert msg.msg_id == props.get("UNIQ_KEY") or encode_offset_msg_id(STORE, 77)
        assert msg.properties == {**props, "X": "1"} and msg.broker_name == "b"


@settings(deadline=None, max_examples=300)
@given(st.lists(records(), min_size=1, max_size=3),
       st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_bodies_raise_only_corrupt_record_and_only_when_decoding(
        recs: list[tuple[bytes, dict[str, Any]]], flips: list[tuple[int, int]]) -> None:
    data = bytearray(b"".join(r for r, _ in recs))
    for pos, value in flips:
        data[pos % len(data)] = value
    msgs: list[MessageExt] = []
    with contextlib.suppress(CorruptRecord):
        msgs = message.decode_messages(bytes(data), max_decompressed=1 << 16)
    for msg in msgs:
        _touch(msg)


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=400))
def test_garbage_raises_only_corrupt_record(data: bytes) -> None:
    msgs: list[MessageExt] = []
    with contextlib.suppress(CorruptRecord):
        msgs = message.decode_messages(data, max_decompressed=1 << 16)
    for msg in msgs:
        _touch(msg)


@pytest.mark.parametrize("props", [b"A\x01\xff\x02", b"\xc3(\x01v\x02"])
def test_properties_that_are_not_utf8_raise_at_decode_time(props: bytes) -> None:
    raw = bytes(encode_record(topic=b"T", queue_id=0, body=b"b", properties=props))
    with pytest.raises(CorruptRecord, match="UTF-8"):
        message.decode_messages(raw + raw)


@settings(deadline=None, max_examples=200)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
       | st.lists(st.sampled_from(["a", "\x01", "\x02", "b", "é"]), max_size=20).map("".join))
def test_lazy_property_parser_agrees_with_the_format(text: str) -> None:
    raw = text.encode()
    assert list(_parse_property_text(raw).items()) == list(decode_properties(raw).items())


def _sample() -> MessageExt:
    raw = bytes(encode_record(topic=b"T", queue_id=3, body=b"b",
                              properties=encode_properties({"TAGS": "t", "KEYS": "k1 k2"}),
                              physical_offset=99, store_host=STORE))
    (msg,) = message.decode_messages(raw)
    return msg


def test_message_ext_keeps_the_dataclass_api() -> None:
    made = MessageExt("T", b"b", {"TAGS": "t"}, 1, 2, 3, 4, 0, 5, "h:1", 6, "s:2", 0,
                      msg_id="id")
    assert (made.flag, made.body_crc, made.prepared_transaction_offset) == (0, 0, 0)
    assert made.broker_name == "" and made.msg_id == "id" and made.tags == "t"
    assert made == MessageExt("T", b"b", {"TAGS": "t"}, 1, 2, 3, 4, 0, 5, "h:1", 6, "s:2",
                              0, msg_id="id")
    assert made != MessageExt("T", b"b", {}, 1, 2, 3, 4, 0, 5, "h:1", 6, "s:2", 0,
                              msg_id="id")
    assert repr(made).startswith("MessageExt(topic='T', body=b'b', properties={'TAGS': 't'}")
    with pytest.raises(TypeError):
        hash(made)
    made.queue_id, made.properties, made.msg_id = 7, {"A": "1"}, "x"
    assert (made.queue_id, made.properties, made.msg_id) == (7, {"A": "1"}, "x")


def test_decoded_message_reads_like_a_constructed_one() -> None:
    msg = _sample()
    offset_id = encode_offset_msg_id(STORE, 99)
    assert msg.msg_id == offset_id and msg.keys == ["k1", "k2"] and msg.tags == "t"
    built = MessageExt("T", b"b", {"TAGS": "t", "KEYS": "k1 k2"}, 3, 0, 99, msg.store_size,
                       0, 0, str(HostAddr(b"\x7f\x00\x00\x01", 0)), 0, str(STORE), 0,
                       body_crc=msg.body_crc, msg_id=offset_id)
    assert msg == built and repr(msg) == repr(built)
    assert copy.copy(msg) == msg and pickle.loads(pickle.dumps(msg)) == msg


def test_replacing_properties_keeps_the_stored_id() -> None:
    raw = bytes(encode_record(topic=b"T", queue_id=0, body=b"",
                              properties=encode_properties({"UNIQ_KEY": "U1"})))
    (msg,) = message.decode_messages(raw)
    msg.properties = {"UNIQ_KEY": "other"}
    assert msg.msg_id == "U1"
    (again,) = message.decode_messages(raw)
    again.properties["UNIQ_KEY"] = "changed"  # the id was pinned when they were decoded
    assert again.msg_id == "U1"


def test_dataclass_helpers_still_work() -> None:
    msg = _sample()
    assert dataclasses.is_dataclass(msg)
    assert [f.name for f in dataclasses.fields(msg)] == list(MessageExt.__match_args__)
    as_dict = dataclasses.asdict(msg)
    assert as_dict["properties"] == {"TAGS": "t", "KEYS": "k1 k2"}
    assert as_dict["msg_id"] == msg.msg_id and as_dict["queue_id"] == 3
    moved = dataclasses.replace(msg, queue_id=5)
    assert moved.queue_id == 5 and moved.properties == msg.properties
    assert dataclasses.replace(moved, queue_id=3) == msg
