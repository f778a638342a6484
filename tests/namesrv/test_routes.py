"""RouteInfoManager: the route table, without sockets (tidemq.namesrv.routes)."""

from __future__ import annotations

import pytest

from tidemq.codec.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    encode_body,
)
from tidemq.namesrv import BrokerState, RouteInfoManager

from .conftest import CLUSTER, START_MS, FakeClock, register_body, register_header, topic

A, B = "10.0.0.1:10911", "10.0.0.2:10911"
A_SLAVE = "10.0.0.3:10911"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def routes(clock: FakeClock) -> RouteInfoManager:
    return RouteInfoManager(clock=clock, default_timeout_ms=120_000)


def two_brokers(routes: RouteInfoManager) -> None:
    routes.register_broker(
        register_header("broker-a", A),
        register_body({"Orders": topic("Orders"), "OnlyA": topic("OnlyA", 2),
                       "TBW102": topic("TBW102", 8, perm=7)}),
        conn_id=1,
    )
    routes.register_broker(
        register_header("broker-b", B),
        register_body({"Orders": topic("Orders", 8), "TBW102": topic("TBW102", 8, perm=7)}),
        conn_id=2,
    )


def test_route_of_a_topic_on_two_brokers(routes: RouteInfoManager) -> None:
    two_brokers(routes)
    route = routes.pick_route("Orders")
    assert route is not None
    assert route.queue_datas == [
        QueueData(broker_name="broker-a", read_queue_nums=4, write_queue_nums=4, perm=6),
        QueueData(broker_name="broker-b", read_queue_nums=8, write_queue_nums=8, perm=6),
    ]
    assert route.broker_datas == [
        BrokerData(cluster=CLUSTER, broker_name="broker-a", broker_addrs={0: A}),
        BrokerData(cluster=CLUSTER, broker_name="broker-b", broker_addrs={0: B}),
    ]
    assert route.filter_server_table == {}
    only_a = routes.pick_route("OnlyA")
    assert only_a is not None
    assert [q.broker_name for q in only_a.queue_datas] == ["broker-a"]
    assert [b.broker_name for b in only_a.broker_datas] == ["broker-a"]
    assert routes.pick_route("Nope") is None


def test_tbw102_is_whatever_registered_it(routes: RouteInfoManager) -> None:
    two_brokers(routes)
    route = routes.pick_route("TBW102")
    assert route is not None
    assert [(q.broker_name, q.perm, q.write_queue_nums) for q in route.queue_datas] == [
        ("broker-a", 7, 8), ("broker-b", 7, 8)]
    routes.register_broker(register_header("broker-b", B),
                           register_body({"Orders": topic("Orders", 8)}, counter=2))
    # without deleteTopicWithBrokerRegistration a topic left out of a registration stays
    assert routes.pick_route("TBW102") == route


def test_results_are_copies(routes: RouteInfoManager) -> None:
    two_brokers(routes)
    route = routes.pick_route("Orders")
    assert route is not None
    route.queue_datas[0].perm = 0
    route.broker_datas[0].broker_addrs[0] = "x:1"
    info = routes.cluster_info()
    info.broker_addr_table["broker-a"].broker_addrs.clear()
    fresh = routes.pick_route("Orders")
    assert fresh is not None
    assert fresh.queue_datas[0].perm == 6 and fresh.broker_datas[0].broker_addrs == {0: A}


def test_cluster_info_and_topic_list(routes: RouteInfoManager) -> None:
    two_brokers(routes)
    routes.register_broker(register_header("broker-c", "10.0.0.9:10911", cluster="Other"),
                           register_body({"C": topic("C")}))
    info = routes.cluster_info()
    assert info.cluster_addr_table == {CLUSTER: ["broker-a", "broker-b"], "Other": ["broker-c"]}
    assert sorted(info.broker_addr_table) == ["broker-a", "broker-b", "broker-c"]
    assert info.broker_addr_table["broker-c"].cluster == "Other"
    assert routes.topic_list().topic_list == ["C", "OnlyA", "Orders", "TBW102"]


def test_register_result_says_what_changed(routes: RouteInfoManager) -> None:
    header = register_header("broker-a", A)
    first = routes.register_broker(header, register_body({"T": topic("T")}, counter=1))
    assert first.transition.joined and first.first_registration and first.data_version_changed
    assert first.topics_updated == ("T",)
    same = routes.register_broker(header, register_body({"T": topic("T")}, counter=1))
    assert not same.transition.joined and not same.first_registration
    assert not same.data_version_changed and same.topics_updated == ()
    # a new topic is added even when the DataVersion did not move (it has no QueueData yet)
    added = routes.register_broker(header, register_body({"T": topic("T", 2), "U": topic("U")}))
    assert added.topics_updated == ("U",)
    route = routes.pick_route("T")
    assert route is not None and route.queue_datas[0].read_queue_nums == 4
    changed = routes.register_broker(header, register_body({"T": topic("T", 2)}, counter=3))
    assert changed.data_version_changed and changed.topics_updated == ("T",)
    route = routes.pick_route("T")
    assert route is not None and route.queue_datas[0].read_queue_nums == 2
    version = routes.data_version(A)
    assert version == DataVersion(timestamp=1_726_700_000_000, counter=3)
    assert not routes.is_data_version_changed(A, version)
    assert routes.is_data_version_changed(A, DataVersion(counter=4))
    assert routes.is_data_version_changed("unknown:1", version)


def test_delete_topic_with_broker_registration(clock: FakeClock) -> None:
    routes = RouteInfoManager(clock=clock, delete_topic_with_broker_registration=True)
    header = register_header("broker-a", A)
    routes.register_broker(header, register_body({"T": topic("T"), "U": topic("U")}))
    result = routes.register_broker(header, register_body({"T": topic("T")}, counter=2))
    assert result.topics_removed == ("U",)
    assert routes.topics() == ["T"]


def test_slave_gets_master_address_and_does_not_define_topics(routes: RouteInfoManager) -> None:
    routes.register_broker(register_header("broker-a", A), register_body({"T": topic("T")}))
    slave = routes.register_broker(register_header("broker-a", A_SLAVE, broker_id=1),
                                   register_body({"T": topic("T", 16), "S": topic("S")}))
    assert slave.master_addr == A and slave.ha_server_addr == "10.0.0.1:10912"
    assert routes.topics() == ["T"]
    route = routes.pick_route("T")
    assert route is not None
    assert route.broker_datas[0].broker_addrs == {0: A, 1: A_SLAVE}
    assert route.queue_datas[0].read_queue_nums == 4
    # the master leaves: the slave keeps the broker name (and its topics) in the routes
    removed = routes.unregister_broker(A)
    assert removed is not None and not removed.broker_name_removed
    route = routes.pick_route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {1: A_SLAVE}


def test_acting_master_prime_slave_defines_topics_read_only(routes: RouteInfoManager) -> None:
    header = register_header("broker-a", A_SLAVE, broker_id=1, enable_acting_master=True)
    routes.register_broker(header, register_body({"T": topic("T")}))
    route = routes.pick_route("T")
    assert route is not None and route.queue_datas[0].perm == 4
    assert route.broker_datas[0].enable_acting_master


def test_one_address_one_id(routes: RouteInfoManager) -> None:
    routes.register_broker(register_header("broker-a", A_SLAVE, broker_id=1), register_body({}))
    routes.register_broker(register_header("broker-a", A_SLAVE), register_body({"T": topic("T")}))
    route = routes.pick_route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: A_SLAVE}


def test_address_reused_by_another_broker_displaces_it(routes: RouteInfoManager) -> None:
    routes.register_broker(register_header("broker-a", A), register_body({"T": topic("T")}))
    result = routes.register_broker(register_header("broker-z", A),
                                    register_body({"Z": topic("Z")}))
    assert [(r.broker_name, r.topics_removed) for r in result.displaced] == [("broker-a", ("T",))]
    assert routes.topics() == ["Z"]
    assert routes.cluster_info().cluster_addr_table == {CLUSTER: ["broker-z"]}


def test_unregister_removes_the_broker_and_its_last_topics(routes: RouteInfoManager) -> None:
    two_brokers(routes)
    removed = routes.unregister_broker(A)
    assert removed is not None
    assert removed.reason is BrokerState.UNREGISTERED
    assert removed.broker_name_removed and removed.topics_removed == ("OnlyA",)
    assert routes.pick_route("OnlyA") is None
    route = routes.pick_route("Orders")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert routes.cluster_info().cluster_addr_table == {CLUSTER: ["broker-b"]}
    assert routes.unregister_broker(A) is None
    routes.unregister_broker(B)
    assert routes.topics() == [] and routes.cluster_info() == ClusterInfo()


def test_expiry_with_the_injected_clock(routes: RouteInfoManager, clock: FakeClock) -> None:
    two_brokers(routes)
    routes.register_broker(register_header("broker-c", "10.0.0.9:1", heartbeat_timeout_millis=10),
                           register_body({"C": topic("C")}))
    clock.now += 10
    assert routes.scan_expired() == []
    clock.now += 1
    [short] = routes.scan_expired()
    assert short.broker_name == "broker-c" and short.reason is BrokerState.EXPIRED
    assert routes.heartbeat(B) is not None  # b is heard from; a is not
    clock.now = START_MS + 120_000
    assert routes.scan_expired() == []
    clock.now += 1
    [expired] = routes.scan_expired()
    assert expired.broker_addr == A and expired.topics_removed == ("OnlyA",)
    assert routes.live_info(B) is not None and routes.live_info(A) is None
    assert routes.heartbeat(A) is None  # too late: it must register again
    liveness = routes.liveness(B)
    assert liveness is not None and liveness.last_update_ms == START_MS + 11


def test_connection_closed_removes_what_it_registered(routes: RouteInfoManager) -> None:
    two_brokers(routes)
    routes.register_broker(register_header("broker-x", "10.0.0.7:1"), register_body({}),
                           conn_id=1)
    assert routes.brokers_on(1) == [A, "10.0.0.7:1"]
    # broker-a re-registers over a new connection: closing the old one no longer drops it
    routes.register_broker(register_header("broker-a", A), register_body({}), conn_id=3)
    removed = routes.connection_closed(1)
    assert [r.broker_addr for r in removed] == ["10.0.0.7:1"]
    assert removed[0].transition.event.value == "connection_closed"
    assert routes.live_info(A) is not None
    assert [r.broker_addr for r in routes.connection_closed(3)] == [A]
    assert routes.connection_closed(3) == []


def test_delete_topic(routes: RouteInfoManager) -> None:
    two_brokers(routes)
    routes.register_broker(register_header("broker-c", "10.0.0.9:1", cluster="Other"),
                           register_body({"Orders": topic("Orders")}))
    assert routes.delete_topic("Orders", CLUSTER)
    route = routes.pick_route("Orders")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-c"]
    assert not routes.delete_topic("Orders", "NoSuchCluster")
    assert routes.delete_topic("Orders")
    assert routes.pick_route("Orders") is None
    assert not routes.delete_topic("Orders")


def test_filter_servers_and_order_conf(routes: RouteInfoManager) -> None:
    wrapper = register_body({"T": topic("T")}).topic_config_serialize_wrapper
    body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper,
                              filter_server_list=["10.0.0.1:3000"])
    routes.register_broker(register_header("broker-a", A), body)
    route = routes.pick_route("T")
    assert route is not None and route.filter_server_table == {A: ["10.0.0.1:3000"]}
    routes.set_order_topic_conf("T", "broker-a:4")
    assert routes.order_topic_conf("T") == "broker-a:4"
    assert routes.order_topic_confs() == {"T": "broker-a:4"}
    routes.set_order_topic_conf("T", None)
    assert routes.order_topic_conf("T") is None


def test_a_registration_in_an_earlier_state_than_the_live_holder_is_ignored(
        routes: RouteInfoManager) -> None:
    """RocketMQ's rule: broker-a id 0 is held at A in state 2 (the master of epoch 2); B
    registers id 0 in state 1 (the master of epoch 1, come back): ignored, its address
    not live, the routes still A's. In state 2 (or later) B takes the place."""
    routes.register_broker(register_header("broker-a", A),
                           register_body({"T": topic("T")}, state=2))
    routes.register_broker(register_header("broker-a", B, broker_id=1),
                           register_body({"T": topic("T")}, state=1))
    ignored = routes.register_broker(register_header("broker-a", B),
                                     register_body({"T": topic("T")}, state=1))
    assert ignored.ignored_for == A
    assert not ignored.transition.joined and ignored.master_addr is None
    assert [r.broker_addr for r in ignored.displaced] == [B]  # its id-1 entry went too
    route = routes.pick_route("T")
    assert route is not None
    assert [b.broker_addrs for b in route.broker_datas] == [{0: A}]
    assert routes.live_info(B) is None
    taken = routes.register_broker(register_header("broker-a", B),
                                   register_body({"T": topic("T")}, state=2))
    assert taken.ignored_for is None and taken.took_place_of == A
    route = routes.pick_route("T")
    assert route is not None
    assert [b.broker_addrs for b in route.broker_datas] == [{0: B}]


def test_route_json_is_standard(routes: RouteInfoManager) -> None:
    routes.register_broker(register_header("broker-a", "10.0.0.5:10911"),
                           register_body({"Orders": topic("Orders")}))
    route = routes.pick_route("Orders")
    assert route is not None
    assert encode_body(route) == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.5:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster","enableActingMaster":false}],'
        b'"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}'
    )


def test_a_second_broker_in_a_live_brokers_place_is_named(routes: RouteInfoManager) -> None:
    """Two brokers of one name and id from two addresses (the second started without a
    brokerName or brokerId of its own): the routes follow the newer, and the result says
    whose place it took while that one is still registered."""
    routes.register_broker(register_header("broker-a", A), register_body({"T": topic("T")}))
    taken = routes.register_broker(register_header("broker-a", B),
                                   register_body({"T": topic("T")}))
    assert taken.took_place_of == A
    again = routes.register_broker(register_header("broker-a", B),
                                   register_body({"T": topic("T")}))
    assert again.took_place_of is None
    routes.unregister_broker(B)  # gone: the place is free again
    assert routes.register_broker(register_header("broker-a", A),
                                  register_body({"T": topic("T")})).took_place_of is None
