"""Route derivation (pure) and the route cache against a fake name server."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.client.fakes import FakeBroker, FakeNameServer
from tests.client.rejoin import restart_namesrv, route_both_and_only_b

from tidemq.client.routes import RouteCache
from tidemq.client.topic_route import (
    TopicRoute,
    name_server_order,
    read_route_response,
    with_absent_brokers,
)
from tidemq.codec.bodies import BrokerData, QueueData, TopicRouteData
from tidemq.codec.command import RemotingCommand
from tidemq.errors import BrokerResponseError, ConnectionLost, RemoteProtocolError, ResponseCode
from tidemq.net import RemotingClient
from tidemq.testing import Cluster
from tidemq.types import MessageQueue


def _route(*qds: QueueData, masters: dict[str, bool] | None = None) -> TopicRouteData:
    masters = masters or {}
    bds = []
    for qd in qds:
        addrs = {0: f"10.0.0.{len(bds) + 1}:10911"} if masters.get(qd.broker_name, True) else {
            1: "10.0.0.99:10911"}
        bds.append(BrokerData(cluster="c", broker_name=qd.broker_name, broker_addrs=addrs))
    return TopicRouteData(queue_datas=list(qds), broker_datas=bds)


def _qd(name: str, read: int = 4, write: int = 4, perm: int = 6) -> QueueData:
    return QueueData(broker_name=name, read_queue_nums=read, write_queue_nums=write, perm=perm)


def test_publish_and_subscribe_queues() -> None:
    data = _route(_qd("b", 2, 3), _qd("a", 1, 1))
    route = TopicRoute.build("T", data)
    assert route.publish_queues == (
        MessageQueue("T", "a", 0), MessageQueue("T", "b", 0), MessageQueue("T", "b", 1),
        MessageQueue("T", "b", 2),
    )
    assert route.subscribe_queues == (
        MessageQueue("T", "a", 0), MessageQueue("T", "b", 0), MessageQueue("T", "b", 1),
    )
    assert route.master_address("a") == "10.0.0.2:10911"
    assert route.master_addresses == {"a": "10.0.0.2:10911", "b": "10.0.0.1:10911"}


def test_permissions_and_masters_filter_queues() -> None:
    data = _route(_qd("ro", perm=4), _qd("wo", perm=2), _qd("nomaster"),
                  masters={"nomaster": False})
    route = TopicRoute.build("T", data)
    assert {q.broker_name for q in route.publish_queues} == {"wo"}
    assert {q.broker_name for q in route.subscribe_queues} == {"ro", "nomaster"}
    assert route.master_address("nomaster") is None
    assert route.master_address("unknown") is None


def test_order_topic_conf_overrides_queue_datas() -> None:
    data = _route(_qd("a"))
    data.order_topic_conf = "a:2;b:1"
    route = TopicRoute.build("T", data)
    assert route.publish_queues == (
        MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "b", 0),
    )


def test_default_route_is_clamped() -> None:
    template = _route(_qd("a", 8, 8, perm=7), _qd("b", 2, 2, perm=7))
    route = TopicRoute.build("New", template, from_default=True, default_queue_nums=4)
    assert route.from_default
    assert [q.queue_id for q in route.publish_queues if q.broker_name == "a"] == [0, 1, 2, 3]
    assert [q.queue_id for q in route.publish_queues if q.broker_name == "b"] == [0, 1]
    assert all(q.topic == "New" for q in route.publish_queues)


def test_read_route_response() -> None:
    ok = RemotingCommand(code=0, body=b'{"brokerDatas":[{"brokerAddrs":{0:"h:1"},'
                         b'"brokerName":"a","cluster":"c"}],"queueDatas":[]}')
    assert read_route_response(ok, address="ns").broker_datas[0].master_addr() == "h:1"
    with pytest.raises(BrokerResponseError) as info:
        read_route_response(RemotingCommand(code=17, remark="no"), address="ns")
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    with pytest.raises(RemoteProtocolError):
        read_route_response(RemotingCommand(code=0, body=b"garbage"), address="ns")


def test_name_server_order() -> None:
    assert name_server_order(["a", "b", "c"], 1) == ["b", "c", "a"]


async def test_cache_fetches_once_and_fails_over(namesrv: FakeNameServer,
                                                 brokers: list[FakeBroker]) -> None:
    namesrv.add_topic("T", brokers)
    dead = "127.0.0.1:1"  # nothing listens on port 1
    async with RemotingClient(request_timeout=2, connect_timeout=1) as client:
        cache = RouteCache(client, [dead, namesrv.address])
        first, second = await cache.get("T"), await cache.get("T")
        assert first is second
        assert len(namesrv.log.of(105)) == 1
        assert {q.broker_name for q in first.publish_queues} == {"broker-a", "broker-b"}
        assert cache.master_address("broker-b") == brokers[1].address
        assert cache.master_addresses() == {b.address for b in brokers}
        # the live name server is asked first from now on
        await cache.get("T", refresh=True)
        assert len(namesrv.log.of(105)) == 2


async def test_cache_unknown_topic_and_default(namesrv: FakeNameServer,
                                               brokers: list[FakeBroker]) -> None:
    namesrv.add_topic("TBW102", brokers[:1], queues=8, perm=7)
    async with RemotingClient() as client:
        cache = RouteCache(client, [namesrv.address])
        with pytest.raises(BrokerResponseError) as info:
            await cache.get("Nope")
        assert info.value.code == 17
        route = await cache.get("Nope", allow_default=True)
        assert route.from_default and len(route.publish_queues) == 4
        # a consumer's lookup does not accept the template route
        with pytest.raises(BrokerResponseError):
            await cache.get("Nope")


async def test_cache_keeps_route_when_name_servers_are_gone(namesrv: FakeNameServer,
                                                            brokers: list[FakeBroker]) -> None:
    namesrv.add_topic("T", brokers)
    async with RemotingClient(request_timeout=1, connect_timeout=1) as client:
        cache = RouteCache(client, [namesrv.address])
        route = await cache.get("T")
        await namesrv.close()
        cache.mark_stale("T")
        assert await cache.get("T") is route
        await cache.refresh_all()  # fails, keeps it
        assert cache.cached("T") is route


async def test_no_name_server_reachable() -> None:
    async with RemotingClient(request_timeout=1, connect_timeout=1) as client:
        cache = RouteCache(client, ["127.0.0.1:1"])
        with pytest.raises(ConnectionLost):
            await cache.get("T")


async def test_each_periodic_refresh_fetches_every_cached_route(
        namesrv: FakeNameServer, brokers: list[FakeBroker]) -> None:
    """A route fetched between two periodic refreshes (a send fetches it again after a
    failure) is fetched again at the next one, so that no route is older than one
    interval: the refresh after broker-b is back lists it."""
    namesrv.add_topic("T", brokers)
    now = [100.0]
    async with RemotingClient() as client:
        cache = RouteCache(client, [namesrv.address], refresh_interval=30,
                           clock=lambda: now[0])
        await cache.get("T")  # at a periodic refresh
        now[0] += 20
        namesrv.add_topic("T", brokers[:1])  # broker-b is gone; a failed send asks again
        await cache.get("T", refresh=True)
        namesrv.add_topic("T", brokers)  # broker-b is back
        now[0] += 10  # the next periodic refresh: that route is 10 s old
        await cache.refresh_all()
        route = cache.cached("T")
        assert route is not None and {q.broker_name for q in route.publish_queues} == {
            "broker-a", "broker-b"}


def test_with_absent_brokers_adds_only_what_is_missing() -> None:
    known = _route(_qd("a", 4, 4), _qd("b", 2, 2))
    fresh = _route(_qd("a", 8, 8))
    merged = with_absent_brokers(fresh, known)
    assert [(q.broker_name, q.read_queue_nums) for q in merged.queue_datas] == [("a", 8),
                                                                               ("b", 2)]
    assert sorted(b.broker_name for b in merged.broker_datas) == ["a", "b"]
    assert with_absent_brokers(known, fresh) is known


@pytest.mark.parametrize("window", [60_000, 0], ids=["rejoining", "settled"])
async def test_a_restarted_name_server_does_not_drop_brokers_yet_to_register(
        tmp_path: Path, window: int) -> None:
    """While a restarted name server may still be waiting for brokers, a route lacking
    one the cache knew keeps it (and a topic only it has stays); after that window a
    route is taken as it is."""
    async with Cluster(tmp_path, brokers=2, broker={"register_name_server_period": 600_000}
                       ) as cluster:
        b = cluster.brokers[1]
        await route_both_and_only_b(cluster)
        async with RemotingClient() as client:
            cache = RouteCache(client, [cluster.namesrv_addr])
            both = await cache.get("Both")
            only_b = await cache.get("OnlyB")
            changed: list[str] = []
            cache.add_listener(changed.append)
            assert b.registrar is not None
            await b.registrar.stop()  # broker-b is slow to come back
            await restart_namesrv(cluster, broker_rejoin_window=window)
            async with Peer(cluster.namesrv_addr) as ns:
                await wire.eventually_route(ns, "Both", timeout=30)
            again = await cache.get("Both", refresh=True)
            if window:
                assert again.subscribe_queues == both.subscribe_queues
                assert await cache.get("OnlyB", refresh=True) == only_b
                assert changed == []
            else:
                assert {q.broker_name for q in again.subscribe_queues} == {"broker-a"}
                with pytest.raises(BrokerResponseError):
                    await cache.get("OnlyB", refresh=True)
                assert changed == ["Both"]


async def test_a_send_to_an_unknown_topic_names_it_where_topics_are_not_created(
        tmp_path: Path) -> None:
    """Without autoCreateTopicEnable no broker routes the template TBW102: the refusal of
    a send to a topic nobody created (a typo) names that topic, not the template."""
    from tidemq.client import Producer
    from tidemq.types import Message

    async with Cluster(tmp_path, brokers=1, broker={"auto_create_topic_enable": False}
                       ) as cluster, Producer("typo", cluster.namesrv_addr) as producer:
        with pytest.raises(BrokerResponseError) as info:
            await producer.send(Message("Ordres", b"x"))
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    text = str(info.value)
    assert "No topic route info in name server for the topic: Ordres" in text, text
    assert "nor for TBW102" in text and "autoCreateTopicEnable" in text, text
