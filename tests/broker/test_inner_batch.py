"""RIP-26 inner batches over real TCP: stored and indexed once, compressed end to end,
verified before anything is stored, pulled whole; and what a client that predates inner
batches sees on a BatchCQ topic."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import lz4.frame
import pytest
import zstandard
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.processors import send as send_module
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.formats.batch import encode_batch, iter_batch
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.testing import Cluster
from tidemq.types import MessageExt

NEED_UNWRAP, INNER_BATCH = 0x40, 0x80
TOPIC = "Inner"


def entries(n: int, start: int = 0, size: int = 64) -> bytes:
    return encode_batch([
        ((b"%08d" % (start + i)) * (size // 8),
         encode_properties({"UNIQ_KEY": f"SUB{start + i:06d}", "TAGS": f"t{i % 2}",
                            "WAIT": "true"}), 100 + i)
        for i in range(n)
    ])


def inner_send(body: bytes, *, topic: str = TOPIC, queue_id: int = 0, sys_flag: int = 0,
               batch_props: dict[str, str] | None = None) -> RemotingCommand:
    """SEND_BATCH_MESSAGE with the given batch-level properties (default: a UNIQ_KEY)."""
    props = {"UNIQ_KEY": wire.uniq_key()} if batch_props is None else batch_props
    cmd = wire.send_batch(topic, [], queue_id=queue_id)
    cmd.body = body
    cmd.ext_fields["f"] = str(sys_flag)
    cmd.ext_fields["i"] = encode_properties(props).decode()
    return cmd


@pytest.fixture
async def bcq(cluster: Cluster, peer: Peer) -> Peer:
    await peer.ok(wire.create_topic(TOPIC, 2, attributes="+queue.type=BatchCQ"))
    await peer.ok(wire.create_topic("Plain", 2))
    return peer


async def pull_all(peer: Peer, offset: int = 0, *, unwrap: bool = True,
                   **kw: object) -> tuple[list[MessageExt], int]:
    resp = await peer.ok(wire.pull(TOPIC, 0, offset, **kw))  # type: ignore[arg-type]
    return (decode_messages(resp.full_body(), unwrap=unwrap),
            int(resp.ext_fields["nextBeginOffset"]))


async def test_an_inner_batch_is_one_record_and_one_entry(cluster: Cluster, bcq: Peer) -> None:
    batch_key = wire.uniq_key()
    resp = await bcq.ok(inner_send(entries(5), batch_props={"UNIQ_KEY": batch_key,
                                                             "INNER_NUM": "5", "TAGS": "outer"}))
    assert resp.ext_fields["batchUniqId"] == batch_key
    assert resp.ext_fields["queueOffset"] == "0" and "," not in resp.ext_fields["msgId"]
    second = await bcq.ok(inner_send(entries(3, 5)))
    assert second.ext_fields["queueOffset"] == "5"
    await wire.dispatched(cluster.brokers[0])
    assert await bcq.max_offset(TOPIC) == 8
    store = cluster.brokers[0].store
    bcq_queue = store.queues.get(TOPIC, 0)
    assert bcq_queue is not None and len(bcq_queue.files) == 1
    assert bcq_queue.files[0].wrote == 2 * 46
    msgs, nxt = await pull_all(bcq)
    assert nxt == 8
    assert [m.queue_offset for m in msgs] == list(range(8))
    assert [m.msg_id for m in msgs] == [f"SUB{i:06d}" for i in range(8)]
    assert [m.flag for m in msgs] == [100, 101, 102, 103, 104, 100, 101, 102]
    assert msgs[0].body == b"00000000" * 8 and msgs[7].body == b"00000007" * 8
    assert len({m.commit_log_offset for m in msgs}) == 2


@pytest.mark.parametrize("ctype", list(CompressionType))
async def test_compressed_inner_batches_round_trip(cluster: Cluster, bcq: Peer,
                                                   ctype: CompressionType) -> None:
    plain = entries(100, size=128)
    packed = compress(plain, ctype)
    assert len(packed) < len(plain) // 4
    resp = await bcq.ok(inner_send(packed, sys_flag=sys_flag_for(ctype),
                                   batch_props={"UNIQ_KEY": wire.uniq_key(),
                                                "INNER_NUM": "100"}))
    assert resp.ext_fields["queueOffset"] == "0"
    await wire.dispatched(cluster.brokers[0])
    raw = await bcq.ok(wire.pull(TOPIC, 0, 0))
    (record,) = _records(raw.full_body())
    assert record.body == packed  # stored as sent: the broker never re-compresses
    assert record.sys_flag & 0x701 == sys_flag_for(ctype)
    msgs, nxt = await pull_all(bcq)
    assert nxt == 100
    assert [m.body for m in msgs] == [bytes(e.body) for e in iter_batch(plain)]
    assert [m.queue_offset for m in msgs] == list(range(100))


def _records(body: bytes) -> list[Record]:
    out, pos = [], 0
    while pos < len(body):
        rec = decode_record(body, pos, check_crc=True)
        assert isinstance(rec, Record)
        out.append(rec)
        pos += rec.total_size
    return out


async def test_pulls_inside_a_batch_return_the_whole_batch(cluster: Cluster, bcq: Peer) -> None:
    for start in (0, 10, 20):
        await bcq.ok(inner_send(entries(10, start)))
    await wire.dispatched(cluster.brokers[0])
    msgs, nxt = await pull_all(bcq, 15, max_nums=1)
    assert [m.queue_offset for m in msgs] == list(range(10, 20)) and nxt == 20
    msgs, nxt = await pull_all(bcq, 19, max_nums=15)  # a second batch would make 20
    assert [m.queue_offset for m in msgs] == list(range(10, 20)) and nxt == 20
    msgs, nxt = await pull_all(bcq, 19, max_nums=20)
    assert [m.queue_offset for m in msgs] == list(range(10, 30)) and nxt == 30
    resp = await bcq(wire.pull(TOPIC, 0, 30))
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert resp.ext_fields["nextBeginOffset"] == "30"


async def rejected(peer: Peer, cluster: Cluster, cmd: RemotingCommand, why: str,
                   topic: str = TOPIC) -> None:
    """``cmd`` is refused with MESSAGE_ILLEGAL and nothing at all is stored."""
    store = cluster.brokers[0].store
    await wire.dispatched(cluster.brokers[0])
    log_end, queue_end = store.commitlog.max_offset, store.max_offset(topic, 0)
    resp = await peer(cmd)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (resp.code, resp.remark)
    assert resp.remark and why in resp.remark, resp.remark
    await wire.dispatched(cluster.brokers[0])
    assert (store.commitlog.max_offset, store.max_offset(topic, 0)) == (log_end, queue_end)


@pytest.mark.parametrize("claimed", ["3", "7", "0", "-1", "abc", "32768"])
async def test_a_lying_inner_num_is_refused(cluster: Cluster, bcq: Peer, claimed: str) -> None:
    await bcq.ok(inner_send(entries(2)))
    cmd = inner_send(entries(5), batch_props={"UNIQ_KEY": wire.uniq_key(),
                                              "INNER_NUM": claimed})
    await rejected(bcq, cluster, cmd, f"INNER_NUM says {claimed}")


async def test_batch_properties_holding_a_separator_are_refused(cluster: Cluster,
                                                               bcq: Peer) -> None:
    """They become the stored record's properties: one a reader would cut is refused."""
    await bcq.ok(inner_send(entries(2)))
    cmd = inner_send(entries(3))
    cmd.ext_fields["i"] = f"UNIQ_KEY\x01{wire.uniq_key()}\x02KEYS\x01a\x02b\x02"
    await rejected(bcq, cluster, cmd, "separator")


@pytest.mark.parametrize("ctype", [None, *CompressionType])
async def test_truncated_bodies_are_refused(cluster: Cluster, bcq: Peer,
                                            ctype: CompressionType | None) -> None:
    body, flag = entries(4), 0
    if ctype is not None:
        body, flag = compress(body, ctype), sys_flag_for(ctype)
    cmd = inner_send(body[: len(body) - 7], sys_flag=flag)
    await rejected(bcq, cluster, cmd, "inner batch body")


async def test_garbage_and_empty_bodies_are_refused(cluster: Cluster, bcq: Peer) -> None:
    await rejected(bcq, cluster, inner_send(b"\x00\x00\x00\x10" + b"x" * 40), "malformed")
    await rejected(bcq, cluster, inner_send(b"not zstd at all" * 3,
                                            sys_flag=sys_flag_for(CompressionType.ZSTD)),
                   "does not decompress")
    await rejected(bcq, cluster, inner_send(compress(b"", CompressionType.LZ4),
                                            sys_flag=sys_flag_for(CompressionType.LZ4)),
                   "1..32767")


@pytest.fixture
async def small_cap(tmp_path: Path) -> AsyncIterator[tuple[Cluster, Peer]]:
    cap = {"max_inner_batch_inflated_bytes": 1 << 20}
    async with Cluster(tmp_path, broker=cap) as c, Peer(c.brokers[0].broker_addr) as p:
        await p.ok(wire.create_topic(TOPIC, 1, attributes="+queue.type=BatchCQ"))
        yield c, p


def _bomb(ctype: CompressionType, size: int, declare_size: bool) -> bytes:
    zeros = bytes(size)
    if ctype is CompressionType.ZSTD:
        return zstandard.ZstdCompressor(write_content_size=declare_size).compress(zeros)
    if ctype is CompressionType.LZ4:
        return bytes(lz4.frame.compress(zeros, store_size=declare_size))
    return zlib.compress(zeros, 9)


@pytest.mark.parametrize("ctype", list(CompressionType))
@pytest.mark.parametrize("declare_size", [True, False])
async def test_decompression_bombs_are_refused(small_cap: tuple[Cluster, Peer],
                                               ctype: CompressionType,
                                               declare_size: bool) -> None:
    cluster, peer = small_cap
    bomb = _bomb(ctype, 64 << 20, declare_size)
    assert len(bomb) < 300_000
    await rejected(peer, cluster, inner_send(bomb, sys_flag=sys_flag_for(ctype)), "beyond")
    # just under the cap is fine
    ok = compress(entries(1, size=(1 << 20) - 200), ctype)
    await peer.ok(inner_send(ok, sys_flag=sys_flag_for(ctype)))


async def test_inner_batch_markers_on_a_plain_topic_are_refused(cluster: Cluster,
                                                                bcq: Peer) -> None:
    flagged = inner_send(entries(2), topic="Plain", sys_flag=INNER_BATCH | NEED_UNWRAP)
    await rejected(bcq, cluster, flagged, "not a BatchCQ topic", topic="Plain")
    only_inner = inner_send(entries(2), topic="Plain", sys_flag=INNER_BATCH)
    await rejected(bcq, cluster, only_inner, "not a BatchCQ topic", topic="Plain")
    claimed = inner_send(entries(2), topic="Plain",
                         batch_props={"UNIQ_KEY": wire.uniq_key(), "INNER_NUM": "2"})
    await rejected(bcq, cluster, claimed, "INNER_NUM", topic="Plain")
    single = wire.send("Plain", b"x", sys_flag=INNER_BATCH)
    await rejected(bcq, cluster, single, "not a BatchCQ topic", topic="Plain")


async def test_a_batch_without_a_batch_key_is_split_even_on_batch_cq(cluster: Cluster,
                                                                     bcq: Peer) -> None:
    """What the Java broker does: no UNIQ_KEY on the batch, no inner batch (store.md §3.3)."""
    resp = await bcq.ok(inner_send(entries(3), batch_props={"WAIT": "true"}))
    assert "batchUniqId" not in resp.ext_fields
    assert resp.ext_fields["msgId"].count(",") == 2
    await wire.dispatched(cluster.brokers[0])
    msgs, _ = await pull_all(bcq)
    assert [m.queue_offset for m in msgs] == [0, 1, 2]
    assert len({m.commit_log_offset for m in msgs}) == 3


@pytest.mark.parametrize(("text", "kept"), [
    # a producer's text: INNER_NUM in the middle, the last pair without its separator
    ("UNIQ_KEY\x01U1\x02INNER_NUM\x014\x02WAIT\x01true",
     "UNIQ_KEY\x01U1\x02WAIT\x01true\x02CLUSTER\x01DefaultCluster\x02"),
    ("INNER_NUM\x014\x02UNIQ_KEY\x01U2\x02CLUSTER\x01Mine\x02",
     "UNIQ_KEY\x01U2\x02CLUSTER\x01Mine\x02"),
    # a repeated name: the last value kept where the first stood
    ("KEYS\x01a\x02UNIQ_KEY\x01U3\x02KEYS\x01b\x02",
     "KEYS\x01b\x02UNIQ_KEY\x01U3\x02CLUSTER\x01DefaultCluster\x02"),
    # a claimed INNER_BASE: the store writes its own
    ("UNIQ_KEY\x01U4\x02INNER_BASE\x017\x02", "UNIQ_KEY\x01U4\x02CLUSTER\x01DefaultCluster\x02"),
])
async def test_the_record_keeps_the_pairs_less_the_stores_own(cluster: Cluster, bcq: Peer,
                                                              text: str, kept: str) -> None:
    cmd = inner_send(entries(4))
    cmd.ext_fields["i"] = text
    await bcq.ok(cmd)
    await wire.dispatched(cluster.brokers[0])
    resp = await bcq.ok(wire.pull(TOPIC, 0, 0))
    (record,) = _records(resp.full_body())
    assert bytes(record.properties) == (kept + "INNER_NUM\x014\x02INNER_BASE\x010\x02").encode()


# ---------------------------------------------------------------------- old clients


async def test_what_a_client_that_predates_inner_batches_sees(cluster: Cluster,
                                                              bcq: Peer) -> None:
    """A remoting client that knows nothing of NEED_UNWRAP / INNER_BATCH decodes each
    stored record as one message. Shown with the bare record decoder (the bytes on the
    wire) and with ``decode_messages(unwrap=False)`` (a client that at least inflates
    bodies whose compression it knows). docs/batch-consume-queue.md explains it."""
    plain = entries(4)
    await bcq.ok(inner_send(plain, batch_props={"UNIQ_KEY": "BATCHKEY", "TAGS": "outer"}))
    packed = compress(entries(3, 4), CompressionType.ZLIB)
    await bcq.ok(inner_send(packed, sys_flag=sys_flag_for(CompressionType.ZLIB)))
    await wire.dispatched(cluster.brokers[0])
    resp = await bcq.ok(wire.pull(TOPIC, 0, 0))
    assert resp.ext_fields["nextBeginOffset"] == "7"

    first, second = _records(resp.full_body())
    # 1. exactly what arrives: one record per batch, flags set, the batch encoding as body
    assert first.sys_flag == NEED_UNWRAP | INNER_BATCH
    assert first.body == plain and first.queue_offset == 0
    props = decode_properties(first.properties)
    assert props["UNIQ_KEY"] == "BATCHKEY" and props["TAGS"] == "outer"
    assert (props["INNER_NUM"], props["INNER_BASE"]) == ("4", "0")
    assert second.sys_flag == NEED_UNWRAP | INNER_BATCH | sys_flag_for(CompressionType.ZLIB)
    assert second.body == packed and second.queue_offset == 4
    # 2. a client that inflates what it knows but does not unwrap: two "messages"
    old = decode_messages(resp.full_body(), unwrap=False)
    assert [m.queue_offset for m in old] == [0, 4]  # offsets 1-3 and 5-6 never appear
    assert old[0].body == plain and old[1].body == entries(3, 4)
    assert old[0].msg_id == "BATCHKEY" and old[0].tags == "outer"
    # its "next offset = last offset + 1" would be 5: that pull returns the second batch again
    again = await bcq.ok(wire.pull(TOPIC, 0, 5))
    assert [m.queue_offset for m in decode_messages(again.full_body(), unwrap=False)] == [4]
    # 3. a TideMQ (or RocketMQ 5) client unwraps: seven messages, offsets 0..6
    new = decode_messages(resp.full_body())
    assert [m.queue_offset for m in new] == list(range(7))


async def test_messages_of_a_batch_cq_topic_sent_one_by_one_look_ordinary(
        cluster: Cluster, bcq: Peer) -> None:
    for i in range(3):
        await bcq.ok(wire.send(TOPIC, b"single%d" % i))
    await wire.dispatched(cluster.brokers[0])
    resp = await bcq.ok(wire.pull(TOPIC, 0, 0))
    recs = _records(resp.full_body())
    assert [r.sys_flag & (NEED_UNWRAP | INNER_BATCH) for r in recs] == [0, 0, 0]
    assert [m.queue_offset for m in decode_messages(resp.full_body(), unwrap=False)] == [0, 1, 2]


async def test_inner_batches_survive_a_broker_restart(cluster: Cluster, bcq: Peer) -> None:
    await bcq.ok(inner_send(entries(6)))
    await bcq.ok(inner_send(compress(entries(4, 6), CompressionType.ZSTD),
                            sys_flag=sys_flag_for(CompressionType.ZSTD)))
    await wire.dispatched(cluster.brokers[0])
    await cluster.restart_broker(0)
    async with Peer(cluster.brokers[0].broker_addr) as peer:
        msgs, nxt = await pull_all(peer, 7)
        assert nxt == 10 and [m.queue_offset for m in msgs] == [6, 7, 8, 9]
        resp = await peer.ok(inner_send(entries(2, 10)))
        assert resp.ext_fields["queueOffset"] == "10"


async def test_send_code_is_batch_only(cluster: Cluster, bcq: Peer) -> None:
    """A single SEND_MESSAGE_V2 carrying a batch encoding is one message, not a batch."""
    cmd = wire.send(TOPIC, entries(3), code=RequestCode.SEND_MESSAGE_V2)
    await bcq.ok(cmd)
    await wire.dispatched(cluster.brokers[0])
    msgs, nxt = await pull_all(bcq)
    assert nxt == 1 and len(msgs) == 1 and msgs[0].body == entries(3)


def tagged(tags: list[str | None], start: int = 0) -> bytes:
    return encode_batch([
        (b"body%d" % (start + i),
         encode_properties({"UNIQ_KEY": f"SUB{start + i:06d}",
                            **({"TAGS": t} if t is not None else {})}), 0)
        for i, t in enumerate(tags)
    ])


@pytest.mark.parametrize("ctype", [None, *CompressionType], ids=str)
async def test_a_tag_subscription_keeps_batches_holding_that_tag(
        cluster: Cluster, bcq: Peer, ctype: CompressionType | None) -> None:
    """The broker keeps an inner batch when any of its messages has a subscribed tag
    (the outer record has none); the client then drops the others."""
    batches = [["a", "b", "a"], ["b", "b"], [None, "c"], ["c", "a"]]
    start = 0
    for tags in batches:
        body = tagged(tags, start)
        flag = 0
        if ctype is not None:
            body, flag = compress(body, ctype), sys_flag_for(ctype)
        await bcq.ok(inner_send(body, sys_flag=flag))
        start += len(tags)
    await wire.dispatched(cluster.brokers[0])
    for sub, want in [("a", [0, 1, 2, 7, 8]), ("b", [0, 1, 2, 3, 4]),
                      ("c", [5, 6, 7, 8]), ("b || c", list(range(9))), ("*", list(range(9)))]:
        msgs, nxt = await pull_all(bcq, subscription=sub)
        assert [m.queue_offset for m in msgs] == want, sub
        assert nxt == 9
    resp = await bcq(wire.pull(TOPIC, 0, 0, subscription="zzz"))
    assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert resp.ext_fields["nextBeginOffset"] == "9"


async def test_a_tag_subscription_stops_at_max_nums_among_inner_batches(
        cluster: Cluster, bcq: Peer) -> None:
    for start in range(0, 40, 4):
        await bcq.ok(inner_send(tagged(["x", "y", "x", "y"], start)))
    await wire.dispatched(cluster.brokers[0])
    msgs, nxt = await pull_all(bcq, subscription="y", max_nums=8)
    assert [m.queue_offset for m in msgs] == list(range(8)) and nxt == 8


async def test_an_inner_batch_naming_lmqs_is_refused(cluster: Cluster, bcq: Peer) -> None:
    """An inner batch is never fanned out: a batch whose first message or whose header
    names LMQs is refused rather than stored without its fan-out."""
    fan_out = encode_batch([
        (b"x", encode_properties({"UNIQ_KEY": "SUB1", "INNER_MULTI_DISPATCH": "%LMQ%a"}), 0),
        (b"y", encode_properties({"UNIQ_KEY": "SUB2"}), 0)])
    await rejected(bcq, cluster, inner_send(fan_out), "INNER_MULTI_DISPATCH")
    await rejected(bcq, cluster, inner_send(
        entries(2), batch_props={"UNIQ_KEY": wire.uniq_key(),
                                 "INNER_MULTI_DISPATCH": "%LMQ%a"}), "INNER_MULTI_DISPATCH")


async def test_a_key_ending_in_the_fan_out_key_is_stored(cluster: Cluster, bcq: Peer) -> None:
    """A first message whose property name merely ends in INNER_MULTI_DISPATCH does not
    name LMQs: the inner batch is stored, the property with it."""
    body = encode_batch([
        (b"x", encode_properties({"UNIQ_KEY": "SUB1", "MY_INNER_MULTI_DISPATCH": "%LMQ%a"}), 0),
        (b"y", encode_properties({"UNIQ_KEY": "SUB2"}), 0)])
    await bcq.ok(inner_send(body))
    await wire.dispatched(cluster.brokers[0])
    msgs, nxt = await pull_all(bcq)
    assert nxt == 2 and [m.body for m in msgs] == [b"x", b"y"]
    assert msgs[0].properties["MY_INNER_MULTI_DISPATCH"] == "%LMQ%a"


@pytest.mark.parametrize("ctype", list(CompressionType))
@pytest.mark.parametrize("n", [2, 5])
async def test_a_compressed_inner_batch_is_inflated_once(
        cluster: Cluster, bcq: Peer, monkeypatch: pytest.MonkeyPatch, ctype: CompressionType,
        n: int) -> None:
    """Whichever reading the send takes -- the one call of the usual shape (five entries)
    or the general walk (two: fewer than the usual shape holds) -- its body is inflated
    once."""
    inflated: list[int] = []
    real = send_module.decompress

    def counted(data: bytes | bytearray | memoryview, kind: CompressionType,
                cap: int) -> bytes | bytearray | memoryview:
        inflated.append(len(data))
        return real(data, kind, cap)

    monkeypatch.setattr(send_module, "decompress", counted)
    plain = entries(n, 40)
    await bcq.ok(inner_send(compress(plain, ctype), sys_flag=sys_flag_for(ctype)))
    assert len(inflated) == 1
    await wire.dispatched(cluster.brokers[0])
    msgs, nxt = await pull_all(bcq)
    assert nxt == n
    assert [m.body for m in msgs] == [bytes(e.body) for e in iter_batch(plain)]
