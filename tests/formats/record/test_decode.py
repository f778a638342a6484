"""Commit-log record format: golden bytes, round trips, and garbage that must only corrupt."""

from __future__ import annotations

import contextlib
import mmap
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.errors import CorruptRecord, MessageTooLarge
from tidemq.formats.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    Blank,
    HostAddr,
    Record,
    body_crc,
    crc32,
    decode_record,
    encode_blank,
    encode_record,
    fixed_v4_with_hosts,
    pack_host,
    record_size,
    store_timestamp_offset,
)

PROPS = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
BORN = HostAddr(bytes([10, 0, 0, 7]), 52011)
STORE = HostAddr(bytes([192, 168, 1, 20]), 10911)
BORN6 = HostAddr(bytes(range(0x20, 0x30)), 40000)
STORE6 = HostAddr(bytes(range(0xF0, 0x100)), 10911)

FIELDS = dict(
    queue_id=3,
    flag=0x0102,
    sys_flag=0x2,
    born_timestamp=1_700_000_000_123,
    store_timestamp=1_700_000_000_456,
    queue_offset=42,
    physical_offset=4096,
    reconsume_times=2,
    prepared_tx_offset=77,
)

def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


# ---------------------------------------------------------------- golden bytes


def test_min_record_size_is_91() -> None:
    assert MIN_RECORD_SIZE == 91
    assert record_size(0, 0, 0) == 91
    assert len(encode_record(topic=b"", queue_id=0, body=b"", properties=b"")) == 91


def test_golden_ipv4_v1() -> None:
    body = b"hello"
    topic = b"TopicTest"
    total = 91 + len(body) + len(topic) + len(PROPS)
    expected = b"".join([
        i32(total),                           # TOTALSIZE
        bytes.fromhex("DAA320A7"),            # MAGICCODE V1
        i32(0x3610A686),                      # BODYCRC: crc32(b"hello") & 0x7FFFFFFF
        i32(3),                               # QUEUEID
        i32(0x0102),                          # FLAG
        i64(42),                              # QUEUEOFFSET
        i64(4096),                            # PHYSICALOFFSET
        i32(0x2),                             # SYSFLAG (MULTI_TAGS, no IPv6 bits)
        i64(1_700_000_000_123),               # BORNTIMESTAMP
        bytes([10, 0, 0, 7]), i32(52011),     # BORNHOST ip, port
        i64(1_700_000_000_456),               # STORETIMESTAMP
        bytes([192, 168, 1, 20]), i32(10911),  # STOREHOST ip, port
        i32(2),                               # RECONSUMETIMES
        i64(77),                              # PREPARED_TX_OFFSET
        i32(len(body)), body,                 # BODYLENGTH, BODY
        struct.pack(">b", len(topic)), topic,  # TOPICLENGTH (signed byte), TOPIC
        struct.pack(">h", len(PROPS)), PROPS,  # PROPERTIESLENGTH, PROPERTIES
    ])
    got = encode_record(topic=topic, body=body, properties=PROPS, born_host=BORN,
                        store_host=STORE, **FIELDS)
    assert bytes(got) == expected
    assert total == len(expected) == 91 + 5 + 9 + len(PROPS)


def test_golden_v2_long_topic() -> None:
    body = b"\x00\xffpayload"
    topic = b"T" * 200  # > 127 bytes: V2 magic, 2-byte topic length
    total = 91 + 1 + len(body) + len(topic)
    expected = b"".join([
        i32(total),                           # TOTALSIZE (one byte more than V1)
        bytes.fromhex("DAA320AB"),            # MAGICCODE V2
        i32(zlib.crc32(body) & 0x7FFFFFFF),   # BODYCRC
        i32(0),                               # QUEUEID
        i32(0),                               # FLAG
        i64(0),                               # QUEUEOFFSET
        i64(0),                               # PHYSICALOFFSET
        i32(0),                               # SYSFLAG
        i64(5),                               # BORNTIMESTAMP
        bytes([10, 0, 0, 7]), i32(52011),     # BORNHOST
        i64(6),                               # STORETIMESTAMP
        bytes([192, 168, 1, 20]), i32(10911),  # STOREHOST
        i32(0),                               # RECONSUMETIMES
        i64(0),                               # PREPARED_TX_OFFSET
        i32(len(body)), body,                 # BODYLENGTH, BODY
        struct.pack(">h", 200), topic,        # TOPICLENGTH as a short (V2), TOPIC
        struct.pack(">h", 0),                 # PROPERTIESLENGTH, no properties
    ])
    got = encode_record(topic=topic, queue_id=0, body=body, properties=b"", born_timestamp=5,
                        store_timestamp=6, born_host=BORN, store_host=STORE)
    assert bytes(got) == expected
    rec = decode_record(got, check_crc=True)
    assert isinstance(rec, Record)
    assert rec.magic == MAGIC_V2 and rec.topic == "T" * 200


def test_golden_ipv6_hosts() -> None:
    body = b"v6"
    topic = b"T6"
    total = 91 + 12 + 12 + len(body) + len(topic) + len(PROPS)
    expected = b"".join([
        i32(total),                           # TOTALSIZE: +12 per IPv6 host
        bytes.fromhex("DAA320A7"),            # MAGICCODE V1
        i32(zlib.crc32(body) & 0x7FFFFFFF),   # BODYCRC
        i32(3),                               # QUEUEID
        i32(0x0102),                          # FLAG
        i64(42),                              # QUEUEOFFSET
        i64(4096),                            # PHYSICALOFFSET
        i32(0x2 | 0x10 | 0x20),               # SYSFLAG: BORNHOST_V6 | STOREHOST_V6 set
        i64(1_700_000_000_123),               # BORNTIMESTAMP
        bytes(range(0x20, 0x30)), i32(40000),  # BORNHOST 16-byte ip, port
        i64(1_700_000_000_456),               # STORETIMESTAMP (shifted by 12)
        bytes(range(0xF0, 0x100)), i32(10911),  # STOREHOST 16-byte ip, port
        i32(2),                               # RECONSUMETIMES
        i64(77),                              # PREPARED_TX_OFFSET
        i32(len(body)), body,                 # BODYLENGTH, BODY
        struct.pack(">b", len(topic)), topic,  # TOPICLENGTH, TOPIC
        struct.pack(">h", len(PROPS)), PROPS,  # PROPERTIESLENGTH, PROPERTIES
    ])
    got = encode_record(topic=topic, body=body, properties=PROPS, born_host=BORN6,
                        store_host=STORE6, **FIELDS)
    assert bytes(got) == expected
    assert store_timestamp_offset(0x10) == 68
    assert struct.unpack_from(">q", got, 68)[0] == 1_700_000_000_456


@pytest.mark.parametrize(("born", "store", "bits"), [
    (BORN6, STORE, 0x10),
    (BORN, STORE6, 0x20),
])
def test_one_ipv6_host(born: HostAddr, store: HostAddr, bits: int) -> None:
    rec_bytes = encode_record(topic=b"T", queue_id=1, body=b"x", properties=b"",
                              born_host=born, store_host=store, store_timestamp=9)
    assert len(rec_bytes) == 91 + 12 + 2
    rec = decode_record(rec_bytes)
    assert isinstance(rec, Record)
    assert rec.sys_flag & 0x30 == bits
    assert rec.born_host == born and rec.store_host == store
    assert rec.store_timestamp == 9


def test_ipv4_hosts_clear_stale_ipv6_bits() -> None:
    rec = decode_record(encode_record(topic=b"T", queue_id=0, body=b"", properties=b"",
                                      sys_flag=0x30 | 0x80, born_host=BORN, store_host=STORE))
    assert isinstance(rec, Record)
    assert rec.sys_flag == 0x80


def test_golden_blank_marker() -> None:
    assert encode_blank(1234) == b"".join([
        i32(1234),                    # bytes covered up to the segment end
        bytes.fromhex("CBD43194"),    # BLANK_MAGIC
    ])
    assert struct.unpack(">i", bytes.fromhex("CBD43194"))[0] == BLANK_MAGIC
    assert decode_record(b"\x00" * 16 + encode_blank(8), 16) == Blank(8)


def test_magic_constants_match_spec() -> None:
    assert MAGIC_V1 == -626843481 == struct.unpack(">i", bytes.fromhex("DAA320A7"))[0]
    assert MAGIC_V2 == -626843477 == struct.unpack(">i", bytes.fromhex("DAA320AB"))[0]


def test_body_crc_is_masked() -> None:
    data = b"a"
    raw = zlib.crc32(data)  # 0xE8B7BE43
    assert raw & 0x80000000  # the raw CRC of this body has the top bit set
    assert body_crc(data) == raw & 0x7FFFFFFF == 0x68B7BE43


@given(st.binary(max_size=3 * 4096 + 7), st.integers(0, 2**32 - 1))
def test_body_crc_is_zlibs_crc32_whatever_the_length(data: bytes, seed: int) -> None:
    """The CRC (ISA-L's where installed) is zlib's, for bodies in one piece and in chunks,
    and when continued from a previous value."""
    assert body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF
    assert crc32(data, seed) == zlib.crc32(data, seed)


def test_pack_host() -> None:
    assert pack_host("10.0.0.7:52011") == BORN
    assert pack_host("[::1]:9876") == HostAddr(b"\x00" * 15 + b"\x01", 9876)
    assert str(BORN) == "10.0.0.7:52011"


def test_oversized_topic_and_properties_refused() -> None:
    with pytest.raises(MessageTooLarge):
        encode_record(topic=b"t" * 32768, queue_id=0, body=b"", properties=b"")
    with pytest.raises(MessageTooLarge):
        encode_record(topic=b"t", queue_id=0, body=b"", properties=b"p" * 32768)


def test_decode_at_offset_in_every_buffer_type(tmp_path: Path) -> None:
    rec = bytes(encode_record(topic=b"T", body=b"abc", properties=PROPS, born_host=BORN,
                              store_host=STORE, **FIELDS))
    data = b"\xaa" * 13 + rec + b"\xbb" * 5
    path = tmp_path / "seg"
    path.write_bytes(data)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        for buf in (data, bytearray(data), memoryview(data), mm):
            got = decode_record(buf, 13, check_crc=True, expected_physical_offset=4096)
            assert isinstance(got, Record)
            assert bytes(got.body) == b"abc" and got.properties == PROPS
            del got  # release the view into the mmap before it closes


def test_physical_offset_mismatch_is_corrupt() -> None:
    rec = encode_record(topic=b"T", queue_id=0, body=b"", properties=b"", physical_offset=100)
    assert isinstance(decode_record(rec, expected_physical_offset=100), Record)
    with pytest.raises(CorruptRecord, match="PHYSICALOFFSET"):
        decode_record(rec, expected_physical_offset=0)


def test_crc_checked_only_on_request() -> None:
    rec = encode_record(topic=b"T", queue_id=0, body=b"body", properties=b"", crc=1)
    assert isinstance(decode_record(rec), Record)
    with pytest.raises(CorruptRecord, match="CRC"):
        decode_record(rec, check_crc=True)


# ---------------------------------------------------------------- round trips

hosts = st.one_of(
    st.builds(HostAddr, st.binary(min_size=4, max_size=4), st.integers(-2**31, 2**31 - 1)),
    st.builds(HostAddr, st.binary(min_size=16, max_size=16), st.integers(-2**31, 2**31 - 1)),
)
i32s = st.integers(-2**31, 2**31 - 1)
i64s = st.integers(-2**63, 2**63 - 1)
# Up to 300 bytes, so both V1 (<= 127) and V2 topics occur; cut on a character boundary.
topics = st.lists(st.characters(blacklist_categories=("Cs",)), max_size=200).map(
    lambda chars: "".join(chars).encode("utf-8")[:300].decode("utf-8", "ignore").encode())


record_args = st.fixed_dictionaries({
    "topic": topics,
    "queue_id": i32s,
    "body": st.binary(max_size=2000),
    "properties": st.binary(max_size=400),
    "flag": i32s,
    "sys_flag": i32s,
    "born_timestamp": i64s,
    "born_host": hosts,
    "store_host": hosts,
    "store_timestamp": i64s,
    "queue_offset": i64s,
    "physical_offset": i64s,
    "reconsume_times": i32s,
    "prepared_tx_offset": i64s,
})


@settings(deadline=None, max_examples=200)
@given(args=record_args, prefix=st.binary(max_size=16))
def test_record_round_trip(args: dict[str, Any], prefix: bytes) -> None:
    encoded = encode_record(**args)
    v6 = (0x10 if len(args["born_host"].ip) == 16 else 0) | (
        0x20 if len(args["store_host"].ip) == 16 else 0)
    assert len(encoded) == record_size(len(args["body"]), len(args["topic"]),
                                       len(args["properties"]), v6)
    rec = decode_record(prefix + bytes(encoded), len(prefix), check_crc=True,
                        expected_physical_offset=args["physical_offset"])
    assert isinstance(rec, Record)
    assert rec.total_size == len(encoded)
    assert rec.magic == (MAGIC_V2 if len(args["topic"]) > 127 else MAGIC_V1)
    assert rec.topic == args["topic"].decode("utf-8")
    assert bytes(rec.body) == args["body"]
    assert rec.properties == args["properties"]
    assert rec.body_crc == body_crc(args["body"])
    assert rec.sys_flag == (args["sys_flag"] & ~0x30) | v6
    for name in ("queue_id", "flag", "born_timestamp", "born_host", "store_host",
                 "store_timestamp", "queue_offset", "physical_offset", "reconsume_times",
                 "prepared_tx_offset"):
        assert getattr(rec, name) == args[name], name


# ---------------------------------------------------------------- garbage only corrupts


def _decode_all_ways(buf: bytes, offset: int = 0) -> None:
    """Decode with every option; anything but CorruptRecord escaping is a bug."""
    for crc in (False, True):
        for expected in (None, 0, offset):
            with contextlib.suppress(CorruptRecord):
                decode_record(buf, offset, check_crc=crc, expected_physical_offset=expected)


@settings(deadline=None, max_examples=300)
@given(buf=st.binary(max_size=300), offset=st.integers(-4, 320))
def test_random_bytes_raise_only_corrupt_record(buf: bytes, offset: int) -> None:
    _decode_all_ways(buf, offset)


@settings(deadline=None, max_examples=300)
@given(tail=st.binary(max_size=300), magic=st.sampled_from([MAGIC_V1, MAGIC_V2, BLANK_MAGIC]),
       total=st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(0, 400)))
def test_random_bytes_behind_a_valid_magic(tail: bytes, magic: int, total: int) -> None:
    """Plain random bytes almost never hit a magic; plant one so the field parsers run."""
    _decode_all_ways(struct.pack(">ii", total, magic) + tail)


@settings(deadline=None, max_examples=200)
@given(args=record_args, data=st.data())
def test_truncated_record_is_corrupt(args: dict[str, Any], data: st.DataObject) -> None:
    encoded = bytes(encode_record(**args))
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecord):
        decode_record(encoded[:cut])


@settings(deadline=None, max_examples=300)
@given(args=record_args, data=st.data())
def test_bit_flip_corrupts_or_decodes(args: dict[str, Any], data: st.DataObject) -> None:
    encoded = bytearray(encode_record(**args))
    bit = data.draw(st.integers(0, len(encoded) * 8 - 1))
    encoded[bit // 8] ^= 1 << (bit % 8)
    _decode_all_ways(bytes(encoded))
    byte = bit // 8
    body_start = len(encoded) - len(args["body"]) - len(args["properties"]) - 2 - (
        len(args["topic"]) + (2 if len(args["topic"]) > 127 else 1))
    if byte < 8 or 8 <= byte < 12 or body_start <= byte < body_start + len(args["body"]):
        # TOTALSIZE, MAGICCODE, BODYCRC and BODY are all covered by a check.
        with pytest.raises(CorruptRecord):
            decode_record(bytes(encoded), check_crc=True)


@settings(deadline=None, max_examples=200)
@given(args=record_args, data=st.data())
def test_overwritten_slice_raises_only_corrupt_record(args: dict[str, Any],
                                                      data: st.DataObject) -> None:
    encoded = bytearray(encode_record(**args))
    start = data.draw(st.integers(0, len(encoded) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=len(encoded) - start))
    encoded[start : start + len(junk)] = junk
    _decode_all_ways(bytes(encoded))


@settings(deadline=None, max_examples=100)
@given(born=st.binary(min_size=4, max_size=4), born_port=st.integers(0, 65535),
       store=st.binary(min_size=4, max_size=4), store_port=st.integers(0, 65535),
       queue_offset=st.integers(0, 2**62), reconsume=st.integers(0, 16))
def test_fixed_part_with_hosts_as_one_field_reads_the_same_bytes(
        born: bytes, born_port: int, store: bytes, store_port: int, queue_offset: int,
        reconsume: int) -> None:
    """The 8-byte host forms ("q" and "8s") pack and read the record's fixed part exactly
    as FIXED_V4 does with a (4s, i) pair per host."""
    data = bytes(encode_record(
        topic=b"T", queue_id=1, body=b"body", properties=b"", born_host=HostAddr(born, born_port),
        store_host=HostAddr(store, store_port), queue_offset=queue_offset,
        reconsume_times=reconsume))
    head = data[:88]
    as_int = fixed_v4_with_hosts("q").unpack(head)
    as_bytes = fixed_v4_with_hosts("8s").unpack(head)
    born8, store8 = born + struct.pack(">i", born_port), store + struct.pack(">i", store_port)
    assert as_bytes[9] == born8 and as_bytes[11] == store8
    assert as_int[9] == struct.unpack(">q", born8)[0] and as_int[11] == struct.unpack(
        ">q", store8)[0]
    assert fixed_v4_with_hosts("8s").pack(*as_bytes) == head
    with pytest.raises(ValueError, match="not 8 bytes"):
        fixed_v4_with_hosts("i")
