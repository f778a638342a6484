"""NameServerApp over real TCP on 127.0.0.1, with a RemotingClient as the broker/client."""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from typing import Any

import pytest

from tidemq.codec.bodies import DataVersion, KVTable, decode_body, encode_body
from tidemq.codec.command import TIDEMQ_VERSION, RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.namesrv import BrokerState, NameServerApp, NamesrvConfig
from tidemq.net import Connection, RemotingClient

from .conftest import (
    CLUSTER,
    START_MS,
    FakeClock,
    Removals,
    register_request,
    route_request,
    topic,
)

A, B = "10.0.0.1:10911", "10.0.0.2:10911"
ORDERS_A = {"Orders": topic("Orders"), "OnlyA": topic("OnlyA", 2),
            "TBW102": topic("TBW102", 8, perm=7)}
ORDERS_B = {"Orders": topic("Orders", 8), "TBW102": topic("TBW102", 8, perm=7)}


async def ok(client: RemotingClient, app: NameServerApp, cmd: RemotingCommand) -> RemotingCommand:
    response = await client.request(app.address, cmd)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return response


async def route_json(client: RemotingClient, app: NameServerApp, name: str) -> dict[str, Any]:
    response = await ok(client, app, route_request(name))
    parsed: dict[str, Any] = json.loads(response.full_body())  # standard JSON, no bare keys
    return parsed


async def register_both(client: RemotingClient, app: NameServerApp) -> None:
    await ok(client, app, register_request("broker-a", A, ORDERS_A))
    await ok(client, app, register_request("broker-b", B, ORDERS_B, compressed=True))


def brokers_in(route: dict[str, Any]) -> list[str]:
    return [q["brokerName"] for q in route["queueDatas"]]


async def test_route_of_a_topic_on_two_brokers(app: NameServerApp,
                                               client: RemotingClient) -> None:
    """broker-a registers a JSON body, broker-b a compressed one."""
    response = await client.request(app.address, register_request("broker-a", A, ORDERS_A))
    assert (response.code, response.is_response, response.version) == (0, True, TIDEMQ_VERSION)
    await ok(client, app, register_request("broker-b", B, ORDERS_B, compressed=True))

    body = (await ok(client, app, route_request("Orders"))).full_body()
    assert b'"brokerAddrs":{"0":"10.0.0.1:10911"}' in body  # numeric keys quoted
    assert json.loads(body) == {
        "brokerDatas": [
            {"brokerAddrs": {"0": A}, "brokerName": "broker-a", "cluster": CLUSTER,
             "enableActingMaster": False},
            {"brokerAddrs": {"0": B}, "brokerName": "broker-b", "cluster": CLUSTER,
             "enableActingMaster": False},
        ],
        "filterServerTable": {},
        "queueDatas": [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
             "writeQueueNums": 4},
            {"brokerName": "broker-b", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0,
             "writeQueueNums": 8},
        ],
    }
    assert body == body.replace(b" ", b"")  # compact, keys sorted by the encoder
    assert brokers_in(await route_json(client, app, "OnlyA")) == ["broker-a"]


async def test_old_clients_get_standard_json_too(app: NameServerApp,
                                                 client: RemotingClient) -> None:
    await register_both(client, app)
    request = route_request("Orders")
    request.version = 63  # the C++ client (V3_1_8): upstream would send bare numeric keys
    body = (await ok(client, app, request)).full_body()
    assert b'{"0":' in body and b"{0:" not in body


async def test_tbw102_route(app: NameServerApp, client: RemotingClient) -> None:
    await register_both(client, app)
    route = await route_json(client, app, "TBW102")
    assert [(q["brokerName"], q["perm"], q["writeQueueNums"]) for q in route["queueDatas"]] == [
        ("broker-a", 7, 8), ("broker-b", 7, 8)]


async def test_unknown_topic(app: NameServerApp, client: RemotingClient) -> None:
    await register_both(client, app)
    response = await client.request(app.address, route_request("NoSuchTopic"))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark is not None and "NoSuchTopic" in response.remark
    assert response.full_body() == b""


async def test_cluster_info_and_topic_list(app: NameServerApp, client: RemotingClient) -> None:
    await register_both(client, app)
    request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    info = json.loads((await ok(client, app, request)).full_body())
    assert info["clusterAddrTable"] == {CLUSTER: ["broker-a", "broker-b"]}
    assert info["brokerAddrTable"]["broker-b"] == {
        "brokerAddrs": {"0": B}, "brokerName": "broker-b", "cluster": CLUSTER,
        "enableActingMaster": False}
    request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    topics = json.loads((await ok(client, app, request)).full_body())
    assert topics == {"topicList": ["OnlyA", "Orders", "TBW102"]}


async def test_topic_list_can_be_disabled(clock: FakeClock, client: RemotingClient) -> None:
    config = NamesrvConfig(listen_port=0, bind_address="127.0.0.1", enable_all_topic_list=False)
    async with NameServerApp(config, clock=clock) as app:
        request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        response = await client.request(app.address, request)
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "disable")


async def test_re_register_updates_the_route(app: NameServerApp, client: RemotingClient) -> None:
    await register_both(client, app)
    changed = {"Orders": topic("Orders", 16), "New": topic("New", 1)}
    await ok(client, app, register_request("broker-a", A, changed, counter=2))
    route = await route_json(client, app, "Orders")
    assert [(q["brokerName"], q["readQueueNums"]) for q in route["queueDatas"]] == [
        ("broker-a", 16), ("broker-b", 8)]
    assert brokers_in(await route_json(client, app, "New")) == ["broker-a"]


async def test_slave_registration_learns_its_master(app: NameServerApp,
                                                    client: RemotingClient) -> None:
    await register_both(client, app)
    slave = register_request("broker-a", "10.0.0.3:10911", ORDERS_A, broker_id=1)
    response = await ok(client, app, slave)
    assert response.ext_fields == {"masterAddr": A, "haServerAddr": "10.0.0.1:10912"}
    route = await route_json(client, app, "Orders")
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": A, "1": "10.0.0.3:10911"}


async def test_unregister(app: NameServerApp, client: RemotingClient,
                          removals: Removals) -> None:
    await register_both(client, app)
    ext = {"brokerName": "broker-a", "brokerAddr": A, "clusterName": CLUSTER, "brokerId": "0"}
    await ok(client, app, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext))
    [removed] = await removals.next()
    assert removed.broker_addr == A and removed.topics_removed == ("OnlyA",)
    assert brokers_in(await route_json(client, app, "Orders")) == ["broker-b"]
    response = await client.request(app.address, route_request("OnlyA"))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    # unregistering again is harmless
    await ok(client, app, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext))


async def test_expiry_with_an_injected_clock(app: NameServerApp, clock: FakeClock,
                                             removals: Removals) -> None:
    """No sleeping: the clock moves, one scan runs, the expired broker's socket is closed."""
    async with RemotingClient() as broker_a, RemotingClient() as broker_b:
        await ok(broker_a, app, register_request("broker-a", A, ORDERS_A))
        await ok(broker_b, app, register_request("broker-b", B, ORDERS_B))
        clock.now = START_MS + 60_000
        heartbeat = {"clusterName": CLUSTER, "brokerAddr": B, "brokerName": "broker-b"}
        await ok(broker_b, app, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, heartbeat))
        clock.now = START_MS + 120_000
        assert app.scan_not_active_brokers() == []
        clock.now += 1
        [expired] = app.scan_not_active_brokers()
        assert expired.broker_addr == A and expired.reason is BrokerState.EXPIRED
        assert await removals.next() == [expired]
        conn = broker_a.connections[app.address]
        await asyncio.wait_for(conn.wait_closed(), 5)  # the name server closed it
        assert brokers_in(await route_json(broker_b, app, "Orders")) == ["broker-b"]
        # broker-a comes back: a new connection, the same routes as before
        await ok(broker_a, app, register_request("broker-a", A, ORDERS_A))
        assert brokers_in(await route_json(broker_b, app, "OnlyA")) == ["broker-a"]


async def test_registered_timeout_is_honoured(app: NameServerApp, clock: FakeClock,
                                              client: RemotingClient) -> None:
    cmd = register_request("broker-a", A, ORDERS_A, heartbeat_timeout_millis=10_000)
    await ok(client, app, cmd)
    clock.now += 10_001
    assert [r.broker_addr for r in app.scan_not_active_brokers()] == [A]


async def test_expiry_task_runs_by_itself(clock: FakeClock, client: RemotingClient) -> None:
    config = NamesrvConfig(listen_port=0, bind_address="127.0.0.1",
                           scan_not_active_broker_interval=10)
    async with NameServerApp(config, clock=clock) as app:
        removals = Removals()
        app.on_brokers_removed(removals)
        await ok(client, app, register_request("broker-a", A, ORDERS_A))
        clock.now += 120_001
        [expired] = await removals.next()
        assert expired.reason is BrokerState.EXPIRED


async def test_connection_close_removes_its_brokers(app: NameServerApp,
                                                    removals: Removals) -> None:
    async with RemotingClient() as broker_a, RemotingClient() as other:
        await ok(broker_a, app, register_request("broker-a", A, ORDERS_A))
        await ok(other, app, register_request("broker-b", B, ORDERS_B))
        await broker_a.close()
        [removed] = await removals.next()
        assert removed.broker_addr == A and removed.reason is BrokerState.UNREGISTERED
        assert removed.transition.event.value == "connection_closed"
        assert brokers_in(await route_json(other, app, "Orders")) == ["broker-b"]


async def test_old_connection_closing_keeps_a_re_registered_broker(
    app: NameServerApp, removals: Removals
) -> None:
    closed: asyncio.Queue[Connection] = asyncio.Queue()
    app.server.on_connection_closed(lambda conn, _error: closed.put_nowait(conn))
    async with RemotingClient() as first, RemotingClient() as second:
        await ok(first, app, register_request("broker-a", A, ORDERS_A))
        await ok(second, app, register_request("broker-a", A, ORDERS_A))
        await first.close()
        await asyncio.wait_for(closed.get(), 5)  # the app's own callback ran before ours
        assert removals.events == []
        assert brokers_in(await route_json(second, app, "OnlyA")) == ["broker-a"]


async def test_crc_mismatch(app: NameServerApp, client: RemotingClient) -> None:
    cmd = register_request("broker-a", A, ORDERS_A)
    cmd.ext_fields["bodyCrc32"] = str(int(cmd.ext_fields["bodyCrc32"]) ^ 1)
    response = await client.request(app.address, cmd)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert app.routes.topics() == []
    await ok(client, app, register_request("broker-a", A, ORDERS_A, crc=False))
    assert app.routes.topics() == ["OnlyA", "Orders", "TBW102"]


async def test_register_without_body(app: NameServerApp, client: RemotingClient) -> None:
    cmd = register_request("broker-a", A, {}, crc=False)
    cmd.body = b""
    await ok(client, app, cmd)
    assert app.routes.cluster_info().cluster_addr_table == {CLUSTER: ["broker-a"]}
    assert app.routes.data_version(A) == DataVersion()


async def test_bad_input_is_answered_and_the_server_keeps_serving(
    app: NameServerApp, client: RemotingClient
) -> None:
    async with RemotingClient() as bad:
        cmd = register_request("broker-a", A, ORDERS_A)
        cmd.ext_fields["brokerId"] = "zero"
        response = await bad.request(app.address, cmd)
        assert response.code == ResponseCode.INVALID_PARAMETER
        assert response.remark is not None and "'brokerId'" in response.remark
        assert "REGISTER_BROKER" in response.remark

        response = await bad.request(app.address,
                                     RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC))
        assert response.code == ResponseCode.INVALID_PARAMETER
        assert response.remark is not None and "'topic'" in response.remark

        cmd = register_request("broker-a", A, ORDERS_A, crc=False)
        cmd.body = b'{"topicConfigSerializeWrapper": [1, 2'
        response = await bad.request(app.address, cmd)
        assert response.code == ResponseCode.INVALID_PARAMETER
        assert response.remark is not None and "RegisterBrokerBody" in response.remark

        cmd = register_request("broker-a", A, ORDERS_A, crc=False, compressed=True)
        cmd.body = b"not deflate"
        response = await bad.request(app.address, cmd)
        assert response.code == ResponseCode.INVALID_PARAMETER

        response = await bad.request(app.address, RemotingCommand.request(12345))
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert bad.connections[app.address].is_open  # bad input is not a reason to hang up

    await register_both(client, app)
    assert brokers_in(await route_json(client, app, "Orders")) == ["broker-a", "broker-b"]


async def test_frame_garbage_closes_only_that_connection(app: NameServerApp,
                                                         client: RemotingClient) -> None:
    await register_both(client, app)
    reader, writer = await asyncio.open_connection("127.0.0.1", app.port)
    writer.write(struct.pack(">ii", 0x7FFFFFFF, 0))  # a frame far above the size limit
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the server hung up
    writer.close()
    await writer.wait_closed()
    assert brokers_in(await route_json(client, app, "Orders")) == ["broker-a", "broker-b"]


async def test_query_data_version(app: NameServerApp, client: RemotingClient) -> None:
    await ok(client, app, register_request("broker-a", A, ORDERS_A, counter=5))
    ext = {"brokerName": "broker-a", "brokerAddr": A, "clusterName": CLUSTER, "brokerId": "0"}
    same = DataVersion(timestamp=1_726_700_000_000, counter=5)
    for version, changed in ((same, "false"), (DataVersion(counter=6), "true")):
        cmd = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, dict(ext),
                                      encode_body(version))
        response = await ok(client, app, cmd)
        assert response.ext_fields == {"changed": changed}
        assert decode_body(response.full_body(), DataVersion) == same
    empty = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, dict(ext))
    response = await client.request(app.address, empty)
    assert response.code == ResponseCode.INVALID_PARAMETER


async def test_query_data_version_refreshes_liveness(app: NameServerApp, clock: FakeClock,
                                                     client: RemotingClient) -> None:
    await ok(client, app, register_request("broker-a", A, ORDERS_A))
    clock.now += 100_000
    ext = {"brokerName": "broker-a", "brokerAddr": A, "clusterName": CLUSTER, "brokerId": "0"}
    cmd = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, ext, encode_body(DataVersion()))
    await ok(client, app, cmd)
    clock.now += 100_000
    assert app.scan_not_active_brokers() == []


async def test_delete_topic_in_namesrv(app: NameServerApp, client: RemotingClient) -> None:
    await register_both(client, app)
    await ok(client, app, register_request("broker-c", "10.0.0.9:1", {"Orders": topic("Orders")},
                                           cluster="Other"))
    delete = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                     {"topic": "Orders", "clusterName": CLUSTER})
    await ok(client, app, delete)
    assert brokers_in(await route_json(client, app, "Orders")) == ["broker-c"]
    delete = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Orders"})
    await ok(client, app, delete)
    response = await client.request(app.address, route_request("Orders"))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST


async def test_ordered_topics(clock: FakeClock, client: RemotingClient) -> None:
    config = NamesrvConfig(listen_port=0, bind_address="127.0.0.1", order_message_enable=True)
    async with NameServerApp(config, clock=clock) as app:
        app.routes.set_order_topic_conf("Orders", "broker-a:4")
        response = await ok(client, app, register_request("broker-a", A, ORDERS_A))
        assert decode_body(response.full_body(), KVTable).table == {"Orders": "broker-a:4"}
        route = await route_json(client, app, "Orders")
        assert route["orderTopicConf"] == "broker-a:4"
        assert "orderTopicConf" not in await route_json(client, app, "OnlyA")


async def test_wait_for_service(clock: FakeClock, client: RemotingClient) -> None:
    config = NamesrvConfig(listen_port=0, bind_address="127.0.0.1", need_wait_for_service=True,
                           wait_seconds_for_service=10)
    async with NameServerApp(config, clock=clock) as app:
        await ok(client, app, register_request("broker-a", A, ORDERS_A))
        response = await client.request(app.address, route_request("Orders"))
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR,
                                                    "name server not ready")
        clock.now += 10_000
        assert brokers_in(await route_json(client, app, "Orders")) == ["broker-a"]


async def test_address_of_a_wildcard_bind(clock: FakeClock, client: RemotingClient) -> None:
    config = NamesrvConfig(listen_port=0)
    async with NameServerApp(config, clock=clock) as app:
        assert app.address == f"127.0.0.1:{app.port}" and app.port > 0
        await ok(client, app, register_request("broker-a", A, ORDERS_A))


async def test_routes_say_they_may_be_incomplete_just_after_start(
        app: NameServerApp, clock: FakeClock, client: RemotingClient) -> None:
    """For brokerRejoinWindow after start, routes and TOPIC_NOT_EXIST answers carry
    routeMayBeIncomplete=true; then neither does."""
    await register_both(client, app)
    window = app.config.broker_rejoin_window
    for elapsed, flagged in ((0, True), (window - 1, True), (window, False)):
        clock.now = START_MS + elapsed
        found = await ok(client, app, route_request("Orders"))
        missing = await client.request(app.address, route_request("NoSuchTopic"))
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        for response in (found, missing):
            assert (response.ext_fields.get("routeMayBeIncomplete") == "true") is flagged


async def test_an_old_master_registering_in_an_earlier_state_is_ignored_saying_so(
        app: NameServerApp, client: RemotingClient, caplog: pytest.LogCaptureFixture) -> None:
    """broker-a id 0 at A in state 2 (elected in epoch 2); the master of epoch 1 comes back
    at B and registers id 0 in state 1: answered, ignored at WARNING, routes still A's."""
    await ok(client, app, register_request("broker-a", A, ORDERS_A, state=2))
    with caplog.at_level(logging.WARNING, logger="tidemq.namesrv.app"):
        await ok(client, app, register_request("broker-a", B, ORDERS_A, state=1))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert f"registered from {B} in state 1, but {A} holds that id in a later state" in (
        warned[0])
    route = await route_json(client, app, "Orders")
    assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"0": A}]


async def test_a_broker_taking_a_live_brokers_place_is_warned_of(
        app: NameServerApp, client: RemotingClient, caplog: pytest.LogCaptureFixture) -> None:
    """A second broker-a id 0 from another address: the routes follow it (as upstream's
    name server does), and the name server says at WARNING whose place it took."""
    await ok(client, app, register_request("broker-a", A, ORDERS_A))
    with caplog.at_level(logging.WARNING, logger="tidemq.namesrv.app"):
        await ok(client, app, register_request("broker-a", B, ORDERS_A))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and f"registered from {B}, in the place of {A}" in warned[0], warned
    assert "two brokers claim one name and id" in warned[0], warned
    route = await route_json(client, app, "Orders")
    assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"0": B}]
