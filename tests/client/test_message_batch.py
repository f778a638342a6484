"""MessageBatch from pull bodies: the rows, columns and objects poll's reading gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client import MessageBatch, message_batch
from tidemq.client.message_batch import read_batch
from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.codec.message import decode_messages
from tidemq.errors import CorruptRecord
from tidemq.formats.batch import encode_batch
from tidemq.formats.properties import PropertyKey, encode_properties
from tidemq.formats.record import HostAddr, encode_record
from tidemq.types import MessageExt, MessageQueue

from .batch_checks import assert_batch_is

Q = MessageQueue("Orders", "broker-a", 3)
STORE = HostAddr(bytes([10, 0, 0, 5]), 10911)
BORN = HostAddr(bytes([10, 0, 0, 9]), 50123)
INNER = 0x40 | 0x80


@pytest.fixture(autouse=True)
def _columns_for_small_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """These bodies are small: read them as columns all the same (see SMALL_BODY)."""
    monkeypatch.setattr(message_batch, "SMALL_BODY", 0)


def _record(body: bytes, props: dict[str, str], offset: int, **kw: Any) -> bytes:
    args: dict[str, Any] = dict(
        topic=Q.topic.encode(), queue_id=7, body=body, properties=encode_properties(props),
        flag=5, born_timestamp=1000 + offset, born_host=BORN, store_host=STORE,
        store_timestamp=2000 + offset, queue_offset=offset, physical_offset=1000 * offset,
        reconsume_times=1,
    )
    args.update(kw)
    return bytes(encode_record(**args))


def _inner(entries: list[tuple[bytes, dict[str, str], int]], offset: int,
           codec: CompressionType | None = None) -> bytes:
    body = encode_batch([(b, encode_properties(p), f) for b, p, f in entries])
    flag = INNER
    if codec is not None:
        body, flag = compress(body, codec), flag | sys_flag_for(codec)
    return _record(body, {"INNER_NUM": str(len(entries))}, offset, sys_flag=flag)


def _expected(body: bytes, offset: int | None, tags: frozenset[str]) -> list[MessageExt]:
    """What read_pull_response keeps (its code, restated)."""
    msgs = decode_messages(body, queue_id=Q.queue_id, broker_name=Q.broker_name,
                           extra_properties={"MIN_OFFSET": "0", "MAX_OFFSET": "999"})
    if offset is not None:
        msgs = [m for m in msgs if m.queue_offset >= offset]
    if tags:
        msgs = [m for m in msgs if m.properties.get(PropertyKey.TAGS) in tags]
    return msgs


def _check(body: bytes, offset: int | None = None, tags: frozenset[str] = frozenset(),
           columnar: bool | None = True) -> MessageBatch | None:
    want = _expected(body, offset, tags)
    batch = read_batch(body, Q, 0, 999, offset, tags)
    if not want:
        assert batch is None
        return None
    assert batch is not None
    if columnar is not None:
        assert batch.columnar is columnar
    _same(batch, want)
    return batch


def _same(batch: MessageBatch, want: list[MessageExt]) -> None:
    assert batch.queue == Q
    assert_batch_is(batch, want)


def test_single_records_are_columns() -> None:
    body = b"".join(_record(f"m{i}".encode(), {"TAGS": "ab"[i % 2], "KEYS": "k1 k2"}, i)
                    for i in range(5))
    body += _record(b"u", {"UNIQ_KEY": "ID5"}, 5)
    batch = _check(body)
    assert batch is not None
    assert batch.msg_id(0) == "0A00000500002A9F0000000000000000"
    assert batch.properties(0)["MIN_OFFSET"] == "0"


def test_tags_and_start_offset_filter_rows() -> None:
    body = b"".join(_record(b"x", {"TAGS": "ab"[i % 2]} if i != 3 else {}, i)
                    for i in range(8))
    _check(body, tags=frozenset({"a"}))
    _check(body, tags=frozenset({"a", "b"}))
    _check(body, offset=2, tags=frozenset({"b"}))
    assert read_batch(body, Q, 0, 999, None, frozenset({"zzz"})) is None


@pytest.mark.parametrize("codec", [None, CompressionType.ZSTD, CompressionType.ZLIB])
def test_inner_batches_are_columns(codec: CompressionType | None) -> None:
    entries = [(f"body {i}".encode() * 3, {"UNIQ_KEY": f"U{i}", "TAGS": "ab"[i % 2]}, i)
               for i in range(10)]
    body = _inner(entries, 100, codec) + _inner(entries[:4], 110, codec)
    _check(body)
    _check(body, offset=104)  # a start inside the first batch drops its head
    _check(body, offset=112, tags=frozenset({"a"}))


def test_outside_the_columns_scope_is_backed_by_objects() -> None:
    plain = _record(b"p", {"TAGS": "a"}, 0)
    zipped = _record(compress(b"z" * 200, CompressionType.ZLIB), {"TAGS": "a"}, 1,
                     sys_flag=sys_flag_for(CompressionType.ZLIB))
    _check(plain + zipped, columnar=False)
    mixed = plain + _inner([(b"e", {}, 0)], 1)
    _check(mixed, columnar=False)
    other_topic = plain + _record(b"o", {}, 1, topic=b"Other")
    _check(other_topic, columnar=False)
    unicode = plain + _record(b"u", {"KEYS": "clé"}, 1)
    _check(unicode, columnar=False)


def test_corrupt_bodies_raise_as_the_object_decoder_does() -> None:
    bad_props = bytearray(_record(b"u", {"KEYS": "clé"}, 0))
    bad_props[-1] = 0xFF  # the last byte of the property text: not UTF-8 any more
    with pytest.raises(CorruptRecord):
        decode_messages(bytes(bad_props))
    with pytest.raises(CorruptRecord):
        read_batch(bytes(bad_props), Q, 0, 999, None, frozenset())


def test_slices_share_the_pull() -> None:
    body = b"".join(_record(f"m{i}".encode(), {"TAGS": "ab"[i % 2]}, i) for i in range(9))
    batch = _check(body, offset=1)
    assert batch is not None
    want = _expected(body, 1, frozenset())
    _same(batch[:3], want[:3])
    _same(batch[3:], want[3:])
    _same(batch[3:][1:4], want[4:7])
    objects = MessageBatch.of_messages(Q, want)
    _same(objects[2:], want[2:])
    with pytest.raises(IndexError):
        batch.properties(len(batch))


_PROPS = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "X"]),
    st.text(st.characters(min_codepoint=33, max_codepoint=0x24F,
                          blacklist_characters="\x01\x02"), min_size=1, max_size=6),
    max_size=3)
_ENTRY = st.tuples(st.binary(max_size=40), _PROPS, st.integers(0, 2**31 - 1))


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["plain", "inner", "zstd", "mixed"]))
    parts: list[bytes] = []
    offset = 0
    for _ in range(draw(st.integers(1, 4))):
        if kind == "plain" or (kind == "mixed" and draw(st.booleans())):
            body, props, flag = draw(_ENTRY)
            parts.append(_record(body, props, offset, flag=flag))
            offset += 1
        else:
            entries = draw(st.lists(_ENTRY, min_size=1, max_size=6))
            parts.append(_inner(entries, offset,
                                CompressionType.ZSTD if kind == "zstd" else None))
            offset += len(entries)
    return b"".join(parts)


@settings(deadline=None, max_examples=200)
@given(_bodies(), st.integers(0, 12) | st.none(),
       st.frozensets(st.sampled_from(["a", "b", "é"]), max_size=2))
def test_batches_match_the_object_path(body: bytes, offset: int | None,
                                       tags: frozenset[str]) -> None:
    _check(body, offset, tags, columnar=None)


def test_small_bodies_are_read_through_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    body = b"".join(_record(f"m{i}".encode(), {"TAGS": "a"}, i) for i in range(3))
    monkeypatch.setattr(message_batch, "SMALL_BODY", len(body) + 1)
    assert _check(body, columnar=False) is not None
    monkeypatch.setattr(message_batch, "SMALL_BODY", len(body))
    assert _check(body, columnar=True) is not None


def test_compressed_inner_batches_count_four_times_their_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    body = _inner([(b"z" * 50, {"UNIQ_KEY": f"U{i}"}, 0) for i in range(20)], 0,
                  CompressionType.ZSTD)
    monkeypatch.setattr(message_batch, "SMALL_BODY", 2 * len(body))
    assert _check(body, columnar=True) is not None
    monkeypatch.setattr(message_batch, "SMALL_BODY", 4 * len(body) + 4)
    assert _check(body, columnar=False) is not None
