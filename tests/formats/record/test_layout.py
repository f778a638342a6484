"""The named offsets of the layout are where the encoder writes each field and where the
decoder reads it."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.formats import record as rec
from tidemq.formats.record import HostAddr, Record, decode_record, encode_record

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
HOSTS = st.builds(HostAddr, st.binary(min_size=4, max_size=4), I32)
V6_HOSTS = st.builds(HostAddr, st.binary(min_size=16, max_size=16), I32)

#: Named offset, struct code, Record attribute.
FIELDS = [
    (rec.OFF_TOTAL_SIZE, "i", "total_size"),
    (rec.OFF_MAGIC, "i", "magic"),
    (rec.OFF_BODY_CRC, "i", "body_crc"),
    (rec.OFF_QUEUE_ID, "i", "queue_id"),
    (rec.OFF_FLAG, "i", "flag"),
    (rec.OFF_QUEUE_OFFSET, "q", "queue_offset"),
    (rec.OFF_PHYSICAL_OFFSET, "q", "physical_offset"),
    (rec.OFF_SYSFLAG, "i", "sys_flag"),
    (rec.OFF_BORN_TIMESTAMP, "q", "born_timestamp"),
    (rec.OFF_STORE_TIMESTAMP, "q", "store_timestamp"),
    (rec.OFF_RECONSUME_TIMES, "i", "reconsume_times"),
    (rec.OFF_PREPARED_TX_OFFSET, "q", "prepared_tx_offset"),
]


def _fields(draw: Callable[[st.SearchStrategy[Any]], Any], born: HostAddr,
            store: HostAddr) -> bytearray:
    return encode_record(
        topic=draw(st.text(max_size=20)).encode(), queue_id=draw(I32),
        body=draw(st.binary(max_size=64)), properties=draw(st.binary(max_size=32)),
        flag=draw(I32), sys_flag=draw(st.integers(0, 0xFFFF)), born_timestamp=draw(I64),
        born_host=born, store_host=store, store_timestamp=draw(I64),
        queue_offset=draw(I64), physical_offset=draw(I64), reconsume_times=draw(I32),
        prepared_tx_offset=draw(I64),
    )


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_every_named_offset_reads_the_decoded_field(data: st.DataObject) -> None:
    born, store = data.draw(HOSTS), data.draw(HOSTS)
    buf = _fields(data.draw, born, store)
    got = decode_record(buf)
    assert isinstance(got, Record)
    for at, code, name in FIELDS:
        assert struct.unpack_from(">" + code, buf, at)[0] == getattr(got, name), name
    assert buf[rec.OFF_BORN_HOST : rec.OFF_BORN_HOST + 4] == born.ip
    assert buf[rec.OFF_STORE_HOST : rec.OFF_STORE_HOST + 4] == store.ip
    (body_len,) = struct.unpack_from(">i", buf, rec.OFF_BODY_LENGTH)
    assert buf[rec.OFF_BODY : rec.OFF_BODY + body_len] == got.body


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_an_ipv6_born_host_moves_store_timestamp_where_the_layout_says(
        data: st.DataObject) -> None:
    born, store = data.draw(V6_HOSTS), data.draw(st.one_of(HOSTS, V6_HOSTS))
    buf = _fields(data.draw, born, store)
    got = decode_record(buf)
    assert isinstance(got, Record)
    at = rec.store_timestamp_offset(got.sys_flag)
    assert at != rec.OFF_STORE_TIMESTAMP
    assert struct.unpack_from(">q", buf, at)[0] == got.store_timestamp
    for at, code, name in FIELDS[:9]:  # the prefix no host width moves
        assert struct.unpack_from(">" + code, buf, at)[0] == getattr(got, name), name


def test_the_field_table_and_the_structs_agree() -> None:
    assert list(rec.V4_FIELDS) == [
        "total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset",
        "physical_offset", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
        "store_host", "reconsume_times", "prepared_tx_offset", "body_length", "body"]
    assert rec.FIXED_V4.size == rec.OFF_BODY == rec.V4_FIELDS["body"]
    assert rec.PREFIX.size == rec.OFF_BORN_HOST
    assert rec.MIN_RECORD_SIZE == rec.OFF_BODY + 1 + 2
