"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) over real TCP
(remoting.md §2.7, §3.2): keys, batches, auto-creation, and every rejection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.topics import SEND_FORBIDDEN_TOPICS
from tidemq.codec.command import RequestCode
from tidemq.codec.frame import frame_bytes
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode, error_for_code
from tidemq.formats.javaprops import properties_text
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.properties import decode_properties
from tidemq.net import RemotingClient
from tidemq.testing import Cluster
from tidemq.types import FlushDiskType

SEND_CODES = [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2]


@pytest.mark.parametrize("code", SEND_CODES)
async def test_single_send_is_stored_with_its_properties(cluster: Cluster, peer: Peer,
                                                         code: int) -> None:
    await peer.ok(wire.create_topic("Orders", 4))
    text = wire.props(tags="TagA", keys="k1 k2")
    resp = await peer.ok(wire.send("Orders", b"payload", code=code, queue_id=2,
                                   properties=text, flag=7))
    ext = resp.ext_fields
    assert ext["queueId"] == "2" and ext["queueOffset"] == "0"
    assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
    host, phys = decode_offset_msg_id(ext["msgId"])
    assert f"{host}" == cluster.brokers[0].broker_addr
    await wire.dispatched(cluster.brokers[0])
    [msg] = await peer.messages("Orders", 2)
    assert msg.body == b"payload" and msg.flag == 7 and msg.commit_log_offset == phys
    assert msg.tags == "TagA" and msg.keys == ["k1", "k2"]
    sent = decode_properties(text.encode())
    assert msg.uniq_key == sent["UNIQ_KEY"] == msg.msg_id
    assert msg.properties["CLUSTER"] == "DefaultCluster"


async def test_v1_keys_on_v2_code_are_rejected_naming_the_field(peer: Peer) -> None:
    cmd = wire.send("Orders", code=RequestCode.SEND_MESSAGE)
    cmd.code = RequestCode.SEND_MESSAGE_V2
    resp = await peer(cmd)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark and "'a'" in resp.remark


async def test_negative_queue_id_picks_a_writable_queue(peer: Peer) -> None:
    await peer.ok(wire.create_topic("AnyQ", 3))
    seen = set()
    for _ in range(20):
        resp = await peer.ok(wire.send("AnyQ", queue_id=-1))
        seen.add(int(resp.ext_fields["queueId"]))
    assert seen <= {0, 1, 2} and len(seen) > 1


def _entries(n: int, tag: str = "t") -> list[tuple[bytes, str]]:
    return [(f"m{i}".encode(), wire.props(tags=f"{tag}{i}")) for i in range(n)]


@pytest.mark.parametrize(("code", "flag"), [
    (RequestCode.SEND_BATCH_MESSAGE, None),
    (RequestCode.SEND_MESSAGE_V2, "true"),
    (RequestCode.SEND_MESSAGE, "true"),
    (RequestCode.SEND_MESSAGE, "1"),  # the C++ client's spelling (remoting.md §5.3)
])
async def test_batch_is_split_into_records_with_consecutive_offsets(
        cluster: Cluster, peer: Peer, code: int, flag: str | None) -> None:
    single = RequestCode.SEND_MESSAGE_V2 if code == RequestCode.SEND_BATCH_MESSAGE else code
    await peer.ok(wire.send("Batch", code=single, queue_id=1))  # offset 0 taken
    entries = _entries(5)
    resp = await peer.ok(wire.send_batch("Batch", entries, code=code, queue_id=1,
                                         batch_flag=flag))
    ids = resp.ext_fields["msgId"].split(",")
    assert len(ids) == 5 and resp.ext_fields["queueOffset"] == "1"
    await wire.dispatched(cluster.brokers[0])
    msgs = (await peer.messages("Batch", 1))[1:]
    assert [m.queue_offset for m in msgs] == [1, 2, 3, 4, 5]
    assert [m.body for m in msgs] == [b for b, _ in entries]
    assert [m.commit_log_offset for m in msgs] == [decode_offset_msg_id(i)[1] for i in ids]
    # Each record keeps its entry's own properties, UNIQ_KEY included (ISSUE #9416).
    assert [m.uniq_key for m in msgs] == [decode_properties(p.encode())["UNIQ_KEY"]
                                          for _, p in entries]
    assert [m.tags for m in msgs] == [f"t{i}" for i in range(5)]


async def test_code_10_with_batch_false_stores_the_body_as_one_message(
        cluster: Cluster, peer: Peer) -> None:
    cmd = wire.send_batch("NoBatch", _entries(3), code=RequestCode.SEND_MESSAGE,
                          batch_flag="0")
    resp = await peer.ok(cmd)
    assert "," not in resp.ext_fields["msgId"]
    await wire.dispatched(cluster.brokers[0])
    [msg] = await peer.messages("NoBatch", 0)
    assert msg.body == bytes(cmd.body)


async def test_unknown_topic_is_created_from_tbw102_and_routed(cluster: Cluster, peer: Peer,
                                                              namesrv: Peer) -> None:
    tbw = await wire.eventually_route(namesrv, "TBW102")
    assert {q.perm for q in tbw.queue_datas} == {7}
    assert (await namesrv(wire.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Fresh"))
            ).code == ResponseCode.TOPIC_NOT_EXIST
    await peer.ok(wire.send("Fresh", queue_nums=3, queue_id=2))
    tc = cluster.brokers[0].topics.get("Fresh")
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (3, 3, 6)
    route = await wire.eventually_route(namesrv, "Fresh")
    [qd] = route.queue_datas
    assert (qd.broker_name, qd.write_queue_nums, qd.perm) == ("broker-a", 3, 6)
    [bd] = route.broker_datas
    assert bd.broker_addrs[0] == cluster.brokers[0].broker_addr


async def test_auto_created_queue_count_is_clamped_by_the_template(cluster: Cluster,
                                                                  peer: Peer) -> None:
    await peer.ok(wire.send("Wide", queue_nums=64))
    tc = cluster.brokers[0].topics.get("Wide")
    assert tc is not None and tc.write_queue_nums == 8  # TBW102's queue count


async def test_unknown_topic_without_an_inherit_template_is_17(peer: Peer) -> None:
    resp = await peer(wire.send("Orphan", default_topic="NoSuchTemplate"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.remark
    await peer.ok(wire.create_topic("Plain", 2))
    resp = await peer(wire.send("Orphan2", default_topic="Plain"))  # no INHERIT bit
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.parametrize("topic", ["", "has space", "a/b", "x" * 128, "中文"])
@pytest.mark.parametrize("code", SEND_CODES)
async def test_bad_topic_names_are_invalid_parameter(peer: Peer, topic: str, code: int) -> None:
    resp = await peer(wire.send(topic, code=code))
    assert resp.code == ResponseCode.INVALID_PARAMETER and resp.remark


@pytest.mark.parametrize("topic", sorted(SEND_FORBIDDEN_TOPICS))
@pytest.mark.parametrize("code", SEND_CODES)
async def test_sends_to_system_topics_are_no_permission(peer: Peer, topic: str, code: int
                                                       ) -> None:
    """As upstream (``TopicValidator.isNotAllowedSendTopic``): a topic nobody may send to
    is a permission refusal, not a bad parameter."""
    resp = await peer(wire.send(topic, code=code))
    assert (resp.code, resp.remark) == (
        ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")


async def test_longest_legal_topic_name_is_accepted(cluster: Cluster, peer: Peer) -> None:
    resp = await peer.ok(wire.send("T" * 127, b"long name"))
    queue_id = int(resp.ext_fields["queueId"])
    await wire.dispatched(cluster.brokers[0])
    [msg] = await peer.messages("T" * 127, queue_id)
    assert (msg.topic, msg.body, msg.queue_offset) == ("T" * 127, b"long name", 0)


@pytest.mark.parametrize("qid", [4, 5, 1000])
async def test_queue_id_out_of_range_is_invalid_parameter(peer: Peer, qid: int) -> None:
    await peer.ok(wire.create_topic("Four", 4))
    resp = await peer(wire.send("Four", queue_id=qid))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark and f"queueId[{qid}]" in resp.remark


async def test_oversized_body_is_message_illegal_and_stores_nothing(peer: Peer) -> None:
    await peer.ok(wire.create_topic("Big", 1))
    limit = 4 * 1024 * 1024
    resp = await peer(wire.send("Big", b"x" * (limit + 1)))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and resp.remark
    await peer.ok(wire.send("Big", b"x" * limit))
    assert (await peer.ok(wire.send("Big", b"ok"))).ext_fields["queueOffset"] == "1"


async def test_a_17_mib_send_is_answered_with_the_size_and_the_limit(
        cluster: Cluster, peer: Peer) -> None:
    """Not a bare reset: MESSAGE_ILLEGAL naming both sizes, and the connection serves on."""
    await peer.ok(wire.create_topic("Huge", 1))
    big = Peer(peer.addr, RemotingClient(request_timeout=30.0, max_frame_size=64 * 1024 * 1024))
    async with big:
        cmd = wire.send("Huge", b"x" * (17 * 1024 * 1024))
        size = len(frame_bytes(cmd)) - 4
        resp = await big(cmd)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
        assert resp.remark and f"{size} bytes" in resp.remark and "16777216" in resp.remark
        error = error_for_code(resp.code, resp.remark)  # what a producer raises
        assert error.code == ResponseCode.MESSAGE_ILLEGAL and not error.retriable
        await big.ok(wire.send("Huge", b"small"))  # same connection, still served
    await wire.dispatched(cluster.brokers[0])
    assert await peer.max_offset("Huge") == 1


async def test_oversized_batch_entry_is_message_illegal(peer: Peer) -> None:
    entries = [(b"a", wire.props()), (b"x" * (4 * 1024 * 1024 + 1), wire.props())]
    resp = await peer(wire.send_batch("BigBatch", entries))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL


async def test_properties_over_32767_bytes_are_message_illegal(peer: Peer) -> None:
    await peer.ok(wire.create_topic("Props", 1))
    resp = await peer(wire.send("Props", properties=wire.props(big="v" * 32_760)))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert resp.remark and "32767" in resp.remark
    await peer.ok(wire.send("Props", properties=wire.props(big="v" * 30_000)))


#: Property strings of pairs whose name or value held a separator, as a careless writer
#: would join them: read back, a pair would be cut or dropped without a word.
SPLIT_PROPERTIES = [
    "KEYS\x01a\x02b\x02",  # value "a\x02b"
    "KEYS\x01a\x01b\x02",  # value "a\x01b"
    "KEYS\x01a\x02\x02WAIT\x01true\x02",  # value "a\x02"
    "\x02KEYS\x01a\x02",  # name "\x02KEYS"
]


@pytest.mark.parametrize("code", SEND_CODES)
@pytest.mark.parametrize("text", SPLIT_PROPERTIES)
async def test_properties_with_a_separator_inside_are_message_illegal(
        cluster: Cluster, peer: Peer, code: int, text: str) -> None:
    await peer.ok(wire.create_topic("Sep", 1))
    resp = await peer(wire.send("Sep", code=code, properties=text))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert resp.remark and "separator" in resp.remark, resp.remark
    entries = [(b"a", wire.props()), (b"b", text)]
    resp = await peer(wire.send_batch("Sep", entries))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "separator" in (resp.remark or "")
    uniform = [(b"c", text)] * 40  # one layout: the broker's uniform-batch path
    resp = await peer(wire.send_batch("Sep", uniform))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "separator" in (resp.remark or "")
    await wire.dispatched(cluster.brokers[0])
    assert await peer.max_offset("Sep") == 0  # nothing stored


@pytest.mark.parametrize("body", [b"", b"\x00\x00\x00\x05junk", b"\x00" * 30])
async def test_malformed_batch_bodies_are_message_illegal(peer: Peer, body: bytes) -> None:
    cmd = wire.send_batch("BadBatch", [])
    cmd.body = body
    resp = await peer(cmd)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and resp.remark


async def test_topic_without_write_permission_is_16(peer: Peer) -> None:
    await peer.ok(wire.create_topic("ReadOnly", 1, perm=4))
    resp = await peer(wire.send("ReadOnly"))
    assert resp.code == ResponseCode.NO_PERMISSION


async def test_a_topic_change_reaches_the_next_send(peer: Peer) -> None:
    """What the broker decided about a topic for one send is not kept past a change of
    the topic: its permission, then its queue count."""
    await peer.ok(wire.create_topic("Changing", 4))
    await peer.ok(wire.send("Changing", queue_id=3))
    await peer.ok(wire.create_topic("Changing", 4, perm=4))
    resp = await peer(wire.send("Changing", queue_id=3))
    assert resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == "the topic[Changing] sending is forbidden"
    await peer.ok(wire.create_topic("Changing", 2))
    resp = await peer(wire.send("Changing", queue_id=3))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark and "queueId[3] is illegal" in resp.remark
    await peer.ok(wire.send("Changing", queue_id=1))


async def test_the_broker_permission_reaches_the_next_send(peer: Peer) -> None:
    """A broker made read-only refuses sends to a topic it took sends for just before,
    and takes them again once writable."""
    await peer.ok(wire.create_topic("Perm", 1))
    await peer.ok(wire.send("Perm"))
    await peer.ok(wire.request(RequestCode.UPDATE_BROKER_CONFIG,
                               properties_text({"brokerPermission": "4"}).encode()))
    resp = await peer(wire.send("Perm"))
    assert resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == "the topic[Perm] sending is forbidden"
    await peer.ok(wire.request(RequestCode.UPDATE_BROKER_CONFIG,
                               properties_text({"brokerPermission": "6"}).encode()))
    await peer.ok(wire.send("Perm"))


async def test_second_broker_serves_its_own_topics(cluster: Cluster) -> None:
    async with Peer(cluster.brokers[1].broker_addr) as other:
        resp = await other.ok(wire.send("OnB"))
        host, _ = decode_offset_msg_id(resp.ext_fields["msgId"])
        assert str(host) == cluster.brokers[1].broker_addr
        await wire.dispatched(cluster.brokers[1])
        [msg] = decode_messages((await other.ok(wire.pull("OnB", 0, 0))).full_body())
        assert msg.store_host == cluster.brokers[1].broker_addr
    assert cluster.brokers[0].topics.get("OnB") is None


@pytest.fixture
async def sync_flush(tmp_path: Path) -> AsyncIterator[tuple[Cluster, Peer]]:
    store = {"flush_disk_type": FlushDiskType.SYNC_FLUSH}
    async with Cluster(tmp_path / "sync", brokers=1, store=store) as cluster, \
            Peer(cluster.brokers[0].broker_addr) as peer:
        yield cluster, peer


async def test_sync_flush_answers_after_the_flush(sync_flush: tuple[Cluster, Peer]) -> None:
    cluster, peer = sync_flush
    broker = cluster.brokers[0]
    resp = await peer.ok(wire.send("Durable", b"d"))
    _, phys = decode_offset_msg_id(resp.ext_fields["msgId"])
    assert broker.store.flusher is not None
    assert broker.store.flusher.flushed_offset > phys
    resp = await peer.ok(wire.send_batch("Durable", _entries(3)))
    assert len(resp.ext_fields["msgId"].split(",")) == 3
    await wire.dispatched(broker)
    assert await peer.max_offset("Durable", 0) == 4


async def test_sync_flush_message_without_wait_becomes_visible(
        sync_flush: tuple[Cluster, Peer]) -> None:
    _, peer = sync_flush
    await peer.ok(wire.send("Durable", properties=wire.props(WAIT="false")))
    deadline = time.monotonic() + 3
    while await peer.max_offset("Durable", 0) < 1:
        assert time.monotonic() < deadline, "never dispatched"
        await asyncio.sleep(0.05)
