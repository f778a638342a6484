"""SEND_BATCH_MESSAGE encoded once (codec/send_batch.py), compression that only pays,
bulk keys, and the uniform fast path of inner-batch decoding."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.codec import send_batch
from tidemq.codec.compression import (
    BATCH_LEVELS,
    MIN_COMPRESS_BYTES,
    CompressionType,
    compress,
    compress_if_smaller,
    decompress,
    sys_flag_for,
)
from tidemq.codec.headers import (
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    decode_send_header,
)
from tidemq.codec.message import SendOptions, batch_send_request, decode_messages
from tidemq.codec.send_batch import (
    KeyRun,
    encode_send_batch,
    encode_send_bodies,
    send_batch_request,
)
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import CorruptRecord, LocalProtocolError
from tidemq.formats.batch import encode_batch, iter_batch, uniform_layout
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import HostAddr, encode_record
from tidemq.types import Message

NOW = 1_700_000_000_000
HOST = HostAddr(b"\x7f\x00\x00\x01", 10911)


def keys() -> UniqKeyGenerator:
    return UniqKeyGenerator("10.0.0.7", 4242, process_hash=0xABCDEF01)


def test_bulk_keys_equal_one_by_one() -> None:
    one, bulk = keys(), keys()
    assert bulk.next_keys(NOW, 5) == [one.next_key(NOW) for _ in range(5)]
    head, counters = bulk.reserve(NOW, 3)
    assert [f"{head}{c:04X}" for c in counters] == [one.next_key(NOW) for _ in range(3)]


_props = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "a", "ü", "WAIT", "UNIQ_KEY"]),
                         st.text(st.characters(blacklist_categories=("Cs",),
                                               blacklist_characters="\x01\x02"),
                                 min_size=1, max_size=8), max_size=3)


@settings(deadline=None, max_examples=200)
@given(bodies=st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=12),
       props=st.lists(_props, min_size=1, max_size=12), same=st.booleans(),
       flag=st.integers(-(2**31), 2**31 - 1))
def test_entries_equal_the_per_message_path(bodies: list[bytes], props: list[dict[str, str]],
                                           same: bool, flag: int) -> None:
    """Fast or not, the body is what prepare_batch + batch_send_request send."""
    if same:
        msgs = [Message("T", bodies[0], dict(props[0]), flag) for _ in bodies]
    else:
        msgs = [Message("T", b, dict(props[i % len(props)]), flag)
                for i, b in enumerate(bodies)]
    for m in msgs:
        m.properties.pop("WAIT", None)  # one WAIT value for the whole batch
    ours = encode_send_batch(msgs, keys=keys(), now_ms=NOW)
    old_keys = keys()
    keyed = []
    for m in msgs:
        p = dict(m.properties)
        if not p.get("UNIQ_KEY"):
            p["UNIQ_KEY"] = old_keys.next_key(NOW)
        p.setdefault("WAIT", "true")
        keyed.append(Message("T", m.body, p, m.flag))
    old = batch_send_request(keyed, SendOptions("pg"), queue_id=0, now_ms=NOW, keys=old_keys)
    assert ours.entries == old.body
    assert ours.keys == [m.properties["UNIQ_KEY"] for m in keyed]
    assert ours.joined_keys == ",".join(m.properties["UNIQ_KEY"] for m in keyed)
    assert list(ours.key_view) == ours.keys
    assert ours.count == len(msgs) and ours.wait == "true"


def test_uniform_batches_wrap_the_16_bit_counter() -> None:
    gen = UniqKeyGenerator("10.0.0.7", 1, process_hash=1, counter_start=0xFFFE)
    batch = encode_send_batch([Message("T", b"x")] * 4, keys=gen, now_ms=NOW)
    got = [decode_properties(e.properties)["UNIQ_KEY"][-4:] for e in iter_batch(batch.entries)]
    assert got == ["FFFE", "FFFF", "0000", "0001"]
    assert [k[-4:] for k in batch.keys] == got
    assert batch.joined_keys == ",".join(batch.keys)
    assert batch.keys == [gen.reserve(NOW, 0)[0] + d for d in got]
    view = batch.key_view
    assert isinstance(view, KeyRun) and len(view) == 4
    assert [view[i] for i in range(4)] == list(view) == batch.keys
    assert view[-1] == batch.keys[-1] and view[1:3] == batch.keys[1:3]


@settings(deadline=None, max_examples=200)
@given(n=st.integers(1, 40), blen=st.integers(0, 24), props=_props,
       flag=st.integers(-(2**31), 2**31 - 1), start=st.integers(0xFFC0, 0x1_0010),
       data=st.data())
def test_uniform_joined_equals_the_columns(n: int, blen: int, props: dict[str, str],
                                           flag: int, start: int, data: st.DataObject
                                           ) -> None:
    """A uniform batch joined from its parts is byte for byte the one written as
    columns, whatever its size, and each entry carries its body and key digits."""
    props.pop("UNIQ_KEY", None)
    bodies = data.draw(st.lists(st.binary(min_size=blen, max_size=blen), min_size=n,
                                max_size=n))
    first = Message("T", bodies[0], props, flag)
    head_text = "0A00000700001092ABCDEF01"
    counters = range(start, start + n)
    joined = send_batch._encode_uniform(first, bodies, head_text, counters, join_at_most=n)
    columns = send_batch._encode_uniform(first, bodies, head_text, counters, join_at_most=0)
    assert joined == columns
    entries = list(iter_batch(joined))
    assert [e.body for e in entries] == bodies
    assert [decode_properties(e.properties)["UNIQ_KEY"] for e in entries] == [
        f"{head_text}{c & 0xFFFF:04X}" for c in counters]


@pytest.mark.parametrize(("msgs", "match"), [
    ([], "at least one"),
    ([Message("A", b"x"), Message("B", b"x")], "mixes topics"),
    ([Message("A", b"x", {"WAIT": "false"}), Message("A", b"x")], "WAIT"),
    ([Message("A", b"x", {"DELAY": "3"})], "delay"),
    ([Message("%RETRY%g", b"x")], "retry"),
    ([Message("A", b"x", {"K": "v" * 40000})], "properties"),
    ([Message("A", b"x", {"K": "v" * 40000})] * 2, "properties"),
])
def test_batches_java_refuses(msgs: list[Message], match: str) -> None:
    with pytest.raises(LocalProtocolError, match=match):
        encode_send_batch(msgs, keys=keys(), now_ms=NOW)


def test_requests_inner_and_outer() -> None:
    batch = encode_send_batch([Message("T", b"abc" * 200, {"TAGS": "t"})] * 20, keys=keys(),
                              now_ms=NOW)
    body, flag = batch.compressed(CompressionType.ZSTD)
    assert flag == sys_flag_for(CompressionType.ZSTD) and len(body) < len(batch.entries) // 4
    inner = send_batch_request(batch, inner=True, producer_group="pg", queue_id=3, now_ms=NOW,
                               body=body, sys_flag=flag, broker_name="b")
    h = decode_send_header(inner.code, inner.ext_fields)
    assert (h.batch, h.queue_id, h.sys_flag, h.broker_name) == (True, 3, flag, "b")
    assert h.properties is not None
    assert decode_properties(h.properties.encode()) == {
        "UNIQ_KEY": batch.batch_key, "INNER_NUM": "20", "WAIT": "true"}
    assert decompress(inner.body, CompressionType.ZSTD, 1 << 20) == batch.entries
    outer = send_batch_request(batch, inner=False, producer_group="pg", queue_id=3, now_ms=NOW,
                               body=body, sys_flag=flag, v1=True)
    h = decode_send_header(outer.code, outer.ext_fields)
    assert h.sys_flag == 0 and outer.body == batch.entries  # never compressed
    assert h.properties is not None and "INNER_NUM" not in h.properties


@settings(max_examples=150, deadline=None)
@given(inner=st.booleans(), v1=st.booleans(), queue_id=st.integers(0, 255),
       now=st.integers(0, 2**45), group=st.sampled_from(["pg", "other"]),
       broker=st.sampled_from([None, "b", "broker-2"]), n=st.integers(1, 5))
def test_request_ext_equals_the_header_schema(inner: bool, v1: bool, queue_id: int,
                                              now: int, group: str, broker: str | None,
                                              n: int) -> None:
    """The cached ext template gives, field for field and in order, what the header
    schema encodes for the same request (the first request fills the cache, later ones
    reuse it)."""
    batch = encode_send_batch([Message("T", b"x" * n)] * n, keys=keys(), now_ms=now)
    flag = sys_flag_for(CompressionType.ZSTD) if inner else 0
    cmd = send_batch_request(batch, inner=inner, producer_group=group, queue_id=queue_id,
                             now_ms=now, body=batch.entries, sys_flag=flag,
                             broker_name=broker, v1=v1)
    props = f"UNIQ_KEY\x01{batch.batch_key}\x02" + (
        f"INNER_NUM\x01{n}\x02" if inner else "") + "WAIT\x01true\x02"
    cls = SendMessageRequestHeader if v1 else SendMessageRequestHeaderV2
    expected = cls(producer_group=group, topic="T", default_topic="TBW102",
                   default_topic_queue_nums=4, queue_id=queue_id, sys_flag=flag,
                   born_timestamp=now, flag=0, properties=props, batch=True,
                   broker_name=broker).to_ext()
    assert list(cmd.ext_fields.items()) == list(expected.items())


@pytest.mark.parametrize("ctype", list(CompressionType))
def test_compression_only_when_it_pays(ctype: CompressionType) -> None:
    text = b"the same words again and again " * 40
    packed, flag = compress_if_smaller(text, ctype)
    assert flag == sys_flag_for(ctype) and len(packed) < len(text)
    noise = os.urandom(4000)
    assert compress_if_smaller(noise, ctype) == (noise, 0)
    tiny = b"a" * (MIN_COMPRESS_BYTES - 1)
    assert compress_if_smaller(tiny, ctype) == (tiny, 0)
    assert compress_if_smaller(text, ctype, min_saving=0.999)[1] == 0


# ---------------------------------------------------------------------- decoding


def _record(batch: bytes, sys_flag: int = 0xC0) -> bytes:
    return encode_record(topic=b"T", queue_id=1, body=batch, properties=b"INNER_NUM\x01x\x02",
                         sys_flag=sys_flag, born_timestamp=1, born_host=HOST, store_host=HOST,
                         store_timestamp=2, queue_offset=50, physical_offset=0)


@settings(deadline=None, max_examples=200)
@given(n=st.integers(1, 20), body_len=st.integers(0, 30),
       props=st.sampled_from([{}, {"UNIQ_KEY": "K"}, {"ü": "ß", "UNIQ_KEY": "KEY"},
                              {"a": "b", "c": "d"}]),
       flags=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=20, max_size=20))
def test_uniform_unwrap_equals_the_walk(n: int, body_len: int, props: dict[str, str],
                                       flags: list[int]) -> None:
    raw_props = encode_properties(props)
    batch = encode_batch([(bytes([i]) * body_len, raw_props, flags[i]) for i in range(n)])
    assert uniform_layout(batch) is not None
    fast = decode_messages(_record(batch))
    # a non-uniform twin (one longer body) takes the walk; compare the common fields
    twin = encode_batch([(bytes([i]) * (body_len + (i == 0)), raw_props, flags[i])
                         for i in range(n)])
    slow = decode_messages(_record(twin))
    assert [(m.queue_offset, m.flag, m.properties, m.msg_id, m.topic, m.queue_id)
            for m in fast] == [(m.queue_offset, m.flag, m.properties, m.msg_id, m.topic,
                                m.queue_id) for m in slow]
    assert [m.body for m in fast] == [bytes([i]) * body_len for i in range(n)]
    assert [m.queue_offset for m in fast] == list(range(50, 50 + n))


def test_uniform_unwrap_refuses_bad_utf8() -> None:
    batch = encode_batch([(b"x", b"a\x01\xff\x02", 0)] * 3)
    with pytest.raises(CorruptRecord, match="UTF-8"):
        decode_messages(_record(batch))


@settings(deadline=None, max_examples=300)
@given(n=st.integers(1, 40), blen=st.integers(0, 24), one_length=st.booleans(), data=st.data(),
       props=_props.map(lambda p: {k: v for k, v in p.items() if k not in ("WAIT", "UNIQ_KEY")}),
       wait=st.sampled_from([None, "true", "false"]), flag=st.integers(-(2**31), 2**31 - 1),
       start=st.one_of(st.integers(0, 200), st.integers(0xFFC0, 0x1_0010)))
def test_layout_columns_equal_the_per_message_path(n: int, blen: int, one_length: bool,
                                                   data: st.DataObject, props: dict[str, str],
                                                   wait: str | None, flag: int,
                                                   start: int) -> None:
    """The column encoders (one layout; distinct bodies of one length, or of any lengths;
    keys that may wrap the 16-bit counter) send the bytes and keys of the per-message
    path."""
    bodies = data.draw(st.lists(st.binary(min_size=blen if one_length else 0,
                                          max_size=blen if one_length else 300),
                                min_size=n, max_size=n))
    if wait is not None:
        props = dict(props, WAIT=wait)
    msgs = [Message("T", b, dict(props), flag) for b in bodies]
    gen = UniqKeyGenerator("10.0.0.7", 4242, process_hash=1, counter_start=start)
    ours = encode_send_batch(msgs, keys=gen, now_ms=NOW)
    old_keys = UniqKeyGenerator("10.0.0.7", 4242, process_hash=1, counter_start=start)
    keyed = []
    for m in msgs:
        p = dict(m.properties, UNIQ_KEY=old_keys.next_key(NOW))
        p.setdefault("WAIT", "true")
        keyed.append(Message("T", m.body, p, m.flag))
    old = batch_send_request(keyed, SendOptions("pg"), queue_id=0, now_ms=NOW, keys=old_keys)
    assert ours.entries == old.body
    assert ours.keys == [m.properties["UNIQ_KEY"] for m in keyed]
    assert ours.joined_keys == ",".join(ours.keys)
    assert list(ours.key_view) == ours.keys
    assert ours.batch_key == old_keys.next_key(NOW)[:-4] + f"{(start + n) & 0xFFFF:04X}"
    lengths = [len(b) for b in bodies]
    assert (ours.min_body, ours.max_body, ours.wait) == (min(lengths), max(lengths),
                                                         wait or "true")
    assert ours.listed_keys is None  # keys in bulk, not one by one


def test_keys_from_threads_never_repeat() -> None:
    gen = keys()
    got: list[list[str]] = []

    def take() -> None:
        mine = []
        for i in range(300):
            head, counters = gen.reserve(NOW + i % 3, 7)
            mine += [f"{head}{c & 0xFFFF:04X}" for c in counters]
            mine.append(gen.next_key(NOW + i % 3))
        got.append(mine)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [k for mine in got for k in mine]
    assert len(every) == len(set(every)) == 4 * 300 * 8


def test_batches_compress_at_the_batch_level_by_default() -> None:
    text = b"the same words again and again, with a number: 1234567 " * 300
    packed, flag = compress_if_smaller(text, CompressionType.ZSTD)
    assert packed == compress(text, CompressionType.ZSTD, BATCH_LEVELS[CompressionType.ZSTD])
    assert flag == sys_flag_for(CompressionType.ZSTD) and BATCH_LEVELS[CompressionType.ZSTD] == -1
    assert compress_if_smaller(text, CompressionType.ZSTD, 3)[0] == compress(
        text, CompressionType.ZSTD, 3)


@settings(deadline=None, max_examples=200)
@given(bodies=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=30),
       one_length=st.booleans(),
       props=_props.map(lambda p: {k: v for k, v in p.items() if k != "UNIQ_KEY"}),
       flag=st.integers(-(2**31), 2**31 - 1),
       start=st.one_of(st.integers(0, 200), st.integers(0xFFC0, 0x1_0010)))
def test_bodies_encode_as_their_messages(bodies: list[bytes], one_length: bool,
                                         props: dict[str, str], flag: int,
                                         start: int) -> None:
    """A batch given as bodies with shared properties is the batch of its messages:
    same entries, keys, batch key, WAIT and body bounds."""
    if one_length:
        bodies = [b.ljust(40, b"-") for b in bodies]
    via_msgs = encode_send_batch([Message("T", b, dict(props), flag) for b in bodies],
                                 keys=UniqKeyGenerator("10.0.0.7", 1, process_hash=1,
                                                       counter_start=start), now_ms=NOW)
    via_bodies = encode_send_bodies("T", bodies, properties=props, flag=flag,
                                    keys=UniqKeyGenerator("10.0.0.7", 1, process_hash=1,
                                                          counter_start=start), now_ms=NOW)
    assert via_bodies == via_msgs


@pytest.mark.parametrize(("topic", "bodies", "props", "match"), [
    ("A", [], None, "at least one"),
    ("%RETRY%g", [b"x"], None, "retry"),
    ("A", [b"x"], {"DELAY": "3"}, "delay"),
    ("A", [b"x"], {"UNIQ_KEY": "k"}, "UNIQ_KEY"),
    ("A", [b"x"], {"K": "v" * 40000}, "properties"),
])
def test_bodies_java_refuses(topic: str, bodies: list[bytes], props: dict[str, str] | None,
                             match: str) -> None:
    with pytest.raises(LocalProtocolError, match=match):
        encode_send_bodies(topic, bodies, properties=props, keys=keys(), now_ms=NOW)
