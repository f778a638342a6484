"""The whole-record packer of the put hot path and its joined fallback write what
encode_record writes."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.formats.record import MAGIC_V1, HostAddr, encode_record
from tidemq.formats.record.encode import encode_v4_joined, v4_record_packer

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
HOSTS = st.builds(HostAddr, st.binary(min_size=4, max_size=4), I32)


@settings(max_examples=200, deadline=None)
@given(topic=st.binary(max_size=127), body=st.binary(max_size=300),
       props=st.binary(max_size=5000), queue_id=I32, flag=I32,
       sys_flag=st.integers(0, 0xFFFF).map(lambda f: f & ~0x30), born=HOSTS, store=HOSTS,
       born_ts=I64, store_ts=I64, qo=I64, phys=I64, reconsume=I32)
def test_packer_and_joined_write_what_encode_record_writes(
        topic: bytes, body: bytes, props: bytes, queue_id: int, flag: int, sys_flag: int,
        born: HostAddr, store: HostAddr, born_ts: int, store_ts: int, qo: int, phys: int,
        reconsume: int) -> None:
    want = bytes(encode_record(
        topic=topic, queue_id=queue_id, body=body, properties=props, flag=flag,
        sys_flag=sys_flag, born_timestamp=born_ts, born_host=born, store_host=store,
        store_timestamp=store_ts, queue_offset=qo, physical_offset=phys,
        reconsume_times=reconsume))
    size, crc = len(want), struct.unpack_from(">i", want, 8)[0]
    field = bytes([len(topic)]) + topic
    bhost, shost = born.ip + struct.pack(">i", born.port), store.ip + struct.pack(">i", store.port)
    joined = encode_v4_joined(size, crc, queue_id, flag, qo, phys, sys_flag, born_ts, bhost,
                              store_ts, shost, reconsume, memoryview(body), field,
                              memoryview(props))
    assert joined == want
    out = bytearray(size + 3)
    v4_record_packer(len(field), len(body), len(props))(
        out, 3, size, MAGIC_V1, crc, queue_id, flag, qo, phys, sys_flag, born_ts, bhost,
        store_ts, shost, reconsume, 0, len(body), body, field, len(props), props)
    assert bytes(out[3:]) == want
