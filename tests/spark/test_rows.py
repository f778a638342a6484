"""Pull bodies to Arrow: the columnar path gives the rows of the message path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from tidemq.codec.columns import decode_columns  # noqa: E402
from tidemq.codec.message import decode_messages  # noqa: E402
from tidemq.errors import CorruptRecord  # noqa: E402
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
