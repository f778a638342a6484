"""Broker restart and stop against a live name server: what survives a restart, and what
the name server routes once a broker is gone."""

from __future__ import annotations

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster


async def test_restart_keeps_topics_offsets_and_messages(cluster: Cluster, peer: Peer,
                                                         namesrv: Peer) -> None:
    await peer.ok(wire.create_topic("Keep", 2, attributes="+queue.type=BatchCQ"))
    for i in range(5):
        await peer.ok(wire.send("Keep", f"m{i}".encode(), queue_id=1,
                                properties=wire.props(tags=f"t{i}")))
    await peer.ok(wire.send("AutoMade"))
    await wire.dispatched(cluster.brokers[0])  # an offset is refused beyond what is visible
    await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="kg",
                               topic="Keep", queueId=1, commitOffset=3))
    await peer.ok(wire.heartbeat("c1", consumer_groups={"kg": {"Keep": "*"}}))
    await peer.close()

    broker = await cluster.restart_broker(0)
    assert broker.store.recovery_report is not None
    async with Peer(broker.broker_addr) as again:
        tc = broker.topics.get("Keep")
        assert tc is not None and tc.write_queue_nums == 2
        assert broker.topics.is_batch_cq("Keep")
        assert broker.topics.get("AutoMade") is not None
        assert broker.topics.get("%RETRY%kg") is not None
        assert "kg" in broker.subscription_groups.groups
        resp = await again.ok(wire.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                           consumerGroup="kg", topic="Keep", queueId=1))
        assert resp.ext_fields["offset"] == "3"
        msgs = await again.messages("Keep", 1, 0)
        assert [m.body for m in msgs] == [f"m{i}".encode() for i in range(5)]
        assert [m.tags for m in msgs] == [f"t{i}" for i in range(5)]
        # New messages continue the queue's offsets.
        resp = await again.ok(wire.send("Keep", queue_id=1))
        assert resp.ext_fields["queueOffset"] == "5"
        route = await wire.eventually_route(namesrv, "Keep")
        assert route.broker_datas[0].broker_addrs[0] == broker.broker_addr


async def test_stopped_broker_disappears_from_routes(cluster: Cluster, namesrv: Peer) -> None:
    a, b = cluster.brokers
    async with Peer(a.broker_addr) as pa, Peer(b.broker_addr) as pb:
        await pa.ok(wire.create_topic("Both", 2))
        await pb.ok(wire.create_topic("Both", 2))
        await pb.ok(wire.create_topic("OnlyB", 2))
    await wire.eventually_route(namesrv, "Both", lambda r: len(r.queue_datas) == 2)
    await wire.eventually_route(namesrv, "OnlyB")

    await b.stop()
    resp = await namesrv(wire.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="OnlyB"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    route = await wire.eventually_route(namesrv, "Both")
    assert [q.broker_name for q in route.queue_datas] == ["broker-a"]
    assert [d.broker_name for d in route.broker_datas] == ["broker-a"]
    cluster_info = await namesrv.ok(wire.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert b"broker-b" not in cluster_info.body
