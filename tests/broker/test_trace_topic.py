"""The message-trace topic: clients may send to it (upstream allows it, unlike the other
system topics), and ``traceTopicEnable`` creates it at start under ``msgTraceTopicName``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.topics import TopicManager
from tidemq.codec.command import RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import ConfigError, ResponseCode
from tidemq.formats.properties import decode_properties
from tidemq.store.layout import StoreLayout
from tidemq.testing import Cluster


async def test_a_send_to_the_trace_topic_is_stored(cluster: Cluster, peer: Peer) -> None:
    resp = await peer(wire.send("RMQ_SYS_TRACE_TOPIC", b"Pub\x01trace\x02",
                                properties=wire.props(keys="ID1 K1")))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await wire.dispatched(cluster.brokers[0])
    [msg] = await peer.messages("RMQ_SYS_TRACE_TOPIC", int(resp.ext_fields["queueId"]))
    assert msg.body == b"Pub\x01trace\x02" and msg.keys == ["ID1", "K1"]


async def test_trace_topic_enable_creates_the_named_topic(tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker={"trace_topic_enable": True,
                                         "msg_trace_topic_name": "MyTrace",
                                         "auto_create_topic_enable": False}) as c:
        tc = c.brokers[0].ctx.topics.get("MyTrace")
        assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums) == (1, 1)
        async with Peer(c.brokers[0].broker_addr) as peer:
            await peer.ok(wire.send("MyTrace", b"x"))
            refused = await peer(wire.send("RMQ_SYS_TRACE_TOPIC", b"x"))
            assert refused.code == ResponseCode.TOPIC_NOT_EXIST  # not enabled by that name


async def test_trace_topic_is_not_created_by_default(cluster: Cluster) -> None:
    assert cluster.brokers[0].ctx.topics.get("RMQ_SYS_TRACE_TOPIC") is None


def test_a_bad_trace_topic_name_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="msgTraceTopicName"):
        TopicManager(StoreLayout(str(tmp_path)), broker_name="b", cluster_name="c",
                     auto_create=True, default_queue_nums=4, trace_topic="bad name")


async def test_a_trace_message_is_found_by_each_of_its_hundreds_of_keys(
        cluster: Cluster, peer: Peer) -> None:
    """A trace message's KEYS (the msgIds of its records, kilobytes of them) reach the
    key index as their text: each key, and the message's own UNIQ_KEY, still finds it."""
    ids = [f"7F000001{i * 7919:024X}" for i in range(731)]
    text = wire.props(keys=" ".join(ids))
    resp = await peer(wire.send("RMQ_SYS_TRACE_TOPIC", b"Pub\x01trace\x02", properties=text))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await wire.dispatched(cluster.brokers[0])
    uniq = decode_properties(text.encode())["UNIQ_KEY"]
    for key in (uniq, ids[0], ids[365], ids[-1]):
        found = await peer.ok(wire.request(
            RequestCode.QUERY_MESSAGE, topic="RMQ_SYS_TRACE_TOPIC", key=key, maxNum=32,
            beginTimestamp=0, endTimestamp=int(time.time() * 1000) + 60_000))
        [msg] = decode_messages(found.full_body())
        assert msg.uniq_key == uniq and msg.keys == ids
