"""Administration and lookups over real TCP (remoting.md §2.12, §2.14): topic create,
update and delete, runtime info, QUERY_MESSAGE and VIEW_MESSAGE_BY_ID."""

from __future__ import annotations

import json
import time

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

import tidemq
from tidemq.codec.bodies import KVTable, TopicConfigSerializeWrapper, TopicRouteData, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.properties import decode_properties
from tidemq.testing import Cluster


async def topic_config(peer: Peer, topic: str) -> TopicConfigSerializeWrapper:
    resp = await peer.ok(wire.request(RequestCode.GET_TOPIC_CONFIG, topic=topic))
    return decode_body(resp.body, TopicConfigSerializeWrapper)


async def test_a_created_topic_is_routed_when_its_creation_is_answered(
        peer: Peer, namesrv: Peer) -> None:
    """A producer that sends right after creating a topic finds the topic's own queues:
    the broker answers once the name server has the route, as RocketMQ's does."""
    for queues in (1, 3):  # a creation, then a change
        await peer.ok(wire.create_topic("Routed", queues))
        resp = await namesrv(wire.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Routed"))
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        route = decode_body(resp.body, TopicRouteData)
        assert [q.write_queue_nums for q in route.queue_datas] == [queues]


async def test_create_and_update_topic(cluster: Cluster, peer: Peer, namesrv: Peer) -> None:
    await peer.ok(wire.create_topic("Adm", 4, read=6, attributes="+message.type=NORMAL"))
    tc = (await topic_config(peer, "Adm")).topic_config_table["Adm"]
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (6, 4, 6)
    assert tc.attributes == {"message.type": "NORMAL"}
    route = await wire.eventually_route(namesrv, "Adm")
    assert route.queue_datas[0].read_queue_nums == 6
    # An update keeps attributes it does not mention and can delete one with "-key".
    await peer.ok(wire.create_topic("Adm", 8, attributes="+retention=1d"))
    tc = (await topic_config(peer, "Adm")).topic_config_table["Adm"]
    assert tc.write_queue_nums == 8
    assert tc.attributes == {"message.type": "NORMAL", "retention": "1d"}
    await peer.ok(wire.create_topic("Adm", 8, attributes="-retention"))
    tc = (await topic_config(peer, "Adm")).topic_config_table["Adm"]
    assert tc.attributes == {"message.type": "NORMAL"}
    # Unchanged is still success.
    await peer.ok(wire.create_topic("Adm", 8))
    wrapper = decode_body((await peer.ok(wire.request(RequestCode.GET_ALL_TOPIC_CONFIG))).body,
                          TopicConfigSerializeWrapper)
    assert {"Adm", "TBW102", "broker-a", "DefaultCluster"} <= set(wrapper.topic_config_table)


async def test_batch_cq_queue_type_is_fixed_at_creation(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("Bcq", 2, attributes="+queue.type=BatchCQ"))
    assert cluster.brokers[0].topics.is_batch_cq("Bcq")
    for attrs in ("+queue.type=SimpleCQ", "-queue.type"):
        resp = await peer(wire.create_topic("Bcq", 2, attributes=attrs))
        assert resp.code == ResponseCode.INVALID_PARAMETER
        assert resp.remark and "queue.type" in resp.remark
    await peer.ok(wire.create_topic("Bcq", 4))  # other changes are fine
    await peer.ok(wire.create_topic("Bcq", 4, attributes="+queue.type=BatchCQ"))
    assert cluster.brokers[0].topics.is_batch_cq("Bcq")
    await peer.ok(wire.create_topic("Scq", 2))
    resp = await peer(wire.create_topic("Scq", 2, attributes="+queue.type=BatchCQ"))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert not cluster.brokers[0].topics.is_batch_cq("Scq")


@pytest.mark.parametrize(("topic", "queues", "attrs"), [
    ("bad name", 4, None),
    ("TBW102x" * 30, 4, None),
    ("SCHEDULE_TOPIC_XXXX", 4, None),
    ("Ok", 0, None),
    ("Ok", 1025, None),
    ("Ok", 4, "queue.type=BatchCQ"),
    ("Ok", 4, "+queue.type=Nope"),
    ("Ok", 4, "+a=1,+a=2"),
])
async def test_bad_topic_creation_is_invalid_parameter(cluster: Cluster, peer: Peer, topic: str,
                                                       queues: int, attrs: str | None) -> None:
    resp = await peer(wire.create_topic(topic, queues, attributes=attrs))
    assert resp.code == ResponseCode.INVALID_PARAMETER and resp.remark
    assert cluster.brokers[0].topics.get("Ok") is None


async def test_bad_topic_filter_type_is_invalid_parameter(peer: Peer) -> None:
    cmd = wire.create_topic("Ok", 1)
    cmd.ext_fields["topicFilterType"] = "NOPE"
    assert (await peer(cmd)).code == ResponseCode.INVALID_PARAMETER


async def test_delete_topic(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("Del", 1))
    await peer.ok(wire.send("Del"))
    await wire.dispatched(cluster.brokers[0])
    await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g",
                               topic="Del", queueId=0, commitOffset=1))
    assert (await peer(wire.pull("Del", 0, 0, group="g"))).code == ResponseCode.SUCCESS
    stats = cluster.brokers[0].ctx.stats
    assert "Del" in stats.topic_put and "Del@g" in stats.topic_group_get
    await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="Del"))
    assert cluster.brokers[0].topics.get("Del") is None
    # Its meters go with it: topic churn does not grow the broker's stats.
    assert "Del" not in stats.topic_put and "Del@g" not in stats.topic_group_get
    assert (await peer(wire.pull("Del", 0, 0))).code == ResponseCode.TOPIC_NOT_EXIST
    assert await peer.max_offset("Del") == 0
    resp = await peer(wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g",
                                   topic="Del", queueId=0))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    assert (await peer(wire.request(RequestCode.GET_TOPIC_CONFIG, topic="Del"))
            ).code == ResponseCode.TOPIC_NOT_EXIST
    await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="Del"))  # idempotent
    # Re-created, it starts from offset 0 again.
    resp = await peer.ok(wire.send("Del", queue_id=0))
    assert resp.ext_fields["queueOffset"] == "0"


async def test_delete_topic_in_namesrv(cluster: Cluster, peer: Peer, namesrv: Peer) -> None:
    await peer.ok(wire.create_topic("Gone", 1))
    await wire.eventually_route(namesrv, "Gone")
    await namesrv.ok(wire.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="Gone"))
    resp = await namesrv(wire.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Gone"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST


async def test_runtime_info_is_a_kv_table(cluster: Cluster, peer: Peer) -> None:
    for _ in range(3):
        await peer.ok(wire.send("Rt"))
    resp = await peer.ok(wire.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = decode_body(resp.body, KVTable).table
    assert json.loads(bytes(resp.body))["table"] == table
    assert table["brokerName"] == "broker-a"
    assert table["brokerAddr"] == cluster.brokers[0].broker_addr
    assert table["msgPutTotalTodayNow"] == "3"
    assert table["storeStatus"] == "RUNNING"
    assert int(table["commitLogMaxOffset"]) > 0
    assert all(isinstance(v, str) for v in table.values())


async def test_runtime_info_reports_the_oldest_message_time_and_the_package_version(
        cluster: Cluster, peer: Peer) -> None:
    async def table() -> dict[str, str]:
        resp = await peer.ok(wire.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        return decode_body(resp.body, KVTable).table

    empty = await table()
    assert empty["earliestMessageTimeStamp"] == "-1"  # nothing stored yet
    assert empty["brokerVersionDesc"].startswith(f"TideMQ {tidemq.__version__} ")
    first = await peer.ok(wire.send("Old", b"first"))
    _, phys = decode_offset_msg_id(first.ext_fields["msgId"])
    resp = await peer.ok(wire.request(RequestCode.VIEW_MESSAGE_BY_ID, offset=phys))
    [msg] = decode_messages(resp.full_body())
    await peer.ok(wire.send("Old", b"second"))
    assert (await table())["earliestMessageTimeStamp"] == str(msg.store_timestamp)


async def test_topic_and_consume_stats(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("St", 2))
    for _ in range(3):
        await peer.ok(wire.send("St", queue_id=1))
    await wire.dispatched(cluster.brokers[0])
    await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="sg",
                               topic="St", queueId=1, commitOffset=1))
    resp = await peer.ok(wire.request(RequestCode.GET_TOPIC_STATS_INFO, topic="St"))
    rows = json.loads(bytes(resp.body))["offsetTable"]
    assert [(r["queueId"], r["maxOffset"]) for r in rows] == [(0, 0), (1, 3)]
    resp = await peer.ok(wire.request(RequestCode.GET_CONSUME_STATS, consumerGroup="sg"))
    stats = json.loads(bytes(resp.body))
    assert [(r["queueId"], r["lag"]) for r in stats["offsetTable"]] == [(0, 0), (1, 2)]


async def _sent(peer: Peer, cluster: Cluster, topic: str, keys: str) -> tuple[str, str]:
    text = wire.props(tags="T", keys=keys)
    resp = await peer.ok(wire.send(topic, keys.encode(), properties=text))
    await wire.dispatched(cluster.brokers[0])
    return decode_properties(text.encode())["UNIQ_KEY"], resp.ext_fields["msgId"]


def query(topic: str, key: str, *, unique: bool = False, max_num: int = 32) -> RemotingCommand:
    extra = {"_UNIQUE_KEY_QUERY": "true"} if unique else {}
    return wire.request(RequestCode.QUERY_MESSAGE, topic=topic, key=key, maxNum=max_num,
                        beginTimestamp=0, endTimestamp=int(time.time() * 1000) + 60_000,
                        **extra)


async def test_query_message_by_uniq_key_and_keys(cluster: Cluster, peer: Peer) -> None:
    uniq, _ = await _sent(peer, cluster, "Qm", "order-1 shared")
    await _sent(peer, cluster, "Qm", "order-2 shared")
    resp = await peer.ok(query("Qm", uniq, unique=True))
    [msg] = decode_messages(resp.full_body())
    assert msg.uniq_key == uniq and msg.body == b"order-1 shared"
    assert int(resp.ext_fields["indexLastUpdatePhyoffset"]) > 0
    assert "indexLastUpdateTimestamp" in resp.ext_fields
    msgs = decode_messages((await peer.ok(query("Qm", "shared"))).full_body())
    assert sorted(m.body for m in msgs) == [b"order-1 shared", b"order-2 shared"]
    msgs = decode_messages((await peer.ok(query("Qm", "order-2"))).full_body())
    assert [m.body for m in msgs] == [b"order-2 shared"]
    assert len(decode_messages((await peer.ok(query("Qm", "shared", max_num=1))).full_body())
               ) == 1
    for cmd in (query("Qm", "absent"), query("Other", "shared")):
        resp = await peer(cmd)
        assert resp.code == ResponseCode.QUERY_NOT_FOUND and resp.remark


async def test_view_message_by_decoded_offset_msg_id(cluster: Cluster, peer: Peer) -> None:
    uniq, msg_id = await _sent(peer, cluster, "Vm", "k")
    host, phys = decode_offset_msg_id(msg_id)
    async with Peer(str(host)) as at_id:  # the id names the broker to ask
        resp = await at_id.ok(wire.request(RequestCode.VIEW_MESSAGE_BY_ID, offset=phys,
                                           topic="Vm"))
    [msg] = decode_messages(resp.full_body())
    assert (msg.uniq_key, msg.commit_log_offset, msg.topic) == (uniq, phys, "Vm")


@pytest.mark.parametrize("offset", [-1, 1, 10**12, 2**63 - 1])
async def test_view_message_at_a_bad_offset_is_system_error(cluster: Cluster, peer: Peer,
                                                            offset: int) -> None:
    await _sent(peer, cluster, "Vm", "k")
    resp = await peer(wire.request(RequestCode.VIEW_MESSAGE_BY_ID, offset=offset))
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark


@pytest.mark.parametrize("code", [RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC, 9999])
async def test_unsupported_codes_are_answered_3(peer: Peer, code: int) -> None:
    resp = await peer(wire.request(code, topic="X"))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert resp.remark == f" request type {code} not supported"


async def test_view_message_only_at_record_starts(cluster: Cluster, peer: Peer) -> None:
    """Every offset inside the first records is refused; only record starts are found."""
    starts = set()
    for i in range(3):
        _, msg_id = await _sent(peer, cluster, "Vm", f"k{i}")
        starts.add(decode_offset_msg_id(msg_id)[1])
    for offset in range(max(starts) + 120):
        resp = await peer(wire.request(RequestCode.VIEW_MESSAGE_BY_ID, offset=offset))
        if offset in starts:
            [msg] = decode_messages(resp.full_body())
            assert msg.commit_log_offset == offset
        else:
            assert resp.code == ResponseCode.SYSTEM_ERROR, offset
