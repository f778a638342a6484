"""The columnar pull-body decoder agrees with decode_messages, or steps aside."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.codec.message import decode_messages
from tidemq.formats.batch import encode_batch
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import MAGIC_V1, HostAddr, encode_record
from tidemq.formats.record.columns import FIELDS, decode_columns, rows_alike

STORE = HostAddr(bytes([10, 0, 0, 5]), 10911)
BORN = HostAddr(bytes([10, 0, 0, 9]), 50123)
MAGIC = struct.pack(">i", MAGIC_V1)


def _record(body: bytes = b"hello", props: dict[str, str] | None = None, **kw: Any) -> bytes:
    args: dict[str, Any] = dict(
        topic=b"Orders", queue_id=3, body=body,
        properties=encode_properties(props if props is not None else {"TAGS": "a"}),
        flag=5, born_timestamp=1000, born_host=BORN, store_host=STORE,
        store_timestamp=2000, queue_offset=40, physical_offset=123456, reconsume_times=1,
    )
    args.update(kw)
    return bytes(encode_record(**args))


def _same(body: bytes) -> None:
    cols = decode_columns(body)
    assert cols is not None
    msgs = decode_messages(body)
    assert len(cols) == len(msgs)
    for name in FIELDS:
        attr = {"physical_offset": "commit_log_offset",
                "prepared_tx_offset": "prepared_transaction_offset"}.get(name, name)
        assert cols.field(name).tolist() == [getattr(m, attr) for m in msgs], name
    for i, m in enumerate(msgs):
        assert cols.body.value(cols.buf, i) == m.body
        assert cols.topic.value(cols.buf, i).decode() == m.topic
        assert cols.properties.value(cols.buf, i) == encode_properties(m.properties)
    no_key = np.array([i for i, m in enumerate(msgs) if "UNIQ_KEY" not in m.properties],
                      np.int64)
    assert cols.offset_msg_ids(no_key) == [msgs[i].msg_id for i in no_key.tolist()]


def test_plain_records_become_columns() -> None:
    body = (_record() + _record(b"", {"UNIQ_KEY": "U2", "KEYS": "k"}, queue_offset=41)
            + _record(b"x" * 300, {}, queue_offset=42, physical_offset=7))
    _same(body)
    cols = decode_columns(body)
    assert cols is not None
    assert cols.field("queue_offset").tolist() == [40, 41, 42]
    assert cols.body.length.tolist() == [5, 0, 300]


def test_empty_body_is_zero_records() -> None:
    cols = decode_columns(b"")
    assert cols is not None and len(cols) == 0


def test_magic_inside_a_body_takes_the_record_walk() -> None:
    body = _record(b"ab" + MAGIC + b"cd" * 50) + _record(MAGIC * 3, queue_offset=41)
    _same(body)


@pytest.mark.parametrize("kind", ["compressed", "inner batch", "ipv6", "torn", "garbage"])
def test_records_outside_the_fast_scope_step_aside(kind: str) -> None:
    plain = _record()
    if kind == "compressed":
        data = compress(b"z" * 100, CompressionType.ZLIB)
        other = _record(data, sys_flag=sys_flag_for(CompressionType.ZLIB))
    elif kind == "inner batch":
        other = _record(encode_batch([(b"a", b"", 0), (b"b", b"", 0)]), sys_flag=0x40 | 0x80)
    elif kind == "ipv6":
        other = _record(store_host=HostAddr(bytes(16), 1))
    elif kind == "torn":
        other = _record()[:-3]
    else:
        other = b"\x00" * 120
    assert decode_columns(plain + other) is None


_props = st.dictionaries(st.text("ABCKTUSY_", min_size=1, max_size=8),
                         st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF),
                                 min_size=1, max_size=12), max_size=4)


@settings(deadline=None, max_examples=200)
@given(st.lists(st.tuples(st.binary(max_size=80), _props,
                          st.sampled_from([b"T", b"Orders", b"x" * 100])), max_size=12))
def test_columns_match_the_message_decoder(records: list[tuple[bytes, dict[str, str], bytes]]
                                           ) -> None:
    body = b"".join(_record(b, p, topic=t, queue_offset=100 + i, physical_offset=1000 * i,
                            born_timestamp=i, store_timestamp=2 * i)
                    for i, (b, p, t) in enumerate(records))
    _same(body)


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=400))
def test_garbage_never_raises(data: bytes) -> None:
    cols = decode_columns(_record() + data)
    assert cols is None or len(cols) >= 1


@given(rows=st.integers(1, 40).flatmap(lambda n: st.integers(1, 24).flatmap(
    lambda w: st.lists(st.binary(min_size=w, max_size=w), min_size=n, max_size=n))),
       edit=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 10**6))),
       span=st.tuples(st.integers(0, 30), st.integers(0, 30)))
def test_rows_alike_is_the_row_by_row_comparison(
        rows: list[bytes], edit: tuple[int, int] | None, span: tuple[int, int]) -> None:
    """Rows mostly copies of the first (else random), any span of columns: the verdict is
    the one a comparison of each row with the first gives."""
    width = len(rows[0])
    if edit is not None:  # copies of the first row but for one byte of one row
        rows = [rows[0]] * len(rows)
        r, c = edit[0] % len(rows), edit[1] % width
        changed = bytearray(rows[r])
        changed[c] ^= 0x5A
        rows[r] = bytes(changed)
    matrix = np.frombuffer(b"".join(rows), np.uint8).reshape(len(rows), width)
    start, stop = sorted(span)
    expected = all(row[start:stop] == rows[0][start:stop] for row in rows)
    assert rows_alike(matrix, start, stop) is expected
