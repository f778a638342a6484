"""rewrite_queue: a logical queue's view of stored records, against a reading record by
record."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.formats.record import Record, decode_record, encode_record, rewrite_queue


def _reference(body: bytes, queue_id: int, shift: int, end: int) -> bytes:
    out, pos = bytearray(), 0
    while pos < len(body):
        try:
            got = decode_record(body, pos)
        except Exception:
            break
        assert isinstance(got, Record)
        if 0 <= end <= got.queue_offset:
            break
        out += encode_record(
            topic=got.topic.encode(), queue_id=queue_id, body=got.body,
            properties=got.properties, flag=got.flag, sys_flag=got.sys_flag,
            born_timestamp=got.born_timestamp, born_host=got.born_host,
            store_host=got.store_host, store_timestamp=got.store_timestamp,
            queue_offset=got.queue_offset + shift, physical_offset=got.physical_offset,
            reconsume_times=got.reconsume_times, prepared_tx_offset=got.prepared_tx_offset,
            crc=got.body_crc)
        pos += got.total_size
    return bytes(out)


@settings(max_examples=200, deadline=None)
@given(offsets=st.lists(st.integers(0, 1 << 40), max_size=8),
       bodies=st.lists(st.binary(max_size=40), min_size=8, max_size=8),
       queue_id=st.integers(0, 1 << 20), shift=st.integers(-(1 << 20), 1 << 20),
       end=st.integers(-1, 1 << 40), tail=st.binary(max_size=30))
def test_rewrite_is_what_a_record_by_record_rewrite_writes(
        offsets: list[int], bodies: list[bytes], queue_id: int, shift: int, end: int,
        tail: bytes) -> None:
    body = b"".join(encode_record(topic=b"Q", queue_id=3, body=b, properties=b"K\x01v\x02",
                                  queue_offset=qo, physical_offset=i * 1000)
                    for i, (qo, b) in enumerate(zip(offsets, bodies, strict=False)))
    # a truncated record at the end is dropped, whatever it holds
    got = rewrite_queue(body + tail[:20], queue_id, lambda q: q + shift, end)
    assert got == _reference(body, queue_id, shift, end)


def test_a_non_positive_size_stops_the_rewrite() -> None:
    one = encode_record(topic=b"Q", queue_id=0, body=b"x", properties=b"", queue_offset=5)
    assert rewrite_queue(bytes(one) + bytes(40), 1, lambda q: q, -1) == _reference(
        bytes(one), 1, 0, -1)
