"""Pull bodies to Arrow: the columnar path gives the rows of the message path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from tidemq.codec.columns import decode_columns, decode_entry_columns  # noqa: E402
from tidemq.codec.compression import (  # noqa: E402
    CompressionType,
    compress,
    sys_flag_for,
)
from tidemq.codec.message import decode_messages  # noqa: E402
from tidemq.errors import CorruptRecord  # noqa: E402
from tidemq.formats.batch import encode_batch  # noqa: E402
from tidemq.formats.msgid import encode_offset_msg_id  # noqa: E402
from tidemq.formats.properties import decode_properties, encode_properties  # noqa: E402
from tidemq.formats.record import HostAddr, encode_record  # noqa: E402
from tidemq.spark.rows import ARROW_SCHEMA, columns_to_batch, to_batch  # noqa: E402


def _record(body: bytes, props: bytes, i: int) -> bytes:
    return bytes(encode_record(
        topic=b"Orders", queue_id=2, body=body, properties=props,
        born_timestamp=1_700_000_000_000 + i, store_timestamp=1_700_000_000_500 + i,
        store_host=HostAddr(bytes([10, 0, 0, 5]), 10911), queue_offset=50 + i,
        physical_offset=4096 * i))


def _both(body: bytes) -> tuple[Any, Any]:
    cols = decode_columns(body)
    assert cols is not None
    fast = columns_to_batch(cols, "Orders", "broker-a", 2)
    slow = to_batch(decode_messages(body), "Orders", "broker-a", 2)
    return fast, slow


_props = st.dictionaries(st.text("ABCKTUSY_", min_size=1, max_size=8),
                         st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF),
                                 min_size=1, max_size=12), max_size=4)


@settings(deadline=None, max_examples=150)
@given(st.lists(st.tuples(st.binary(max_size=60), _props), max_size=10),
       st.sampled_from([{}, {"UNIQ_KEY": "U"}, {"KEYS": "k1 k2", "TAGS": "t"}]))
def test_columnar_rows_equal_message_rows(records: list[tuple[bytes, dict[str, str]]],
                                          extra: dict[str, str]) -> None:
    body = b"".join(_record(b, encode_properties({**p, **extra}), i)
                    for i, (b, p) in enumerate(records))
    fast, slow = _both(body)
    assert fast.schema == ARROW_SCHEMA
    assert fast.equals(slow)


@pytest.mark.parametrize("text", [
    b"A\x01x\x01y\x02",          # a value holding the name/value separator
    b"\x02\x02A\x01b\x02",       # empty segments
    b"AB\x02C\x01d\x02",         # a segment without a separator
    b"A\x01\x02B\x01c\x02",      # an empty value
    b"\x01v\x02K\x01w\x02",      # an empty name
    b"K\x01last",                # no final separator
    b"",
])
def test_property_texts_in_other_forms_follow_the_decoder(text: bytes) -> None:
    body = _record(b"b", text, 0) + _record(b"c", b"KEYS\x01k\x02", 1)
    fast, slow = _both(body)
    assert fast.column("properties").to_pylist()[0] == list(decode_properties(text).items())
    assert fast.equals(slow)


def test_keys_tags_and_offset_ids() -> None:
    body = (_record(b"a", encode_properties({"KEYS": "o1", "TAGS": "t1", "UNIQ_KEY": "U1"}), 0)
            + _record(b"b", b"", 1))
    fast, slow = _both(body)
    rows = fast.to_pylist()
    assert [r["keys"] for r in rows] == ["o1", None]
    assert [r["tags"] for r in rows] == ["t1", None]
    assert rows[0]["msg_id"] == "U1"
    assert rows[1]["msg_id"] == slow.column("msg_id")[1].as_py()
    assert len(rows[1]["msg_id"]) == 32  # the offset id: store host + physical offset
    assert [r["offset"] for r in rows] == [50, 51]
    assert rows[0]["born_timestamp"].timestamp() == 1_700_000_000.0


def test_properties_that_are_not_utf8_raise_corrupt_record() -> None:
    cols = decode_columns(_record(b"a", b"K\x01\xff\xfe\x02", 0))
    assert cols is not None
    with pytest.raises(CorruptRecord, match="UTF-8"):
        columns_to_batch(cols, "Orders", "broker-a", 2)


# ---------------------------------------------------------------- inner batches (RIP-26)

_INNER = 0x40 | 0x80  # NEED_UNWRAP | INNER_BATCH


def _inner_record(entries: list[tuple[bytes, bytes, int]], i: int, base: int,
                  ctype: CompressionType | None) -> bytes:
    batch = encode_batch(entries)
    sys_flag = _INNER
    if ctype is not None:
        batch, sys_flag = compress(batch, ctype), _INNER | sys_flag_for(ctype)
    return bytes(encode_record(
        topic=b"Orders", queue_id=2, body=batch, properties=b"UNIQ_KEY\x01BATCH\x02",
        sys_flag=sys_flag, born_timestamp=1_700_000_000_000 + i,
        store_timestamp=1_700_000_000_500 + i,
        store_host=HostAddr(bytes([10, 0, 0, 5]), 10911), queue_offset=base,
        physical_offset=8192 * i))


_entry = st.tuples(st.binary(max_size=40), _props.map(encode_properties),
                   st.integers(-(2**31), 2**31 - 1))


@settings(deadline=None, max_examples=150)
@given(st.lists(st.tuples(st.lists(_entry, min_size=1, max_size=6), st.booleans(),
                          st.sampled_from([None, *CompressionType])), min_size=1, max_size=5))
def test_inner_batch_columns_equal_message_rows(
        records: list[tuple[list[tuple[bytes, bytes, int]], bool, CompressionType | None]],
) -> None:
    """Each sub-message is a row, as decode_messages unwraps it: uniform batches (found by
    strided comparisons) and others (walked), plain or compressed with every codec."""
    body, base = b"", 100
    for i, (drawn, uniform, ctype) in enumerate(records):
        entries = drawn
        if uniform:  # one layout: same body and property lengths, any bytes
            first = drawn[0]
            entries = [(bytes([k]) * len(first[0]), first[1], flag)
                       for k, (_b, _p, flag) in enumerate(drawn)]
        body += _inner_record(entries, i, base, ctype)
        base += len(entries) + 3  # offsets of consecutive batches need not touch
    cols = decode_entry_columns(body)
    assert cols is not None
    fast = columns_to_batch(cols, "Orders", "broker-a", 2)
    slow = to_batch(decode_messages(body), "Orders", "broker-a", 2)
    assert fast.schema == ARROW_SCHEMA
    assert fast.equals(slow)
    assert len(cols) == sum(len(e) for e, _u, _c in records)
    assert cols.field("flag").tolist() == [m.flag for m in decode_messages(body)]


def test_inner_batch_ids_offsets_and_keys() -> None:
    entries = [(b"a", encode_properties({"UNIQ_KEY": "U1", "KEYS": "k1", "TAGS": "t"}), 7),
               (b"bb", b"", 0)]
    body = _inner_record(entries, 0, 40, None) + _inner_record(entries, 1, 42,
                                                               CompressionType.ZSTD)
    cols = decode_entry_columns(body)
    assert cols is not None
    rows = columns_to_batch(cols, "Orders", "broker-a", 2).to_pylist()
    assert [r["offset"] for r in rows] == [40, 41, 42, 43]
    assert [r["msg_id"] for r in rows][0::2] == ["U1", "U1"]
    offset_ids = [r["msg_id"] for r in rows][1::2]  # no UNIQ_KEY: the record's offset id
    assert offset_ids == [encode_offset_msg_id(HostAddr(bytes([10, 0, 0, 5]), 10911), p)
                          for p in (0, 8192)]
    assert [r["body"] for r in rows] == [b"a", b"bb", b"a", b"bb"]
    assert [r["keys"] for r in rows] == ["k1", None, "k1", None]


@pytest.mark.parametrize("case", ["plain", "mixed", "truncated", "bomb", "garbage", "empty"])
def test_inner_batch_columns_leave_other_bodies_to_the_decoder(case: str) -> None:
    entries = [(b"x" * 10, b"", 0)] * 3
    good = _inner_record(entries, 0, 0, None)
    body = {
        "plain": _record(b"a", b"", 0),
        "mixed": good + _record(b"a", b"", 1),
        "truncated": _inner_record(entries, 0, 0, None)[:-1],
        "bomb": _inner_record([(b"\0" * 100_000, b"", 0)], 0, 0, CompressionType.ZSTD),
        "garbage": bytes(encode_record(
            topic=b"Orders", queue_id=2, body=b"\x00\x00\x00\x05junk", properties=b"",
            sys_flag=_INNER, store_host=HostAddr(bytes(4), 1))),
        "empty": b"",
    }[case]
    assert decode_entry_columns(body, max_decompressed=50_000) is None
