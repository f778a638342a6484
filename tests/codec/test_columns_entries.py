"""Inner-batch columns and value cutting: damaged bodies never raise from the columnar
decoders, and a batch read through them fails exactly when decode_messages does."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client import message_batch
from tidemq.client.message_batch import read_batch
from tidemq.codec.columns import Spans, cut, decode_columns, decode_entry_columns, spans_are_ascii
from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.codec.message import decode_messages
from tidemq.errors import CorruptRecord
from tidemq.formats.batch import encode_batch
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import HostAddr, encode_record
from tidemq.types import MessageQueue

Q = MessageQueue("Orders", "broker-a", 3)
HOST = HostAddr(bytes([10, 0, 0, 5]), 10911)


@pytest.fixture(autouse=True, scope="module")
def _columns_for_small_bodies() -> Iterator[None]:
    """These bodies are small: read_batch reads them as columns all the same."""
    old, message_batch.SMALL_BODY = message_batch.SMALL_BODY, 0
    yield
    message_batch.SMALL_BODY = old


def _inner(bodies: list[bytes], offset: int, codec: CompressionType | None) -> bytes:
    batch = encode_batch([(b, encode_properties({"UNIQ_KEY": f"K{offset + i}"}), i)
                          for i, b in enumerate(bodies)])
    flag = 0x40 | 0x80
    if codec is not None:
        batch, flag = compress(batch, codec), flag | sys_flag_for(codec)
    return bytes(encode_record(
        topic=b"Orders", queue_id=3, body=batch, properties=b"", flag=0, born_timestamp=1,
        born_host=HOST, store_host=HOST, store_timestamp=2, queue_offset=offset,
        physical_offset=offset * 100, reconsume_times=0, sys_flag=flag))


@st.composite
def _damaged(draw: st.DrawFn) -> bytes:
    codec = draw(st.sampled_from([None, CompressionType.ZSTD]))
    parts, offset = [], 0
    for _ in range(draw(st.integers(1, 3))):
        size = draw(st.integers(0, 12))
        n = draw(st.integers(1, 5))
        bodies = ([b"x" * size] * n if draw(st.booleans())
                  else draw(st.lists(st.binary(max_size=12), min_size=1, max_size=5)))
        parts.append(_inner(bodies, offset, codec))
        offset += len(bodies)
    body = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(body) - 1))
        body[at] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        del body[draw(st.integers(0, len(body))):]
    return bytes(body)


@settings(deadline=None, max_examples=300)
@given(_damaged())
def test_damaged_inner_batches_fail_as_the_object_path_does(body: bytes) -> None:
    decode_columns(body)  # neither raises
    decode_entry_columns(body)
    try:
        want = decode_messages(body, queue_id=Q.queue_id, broker_name=Q.broker_name,
                               extra_properties={"MIN_OFFSET": "0", "MAX_OFFSET": "9"})
    except CorruptRecord:
        want = None
    try:
        batch = read_batch(body, Q, 0, 9, None, frozenset())
    except CorruptRecord:
        assert want is None
        return
    assert want is not None
    assert (batch.messages() if batch is not None else []) == want
    if batch is not None:
        assert batch.bodies == [m.body for m in want]
        assert batch.queue_offsets.tolist() == [m.queue_offset for m in want]


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=300), st.data())
def test_cut_gives_every_slice(data: bytes, draw: st.DataObject) -> None:
    marks = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=40)))
    uniform = draw.draw(st.booleans())
    if uniform and len(data) >= 4:  # runs of one size at one spacing
        size = draw.draw(st.integers(0, 3))
        stride = draw.draw(st.integers(max(size, 1), 4))
        start = np.arange(0, len(data) - size + 1, stride, dtype=np.int64)
        length = np.full(len(start), size, np.int64)
    else:
        start = np.array(marks[0::2], np.int64)
        ends = np.array(marks[1::2] + [len(data)] * (len(marks) % 2), np.int64)
        length = ends - start
    assert cut(data, start, length) == [
        data[s : s + k] for s, k in zip(start.tolist(), length.tolist(), strict=True)]


def test_cut_runs_and_single_values() -> None:
    data = bytes(range(100))
    start = np.array([0, 10, 20, 30, 35, 50, 60, 70, 80, 99], np.int64)
    length = np.array([5, 5, 5, 5, 2, 3, 3, 3, 3, 1], np.int64)
    assert cut(data, start, length) == [
        data[s : s + k] for s, k in zip(start.tolist(), length.tolist(), strict=True)]


def test_spans_are_ascii() -> None:
    buf = np.frombuffer(b"ab\xffcd\x80ef", np.uint8)
    assert spans_are_ascii(buf, Spans(np.array([0, 3, 6]), np.array([2, 2, 2])))
    assert not spans_are_ascii(buf, Spans(np.array([0, 3]), np.array([3, 2])))
    assert spans_are_ascii(buf, Spans(np.array([6]), np.array([2])))
    assert spans_are_ascii(buf, Spans(np.array([], np.int64), np.array([], np.int64)))
    assert not spans_are_ascii(buf, Spans(np.array([4]), np.array([4])))


def test_unknown_compression_steps_aside_and_fails_as_decode_messages() -> None:
    good = _inner([b"a", b"b"], 0, CompressionType.ZSTD)
    bad = bytearray(good)
    bad[38] |= 0x04  # sysflag bits 8-10: compression type 4 (there is none)
    assert decode_entry_columns(bytes(bad)) is None
    with pytest.raises(CorruptRecord):
        decode_messages(bytes(bad))
    with pytest.raises(CorruptRecord):
        read_batch(bytes(bad), Q, 0, 9, None, frozenset())


def test_uniform_records_and_entries_take_strided_views() -> None:
    records = b"".join(bytes(encode_record(
        topic=b"Orders", queue_id=3, body=b"%05d" % i, properties=b"TAGS\x01a\x02",
        flag=i, born_timestamp=i, born_host=HOST, store_host=HOST, store_timestamp=i,
        queue_offset=i, physical_offset=1000 + i, reconsume_times=0)) for i in range(6))
    cols = decode_columns(records)
    assert cols is not None and cols.stride == len(records) // 6
    want = decode_messages(records)
    assert cols.values(cols.body) == [m.body for m in want]
    assert cols.field("flag").tolist() == list(range(6))
    assert cols.single_topic() == "Orders"
    entries = decode_entry_columns(_inner([b"x" * 7] * 5, 0, None)
                                   + _inner([b"y" * 7] * 3, 5, CompressionType.ZSTD))
    assert entries is not None and entries.stride > 0
    assert entries.values(entries.body) == [b"x" * 7] * 5 + [b"y" * 7] * 3
    assert entries.field("flag").tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert entries.field("queue_offset").tolist() == list(range(8))


def test_a_batch_that_only_looks_uniform_is_walked() -> None:
    # two entries of one size but different body lengths: the first one's size divides
    # the batch, the check of the second fails, and the batch is walked instead
    batch = encode_batch([(b"a", b"K\x01vv\x02", 0), (b"bb", b"K\x01v\x02", 1)])
    body = bytes(encode_record(
        topic=b"Orders", queue_id=3, body=batch, properties=b"", flag=0, born_timestamp=1,
        born_host=HOST, store_host=HOST, store_timestamp=2, queue_offset=0,
        physical_offset=0, reconsume_times=0, sys_flag=0x40 | 0x80))
    cols = decode_entry_columns(body)
    assert cols is not None and cols.stride == 0
    assert cols.values(cols.body) == [b"a", b"bb"]
    assert cols.values(cols.properties) == [b"K\x01vv\x02", b"K\x01v\x02"]


@settings(deadline=None, max_examples=200)
@given(st.integers(1, 6), st.integers(0, 20), st.integers(1, 5), st.data())
def test_records_of_one_shape_match_the_object_path(n: int, body_len: int, value_len: int,
                                                    draw: st.DataObject) -> None:
    """Records that repeat one layout (the strided path), damaged or not."""
    records = []
    for i in range(n):
        body = draw.draw(st.binary(min_size=body_len, max_size=body_len))
        value = draw.draw(st.text("abé", min_size=value_len, max_size=value_len))
        records.append(bytes(encode_record(
            topic=b"Orders", queue_id=3, body=body, properties=encode_properties(
                {"TAGS": value}), flag=i, born_timestamp=i, born_host=HOST,
            store_host=HOST, store_timestamp=2 * i, queue_offset=i, physical_offset=7 * i,
            reconsume_times=0)))
    body = bytearray(b"".join(records))
    if draw.draw(st.booleans()):
        at = draw.draw(st.integers(0, len(body) - 1))
        body[at] = draw.draw(st.integers(0, 255))
    data = bytes(body)
    cols = decode_columns(data)
    try:
        want = decode_messages(data)
    except CorruptRecord:
        want = None
    if cols is not None and want is not None:
        assert cols.values(cols.body) == [m.body for m in want]
        assert cols.field("flag").tolist() == [m.flag for m in want]
        assert cols.field("queue_offset").tolist() == [m.queue_offset for m in want]
    try:
        batch = read_batch(data, Q, 0, 9, None, frozenset())
    except CorruptRecord:
        assert want is None
        return
    assert want is not None
    assert (batch.messages() if batch is not None else []) == [
        m for m in decode_messages(data, queue_id=Q.queue_id, broker_name=Q.broker_name,
                                   extra_properties={"MIN_OFFSET": "0", "MAX_OFFSET": "9"})]
    if batch is not None:
        assert batch.bodies == [m.body for m in want]
        assert [batch.tags(i) for i in range(len(batch))] == [m.tags for m in want]
