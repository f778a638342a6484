"""decode_plain_messages: plain records become the messages decode_record describes, and
the first record that is not plain is left to the caller."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.formats.record import HostAddr, Record, decode_record, encode_record
from tidemq.formats.record.messages import decode_plain_messages
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
