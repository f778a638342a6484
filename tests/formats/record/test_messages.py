"""decode_plain_messages: plain records become the messages decode_record describes, and
the first record that is not plain is left to the caller; the compiled decoder and its
twin give the same messages, stop at the same record and call back alike."""

from __future__ import annotations

import functools
import gc
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.formats.record import (
    OFF_BODY,
    HostAddr,
    Record,
    decode_record,
    encode_record,
    messages,
)
from tidemq.formats.record.messages import decode_plain_messages, py_decode_plain_messages
from tidemq.types import MessageExt

V4 = HostAddr(b"\x0a\x01\x02\x03", 40001)
V6 = HostAddr(bytes(range(16)), 40002)
I32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(alphabet=st.characters(max_codepoint=0x7F, exclude_characters="\x01\x02"),
               max_size=8)


def _host(ip: bytes, port: int) -> str:
    return str(HostAddr(ip, port))


def _lazy(ip: bytes, port: int) -> tuple[str, dict[str, str] | None]:
    return (ip + port.to_bytes(4, "big")).hex().upper(), None


@settings(max_examples=150, deadline=None)
@given(records=st.lists(st.tuples(st.binary(max_size=30), TEXT, I32, st.integers(0, 2**40),
                                  st.sampled_from([0, 0x2, 0x1, 0x80 | 0x40])),
                        min_size=1, max_size=8),
       topic=st.sampled_from(["T", "Topic", "é" * 20]), v6_at=st.integers(0, 10),
       queue_id=st.one_of(st.none(), st.integers(0, 7)))
def test_plain_records_decode_as_decode_record_reads_them(
        records: list[tuple[bytes, str, int, int, int]], topic: str, v6_at: int,
        queue_id: int | None) -> None:
    bufs = [encode_record(topic=topic.encode(), queue_id=3, body=body,
                          properties=f"K\x01{value}\x02".encode(), flag=flag,
                          sys_flag=sys_flag, born_host=V6 if i == v6_at else V4,
                          store_host=V4, queue_offset=qo, physical_offset=i * 500,
                          store_timestamp=7, born_timestamp=6)
            for i, (body, value, flag, qo, sys_flag) in enumerate(records)]
    data = b"".join(bufs)
    out: list[MessageExt] = []
    stop = decode_plain_messages(data, 0, out, True, queue_id, "b", _host, _lazy)
    plain = 0
    for i, (_, _, _, _, sys_flag) in enumerate(records):
        if sys_flag & 0xC1 or i == v6_at:
            break
        plain += 1
    assert stop == sum(map(len, bufs[:plain]))
    assert len(out) == plain
    for msg, buf in zip(out, bufs, strict=False):
        got = decode_record(buf)
        assert isinstance(got, Record)
        assert (msg.topic, msg.body, msg.flag, msg.queue_offset, msg.commit_log_offset,
                msg.sys_flag, msg.store_size, msg.body_crc, msg.store_timestamp,
                msg.born_timestamp) == (
            got.topic, bytes(got.body), got.flag, got.queue_offset, got.physical_offset,
            got.sys_flag, got.total_size, got.body_crc, got.store_timestamp,
            got.born_timestamp)
        assert msg.queue_id == (got.queue_id if queue_id is None else queue_id)
        assert (msg.born_host, msg.store_host) == (str(got.born_host), str(got.store_host))
        assert msg.broker_name == "b"


def test_a_body_crc_that_does_not_check_out_is_left_to_the_caller() -> None:
    buf = encode_record(topic=b"T", queue_id=0, body=b"body", properties=b"", crc=1)
    out: list[MessageExt] = []
    assert decode_plain_messages(bytes(buf), 0, out, True, None, "", _host, _lazy) == 0
    assert decode_plain_messages(bytes(buf), 0, out, False, None, "", _host, _lazy) == len(buf)


# ------------------------------------------------------- the compiled decoder and its twin

_SLOTS = MessageExt.__slots__
_HOSTS = [V4, HostAddr(b"\x7f\x00\x00\x01", 10911), HostAddr(b"\xc0\xa8\x00\x01", -1), V6]
_TOPICS = [b"T", b"Topic", "é".encode() * 20, b"\xff\xfe", b"", b"x" * 127, b"y" * 128]
_PROPS = [b"", b"K\x01v\x02", "K\x01é\x02".encode(), b"K\x01\xc3\x02", b"UNIQ_KEY\x01ab\x02"]


def _compiled_decoder() -> Any:
    return compiled().decode_plain_messages


def test_the_compiled_decoder_is_the_one_used() -> None:
    compiled_decoder = _compiled_decoder()  # a skip when the run asked for the twins only
    decoder = messages.decode_plain_messages
    assert isinstance(decoder, functools.partial)
    assert decoder.func is compiled_decoder and decoder.args == (MessageExt,)


class _Calls:
    """host_text and lazy_of that log their calls and answer a new object each time, so
    that which call a message's strings came from shows."""

    def __init__(self) -> None:
        self.log: list[tuple[str, bytes, int]] = []

    def host(self, ip: bytes, port: int) -> str:
        self.log.append(("host", ip, port))
        return f"{ip.hex()}:{port}#{len(self.log)}"

    def lazy(self, ip: bytes, port: int) -> tuple[str, dict[str, str] | None]:
        self.log.append(("lazy", ip, port))
        return ip.hex(), {"call": str(len(self.log))}


@st.composite
def _records(draw: st.DrawFn) -> bytes:
    """One record: mostly plain, the others of every kind that is not (V2, IPv6,
    compressed, batched; a topic or properties that are not UTF-8; a body CRC that is
    wrong)."""
    plain = draw(st.integers(0, 3)) > 0

    def pick(usual: list[Any], other: list[Any]) -> Any:
        return draw(st.sampled_from(usual if plain else usual + other))

    return bytes(encode_record(
        topic=pick([*_TOPICS[:3], b"", b"x" * 127], [b"\xff\xfe", b"y" * 128]),
        queue_id=draw(I32), body=draw(st.binary(max_size=40)),
        properties=pick([*_PROPS[:3], _PROPS[4]], [b"K\x01\xc3\x02"]), flag=draw(I32),
        sys_flag=pick([0, 0x2, 0x100], [0x1, 0x40, 0x80, 0xC0, 0x104]),
        born_host=pick(_HOSTS[:3], [V6]), store_host=pick(_HOSTS[:3], [V6]),
        born_timestamp=draw(st.integers(-(2**63), 2**63 - 1)),
        store_timestamp=draw(st.integers(0, 2**45)),
        queue_offset=draw(st.integers(-(2**63), 2**63 - 1)),
        physical_offset=draw(st.integers(0, 2**50)), reconsume_times=draw(I32),
        prepared_tx_offset=draw(st.integers(-(2**63), 2**63 - 1)),
        crc=pick([None], [0, -1, 5])))


def _long_v1_topic() -> bytes:
    """A V1 record whose TOPICLENGTH byte says 129: everything else adds up (the topic
    then takes the two PROPERTIESLENGTH bytes, and the two property bytes after them say
    how many are left)."""
    data = bytearray(encode_record(topic=b"x" * 127, queue_id=0, body=b"b",
                                   properties=b"\x00\x02ab"))
    data[OFF_BODY + 1] = 129
    return bytes(data)


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    """Records laid end to end, then perhaps damaged: bytes flipped, cut, or added."""
    records = _records() | st.just(_long_v1_topic())
    data = bytearray(b"".join(draw(st.lists(records, max_size=8))))
    if data and draw(st.integers(0, 2)) == 0:
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= draw(st.integers(1, 255))
    if data and draw(st.integers(0, 5)) == 0:
        del data[draw(st.integers(0, len(data) - 1)):]
    if draw(st.integers(0, 5)) == 0:
        data += draw(st.binary(max_size=100))
    return bytes(data)


def _decode(decoder: Any, data: bytes, pos: int, check_crc: bool, queue_id: int | None,
            ) -> tuple[object, list[MessageExt], list[tuple[str, bytes, int]]]:
    calls = _Calls()
    out: list[MessageExt] = []
    try:
        stop: object = decoder(data, pos, out, check_crc, queue_id, "broker", calls.host,
                               calls.lazy)
    except ValueError as exc:
        stop = ValueError(str(exc))
    return stop, out, calls.log


@settings(max_examples=600, deadline=None)
@given(data=_bodies(), pos=st.just(0) | st.integers(-2, 300), check_crc=st.booleans(),
       queue_id=st.none() | st.integers(-3, 2**40))
def test_the_compiled_decoder_gives_the_twins_messages(data: bytes, pos: int,
                                                       check_crc: bool,
                                                       queue_id: int | None) -> None:
    compiled = functools.partial(_compiled_decoder(), MessageExt)
    want = _decode(py_decode_plain_messages, data, pos, check_crc, queue_id)
    got = _decode(compiled, data, pos, check_crc, queue_id)
    assert type(got[0]) is type(want[0]) and str(got[0]) == str(want[0])
    assert got[2] == want[2]  # host_text and lazy_of called alike, in the same order
    assert len(got[1]) == len(want[1])
    for ours, theirs in zip(got[1], want[1], strict=True):
        assert type(ours) is MessageExt
        for name in _SLOTS:
            assert getattr(ours, name) == getattr(theirs, name), name
            assert type(getattr(ours, name)) is type(getattr(theirs, name)), name
        assert ours == theirs and ours.properties == theirs.properties
        assert ours.msg_id == theirs.msg_id


def test_a_v1_topic_over_127_bytes_is_not_plain() -> None:
    for decoder in (py_decode_plain_messages,
                    functools.partial(_compiled_decoder(), MessageExt)):
        assert decoder(_long_v1_topic(), 0, [], True, None, "b", _host, _lazy) == 0


def test_the_compiled_decoder_shares_strings_as_the_twin_does() -> None:
    """One topic string, one ``_lazy`` pair and one host string per run of records of
    the same topic and hosts, as the twin reuses them."""
    compiled = functools.partial(_compiled_decoder(), MessageExt)
    data = b"".join(bytes(encode_record(topic=b"T", queue_id=1, body=b"b", properties=b"",
                                        store_host=host, born_host=host))
                    for host in (V4, V4, _HOSTS[1], _HOSTS[1]))
    for decoder in (py_decode_plain_messages, compiled):
        out: list[MessageExt] = []
        calls = _Calls()
        assert decoder(data, 0, out, True, None, "b", calls.host, calls.lazy) == len(data)
        assert len(calls.log) == 6
        assert out[0].topic is out[3].topic
        assert out[0]._lazy is out[1]._lazy and out[2]._lazy is out[3]._lazy
        assert out[0]._lazy is not out[2]._lazy
        assert out[0].store_host is out[1].store_host


def test_the_compiled_decoder_reuses_the_times_and_size_of_the_record_before() -> None:
    """A batch's records share their times and size: one int each, not one a message."""
    data = b"".join(bytes(encode_record(topic=b"T", queue_id=1, body=b"b" * 300,
                                        properties=b"", born_timestamp=born,
                                        store_timestamp=1 << 41))
                    for born in (1 << 40, 1 << 40, 5 << 40))
    out: list[MessageExt] = []
    functools.partial(_compiled_decoder(), MessageExt)(data, 0, out, True, None, "b", _host,
                                                       _lazy)
    assert [m.born_timestamp for m in out] == [1 << 40, 1 << 40, 5 << 40]
    assert out[0].born_timestamp is out[1].born_timestamp
    assert out[0].store_timestamp is out[1].store_timestamp is out[2].store_timestamp
    assert out[0].store_size is out[2].store_size


def test_the_compiled_decoders_messages_are_left_out_of_the_cycle_collector() -> None:
    """They hold no container but the ``_lazy`` pair: untracked, they are freed by their
    count all the same, and what a consumer later stores in them stays usable."""
    data = b"".join(bytes(encode_record(topic=b"T", queue_id=1, body=b"b%d" % i,
                                        properties=b"UNIQ_KEY\x01k%d\x02" % i))
                    for i in range(3))
    out: list[MessageExt] = []
    extra = {"MIN_OFFSET": "0"}
    compiled = functools.partial(_compiled_decoder(), MessageExt)
    assert compiled(data, 0, out, True, None, "b", _host, lambda ip, port: ("P", extra)) == len(
        data)
    assert not any(gc.is_tracked(msg) for msg in out)
    probe = _Probe()
    alive = weakref.WeakSet([probe])
    out[0].body = probe  # type: ignore[assignment]  # a tracked object in a slot
    del probe
    assert len(alive) == 1
    out[0].properties["A"] = "1"
    assert out[0].properties == {"UNIQ_KEY": "k0", "MIN_OFFSET": "0", "A": "1"}
    assert [m.msg_id for m in out] == ["k0", "k1", "k2"]
    out.clear()
    assert len(alive) == 0  # freed with the message, without a collection


class _Probe:
    """An object whose end a weak reference sees."""


def test_the_compiled_decoder_refuses_a_class_without_the_slots() -> None:
    class Other:
        __slots__ = ("topic",)

    with pytest.raises(TypeError, match="not a slot"):
        _compiled_decoder()(Other, b"", 0, [], True, None, "", str, str)
    with pytest.raises(TypeError):
        _compiled_decoder()(MessageExt, bytearray(), 0, [], True, None, "", str, str)


def test_a_callback_that_raises_stops_both_alike() -> None:
    data = bytes(encode_record(topic=b"T", queue_id=1, body=b"b", properties=b""))

    def fails(ip: bytes, port: int) -> str:
        raise LookupError(ip)

    for decoder in (py_decode_plain_messages,
                    functools.partial(_compiled_decoder(), MessageExt)):
        out: list[MessageExt] = []
        with pytest.raises(LookupError):
            decoder(data * 2, 0, out, True, None, "b", fails, _lazy)
        assert out == []
