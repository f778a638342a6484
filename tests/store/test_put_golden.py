"""Golden bytes of the commit log: every put path, through segment rolls, writes what it
wrote before the append point moved (the digest of the segments' written bytes).

Never update the digest to make the test pass: find what changed the bytes.
"""

from __future__ import annotations

import hashlib

from tidemq.formats.batch import encode_batch as encode_client_batch
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import HostAddr
from tidemq.store.append import MessageInput, UniformBatch

from .conftest import FakeClock, OpenStore

V4 = HostAddr(b"\x0a\x01\x02\x03", 40001)
V6 = HostAddr(bytes(range(16)), 40002)
STORE_HOST = HostAddr(b"\xc0\xa8\x00\x07", 10911)
LMQ = "%LMQ%golden"
SEGMENT = 8192


def _puts(store_host: HostAddr, open_store: OpenStore) -> bytes:
    clock = FakeClock(1_700_000_000_000)
    store = open_store(clock=clock, enable_lmq=True, enable_multi_dispatch=True,
                       mapped_file_size_commit_log=SEGMENT)
    store.store_host = store_host
    store.set_batch_topic("Bcq")
    props = encode_properties({"TAGS": "a", "KEYS": "k1 k2"})
    for i in range(40):  # the first takes the general path, the rest the fast one
        clock.now += i % 3
        body = b"m%d-" % i * (1 + i % 7)
        store.put("Topic", i % 2, MessageInput(body if i % 4 else memoryview(body), props,
                                               flag=i - 5), sys_flag=0x2 * (i % 2),
                  born_timestamp=i, born_host=(None, V4, V6)[i % 3], reconsume_times=i % 2)
    store.put("Topic", 0, MessageInput(b"z", b"KEYS\x01" + b"k" * 5000 + b"\x02"))
    store.put("T" * 200, 0, MessageInput(b"V2 record", props))
    for n, uniform in ((3, False), (12, False), (12, True)):
        clock.now -= 5  # the store time never goes backwards
        bodies = [b"b%02d" % i * (3 if uniform else 1 + i % 4) for i in range(n)]
        store.put_batch("Batch", 1, [MessageInput(b, props, flag=i) for i, b in
                                     enumerate(bodies)], born_timestamp=7, born_host=V4)
    entries = [(b"body-%04d" % i, encode_properties({"UNIQ_KEY": f"{i:08X}"}), i % 3)
               for i in range(30)]
    data = bytes(encode_client_batch(entries))
    store.put_batch("Batch", 2, UniformBatch(data, 30, len(data) // 30, 9,
                                             b"CLUSTER\x01c\x02", 0, None), born_timestamp=8)
    store.put_inner_batch("Bcq", 0, data, props, 30, born_timestamp=9, born_host=V4)
    for i, host in enumerate((None, V6, V4, V4)):  # INNER_BASE grows a digit on the way
        clock.now += i
        store.put_inner_batch("Bcq", 1, memoryview(data) if i % 2 else data, props, 3 + i,
                              tags_code=i, born_timestamp=0 if i == 2 else 11, born_host=host)
    for i in range(3):
        clock.now += 1
        lmq_props = props + f"INNER_MULTI_DISPATCH\x01{LMQ}\x02".encode()
        store.put_multi_dispatch("Topic", 1, MessageInput(b"lmq%d" % i, lmq_props), [LMQ],
                                 born_timestamp=10, born_host=(V4, V6, None)[i])
    log = store.commitlog
    return b"".join(bytes(seg.view[: seg.wrote]) for seg in log.segments)


def test_every_put_path_writes_the_golden_commit_log(open_store: OpenStore) -> None:
    written = _puts(STORE_HOST, open_store)
    assert len(written) > 2 * SEGMENT  # segments rolled, with BLANK markers
    assert hashlib.sha256(written).hexdigest() == (
        "e645dae3f25ae7e4ad6ca000417c66a5f6790e21dd9438ad3e2491fe54794ef8")


def test_an_ipv6_store_host_writes_the_golden_commit_log(open_store: OpenStore) -> None:
    written = _puts(V6, open_store)
    assert hashlib.sha256(written).hexdigest() == (
        "b457068fb144c791cb935e494f990bc8d36a22abe12060b6b81db5a142efdc48")
