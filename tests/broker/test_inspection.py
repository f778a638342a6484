"""The broker's read-only views over real TCP: GET_SUBSCRIPTIONGROUP_CONFIG (352),
QUERY_CONSUME_QUEUE (321), GET_ALL_PRODUCER_INFO (328) and GET_BROKER_HA_STATUS (907) --
their refusals and bounds (the commands reading them are tested in tests/cli)."""

from __future__ import annotations

import json

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.processors.inspection import MAX_CQ_ENTRIES
from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster


async def test_a_group_the_broker_lacks_is_not_found(peer: Peer) -> None:
    resp = await peer(wire.request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, group="NoSuch"))
    assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert "NoSuch" in (resp.remark or "")


async def test_query_consume_queue_bounds(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("CqBounds", 1))
    for i in range(3):
        await peer.ok(wire.send("CqBounds", b"x" * (i + 1)))
    assert cluster.brokers[0].store.wait_dispatched()
    body = json.loads((await peer.ok(wire.request(
        RequestCode.QUERY_CONSUME_QUEUE, topic="CqBounds", queueId=0, index=1,
        count=10 * MAX_CQ_ENTRIES))).body)
    assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, 3)
    assert len(body["queueData"]) == 2  # from 1 to the end, however many were asked
    sizes = [e["physicSize"] for e in body["queueData"]]
    assert sizes[1] == sizes[0] + 1
    past = json.loads((await peer.ok(wire.request(
        RequestCode.QUERY_CONSUME_QUEUE, topic="CqBounds", queueId=0, index=7))).body)
    assert past["queueData"] == []
    bad = await peer(wire.request(RequestCode.QUERY_CONSUME_QUEUE, topic="CqBounds",
                                  queueId="x", index=0))
    assert bad.code == ResponseCode.INVALID_PARAMETER and "queueId" in (bad.remark or "")
    missing = await peer(wire.request(RequestCode.QUERY_CONSUME_QUEUE, topic="CqBounds",
                                      queueId=0))
    assert missing.code == ResponseCode.INVALID_PARAMETER and "index" in (missing.remark or "")


async def test_a_broker_without_replicas_reports_an_empty_ha_status(peer: Peer) -> None:
    info = json.loads((await peer.ok(wire.request(RequestCode.GET_BROKER_HA_STATUS))).body)
    assert info["master"] is True and info["haConnectionInfo"] == []
    assert info["inSyncSlaveNums"] == 0 and info["masterCommitLogMaxOffset"] >= 0
    producers = json.loads((await peer.ok(wire.request(RequestCode.GET_ALL_PRODUCER_INFO))).body)
    assert producers == {"data": {}}
