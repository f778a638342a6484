"""Golden bytes: every encoder of commit-log records, held to digests of what it wrote
before the record format moved into one package.

A digest changes only if a byte of some record changes, which would break stores and
pull bodies written by earlier versions (and RocketMQ compatibility). Never update a
digest to make a test pass: find what changed the bytes.
"""

from __future__ import annotations

import hashlib

import pytest

from tidemq.formats.batch import encode_batch as encode_client_batch
from tidemq.formats.logical_mapping import Segment
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import HostAddr, encode_blank, encode_record, rewrite_queue
from tidemq.formats.record.batch import encode_batch, patch_batch, uniform_head
from tidemq.formats.record.loops import stamp_records
from tidemq.store.append import UniformBatch

V4 = HostAddr(b"\x0a\x01\x02\x03", 40001)
V4_STORE = HostAddr(b"\xc0\xa8\x00\x07", 10911)
V6 = HostAddr(bytes(range(16)), 40002)
V6_STORE = HostAddr(bytes(range(100, 116)), 10912)


def _digest(*parts: bytes | bytearray | memoryview) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def _full(topic: bytes, born: HostAddr, store: HostAddr, body: bytes) -> bytearray:
    return encode_record(
        topic=topic, queue_id=5, body=body, properties=b"TAGS\x01a\x02KEYS\x01k1 k2\x02",
        flag=-7, sys_flag=0x2 | 0x10 | 0x20, born_timestamp=1_700_000_000_001,
        born_host=born, store_host=store, store_timestamp=1_700_000_000_002,
        queue_offset=123456789012, physical_offset=9876543210, reconsume_times=3,
        prepared_tx_offset=77,
    )


#: One IPv4 V1 record, every field set, byte by byte.
V4_RECORD_HEX = (
    "00000077daa320a7" "3610a68600000005"
    "fffffff90000001c" "be991a1400000002"
    "4cb016ea00000002" "0000018bcfe56801"
    "0a01020300009c41" "0000018bcfe56802"
    "c0a8000700002a9f" "0000000300000000"
    "0000004d00000005" "68656c6c6f05546f"
    "7069630012544147" "530161024b455953"
    "016b31206b3202"
)


def test_one_ipv4_record_is_these_bytes() -> None:
    rec = _full(b"Topic", V4, V4_STORE, b"hello")
    assert rec.hex() == V4_RECORD_HEX


@pytest.mark.parametrize(("topic", "born", "store", "body", "digest"), [
    (b"Topic", V4, V4_STORE, b"hello",
     "3c94c402235800be2973926a12b4f25fb453c566c734f48a6691a3c462ca8dcf"),
    (b"Topic", V6, V4_STORE, b"x" * 300,
     "8623d164d3a043a7503a7ab1e7337a5e65e0e8f03e63772eae10018145ff2e3c"),
    (b"Topic", V4, V6_STORE, b"",
     "4f8b5b6032b2caa2eea0deec8f7704d4fccc2801f8f0162c6c27fc3a157faec9"),
    (b"Topic", V6, V6_STORE, bytes(range(256)) * 20,
     "e364e07e05db6c8581eb4e3e3f00787f8861db2df89d84abef312beb382f8b70"),
    (b"T" * 200, V4, V4_STORE, b"long topic: V2",
     "946a21eebc5bd7b81cd757df7c46bde1277ddca62ddee6858958a52be7aff002"),
    (b"T" * 200, V6, V6_STORE, b"long topic, IPv6 hosts",
     "79277459a0227fcb6c8471909f07f347cc8070b95ec7420faa747a19ff1a8741"),
])
def test_encode_record_writes_the_golden_bytes(topic: bytes, born: HostAddr, store: HostAddr,
                                               body: bytes, digest: str) -> None:
    assert _digest(_full(topic, born, store, body)) == digest


def test_the_blank_marker_is_these_bytes() -> None:
    assert encode_blank(4096).hex() == "00001000cbd43194"


def _columns(n: int, uniform: bool) -> tuple[list[bytes], list[bytes], list[int]]:
    bodies = [(b"b%d-" % i) * (3 if uniform else 1 + i % 5) for i in range(n)]
    if uniform:
        bodies = [b.ljust(12, b".")[:12] for b in bodies]
    props = [b"UNIQ_KEY\x01%04X\x02" % i + (b"" if uniform else b"K\x01v\x02" * (i % 3))
             for i in range(n)]
    flags = [i % 4 - 1 for i in range(n)]
    return bodies, props, flags


@pytest.mark.parametrize(("n", "uniform", "born", "topic", "digest"), [
    (3, False, V4, "Topic",
     "341044b60aaaff7cdf5aa260dfce7f81ace879f03a764d5f428795ab3bd60ab1"),  # record by record
    (20, False, V4, "Topic",
     "c5da74a3ad275c173b7c99a9b9b4a8d0e7b6ec66e2d48e9c5415227d35413cf0"),  # column-wise headers
    (20, True, V4, "Topic",
     "760f922f41e01b14ba8a4d1013748f7d99558f9cc46da85922242df9933bfe7d"),  # a template record tiled
    (20, True, V6, "Topic",
     "ad81f6d214db1f524b5c883007876d9fe97a5ea4721a9809fd10d99a7f297bb2"),  # IPv6: record by record
    (20, True, V4, "T" * 200,
     "eeec05cc9022cb7bd2311d3429cf6985ed41c696785a287b7c9c5668567409b9"),  # V2: record by record
])
# The record-by-record digests changed once, on purpose: with IPv4 hosts and the IPv6 host
# bits in ``sys_flag`` (as here), the store time was patched 12 bytes too far, over the
# store host's port and RECONSUMETIMES (tests/store/test_put.py).
def test_batch_encoders_write_the_golden_bytes(n: int, uniform: bool, born: HostAddr,
                                               topic: str, digest: str) -> None:
    bodies, props, flags = _columns(n, uniform)
    enc = encode_batch(topic, 6, bodies, props, flags, sys_flag=0x2 | 0x30,
                       born_timestamp=1_700_000_000_003, born_host=born, store_host=V4_STORE,
                       reconsume_times=1)
    before = bytes(enc.buf)
    patch_batch(enc, 1000, 8_000_000, 1_700_000_000_004)
    assert _digest(before, enc.buf, repr((list(enc.starts), list(enc.sizes),
                                          enc.ts_offset)).encode()) == digest


def test_patching_with_queue_steps_writes_the_golden_bytes() -> None:
    bodies, props, flags = _columns(10, False)
    enc = encode_batch("Topic", 6, bodies, props, flags, sys_flag=0, born_timestamp=5,
                       born_host=V4, store_host=V4_STORE)
    patch_batch(enc, 40, 1 << 33, 6, queue_step=[i % 3 + 1 for i in range(10)])
    assert _digest(enc.buf) == (
        "91ede94ccfe99101de15183204e32f4ceb577006412eb93e684ff52d78ab6dd2")


@pytest.mark.parametrize(("n", "cluster", "digest"), [
    (8, b"",
     "babc4d76ce36ae024742b5dac9ccee989f3c6a556386fea360097222bdb87e38"),
    (50, b"CLUSTER\x01DefaultCluster\x02",
     "13815b65c9fdeb896137f788fdebb156dd051ba9be6d23b42b4f6aa504d58fcc"),
])
def test_the_uniform_client_batch_writes_the_golden_bytes(n: int, cluster: bytes,
                                                          digest: str) -> None:
    entries = [(b"body-%04d" % i, {"UNIQ_KEY": f"{i:08X}", "WAIT": "true"}, i % 3)
               for i in range(n)]
    data = encode_client_batch([(b, encode_properties(p), f) for b, p, f in entries])
    size = len(data) // n
    batch = UniformBatch(bytes(data), n, size, 9, cluster, 0, None)
    head = uniform_head("Topic", batch, sys_flag=0, born_host=V4, store_host=V4_STORE)
    assert head is not None
    buf = bytearray(len(head) * n)
    stamp_records(buf, head, batch.data, n, size, 9, len(head) - batch.properties_length, 2,
                  11, 7, 4096, 12)
    assert _digest(buf) == digest


def test_the_logical_rewrite_writes_the_golden_bytes() -> None:
    recs = [encode_record(topic=b"LQ", queue_id=1, body=b"m%d" % i, properties=b"",
                          born_host=V4, store_host=V4_STORE, queue_offset=100 + i,
                          physical_offset=1000 * i) for i in range(6)]
    body = b"".join(recs)
    seg = Segment("b", 1, 500, 100, -1)
    sealed = Segment("b", 1, 500, 100, 104)
    assert _digest(rewrite_queue(body, 9, seg.to_logical, -1),
                   rewrite_queue(body, 9, sealed.to_logical, 104),
                   rewrite_queue(body + b"\x00\x00", 9, seg.to_logical, -1)) == (
        "8294c088276c693de7b50f93116788f593955b4a69adc2479ddf3e711d022e36")
