"""What a route cache decides (no I/O): the name-server ring, the route table and one
route fetch, without a port."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.route_table import NameServerRing, RouteFetch, RouteTable
from tidemq.client.topic_route import TopicRoute
from tidemq.codec.bodies import BrokerData, QueueData, TopicRouteData, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ROUTE_MAY_BE_INCOMPLETE
from tidemq.errors import BrokerResponseError, ConnectionLost, RequestTimeout, ResponseCode
from tidemq.types import MessageQueue


def _data(*brokers: str, queues: int = 4) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData(broker_name=b, read_queue_nums=queues,
                               write_queue_nums=queues, perm=6) for b in brokers],
        broker_datas=[BrokerData(cluster="c", broker_name=b, broker_addrs={0: f"{b}:10911"})
                      for b in brokers])


def _answer(data: TopicRouteData, *, incomplete: bool = False) -> RemotingCommand:
    ext = {ROUTE_MAY_BE_INCOMPLETE: "true"} if incomplete else {}
    return RemotingCommand(code=ResponseCode.SUCCESS, body=encode_body(data), ext_fields=ext)


def _not_exist(*, incomplete: bool = False) -> RemotingCommand:
    ext = {ROUTE_MAY_BE_INCOMPLETE: "true"} if incomplete else {}
    return RemotingCommand(code=ResponseCode.TOPIC_NOT_EXIST, remark="no topic",
                           ext_fields=ext)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------- the ring


@given(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=6, unique=True),
       st.data())
def test_ring_asks_each_once_beginning_with_the_last_that_answered(
        addrs: list[str], data: st.DataObject) -> None:
    ring = NameServerRing(addrs)
    assert ring.order() == addrs
    winner = data.draw(st.sampled_from(addrs))
    ring.answered(winner)
    order = ring.order()
    assert order[0] == winner
    assert sorted(order) == sorted(addrs)
    i = addrs.index(winner)
    assert order == addrs[i:] + addrs[:i]


def test_ring_needs_a_server_and_raises_the_last_failure() -> None:
    with pytest.raises(ValueError, match="at least one name server"):
        NameServerRing([])
    ring = NameServerRing(["a", "b"])
    last = None
    for addr in ring.order():
        last = ring.failed(addr, ConnectionLost(addr))
    err = ring.exhausted(last)
    assert isinstance(err, ConnectionLost) and err.address == "b"


# ---------------------------------------------------------------- the table


def test_lookup_uses_a_cached_route_until_stale_or_refreshed() -> None:
    table = RouteTable(clock=_Clock())
    assert table.lookup("T").route is None and table.lookup("T").fallback is None
    route = TopicRoute.build("T", _data("a"))
    table.store("T", route)
    assert table.lookup("T").route is route
    forced = table.lookup("T", refresh=True)
    assert forced.route is None and forced.fallback is route
    table.mark_stale("T")
    stale = table.lookup("T")
    assert stale.route is None and stale.fallback is route
    table.store("T", route)
    assert table.lookup("T").route is route


def test_a_send_does_not_take_a_cached_route_without_a_master() -> None:
    """A consumer reads a masterless group from its replicas and keeps the route; a send
    (``allow_default``) asks again, keeping the route as its fallback."""
    table = RouteTable(clock=_Clock())
    data = _data("a")
    data.broker_datas[0].broker_addrs = {1: "a:10921"}
    route = TopicRoute.build("T", data)
    assert not route.publish_queues and route.subscribe_queues
    table.store("T", route)
    assert table.lookup("T").route is route and table.serving("T") is route
    send = table.lookup("T", allow_default=True)
    assert send.route is None and send.fallback is route
    assert table.serving("T", allow_default=True) is None
    with_master = TopicRoute.build("T", _data("a"))
    table.store("T", with_master)
    assert table.lookup("T", allow_default=True).route is with_master
    assert table.serving("T", allow_default=True) is with_master


def test_lookup_refetches_after_max_age() -> None:
    clock = _Clock()
    table = RouteTable(clock=clock, max_age=30.0)
    route = TopicRoute.build("T", _data("a"))
    table.store("T", route)
    clock.now += 29.9
    assert table.lookup("T").route is route
    clock.now += 0.1
    assert table.lookup("T").route is None
    assert table.lookup("T").fallback is route


def test_a_template_route_serves_only_callers_that_may_auto_create() -> None:
    table = RouteTable(clock=_Clock())
    template = TopicRoute.build("T", _data("a"), from_default=True, default_queue_nums=2)
    table.store("T", template)
    assert table.lookup("T", allow_default=True).route is template
    assert table.lookup("T").route is None
    assert table.known("T") is None
    assert table.cached("T") is template


@given(st.lists(st.sampled_from(["store", "template", "stale", "tick"]), max_size=12),
       st.booleans())
def test_serving_is_what_a_lookup_without_refresh_serves(steps: list[str],
                                                         allow_default: bool) -> None:
    clock = _Clock()
    table = RouteTable(clock=clock, max_age=30.0)
    for step in steps:
        if step == "store":
            table.store("T", TopicRoute.build("T", _data("a")))
        elif step == "template":
            table.store("T", TopicRoute.build("T", _data("a"), from_default=True,
                                              default_queue_nums=2))
        elif step == "stale":
            table.mark_stale("T")
        else:
            clock.now += 20.0
        assert table.serving("T", allow_default=allow_default) is table.lookup(
            "T", allow_default=allow_default).route


def test_kept_returns_the_fallback_only_when_no_name_server_answered() -> None:
    table = RouteTable(clock=_Clock())
    route = TopicRoute.build("T", _data("a"))
    lost = ConnectionLost("ns:9876")
    assert table.kept("T", lost, route) is route
    assert table.kept("T", RequestTimeout("ns", 105, 1, 3000), route) is route
    with pytest.raises(ConnectionLost):
        table.kept("T", lost, None)
    refused = BrokerResponseError("no", code=ResponseCode.SYSTEM_ERROR, address="ns")
    with pytest.raises(BrokerResponseError):
        table.kept("T", refused, route)


def test_store_says_whether_readable_queues_or_masters_changed() -> None:
    table = RouteTable(clock=_Clock())
    assert not table.store("T", TopicRoute.build("T", _data("a")))
    assert not table.store("T", TopicRoute.build("T", _data("a")))
    assert table.store("T", TopicRoute.build("T", _data("a", "b")))
    assert table.store("T", TopicRoute.build("T", _data("a", "b", queues=2)))


def test_forget_drops_only_that_topic() -> None:
    table = RouteTable(clock=_Clock())
    for topic in ("old", "young", "stale"):
        table.store(topic, TopicRoute.build(topic, _data("a")))
    table.mark_stale("stale")
    table.forget("old")
    assert table.topics == ["young", "stale"]


# ---------------------------------------------------------------- one fetch


def _fetch(*, allow_default: bool = False, known: TopicRoute | None = None) -> RouteFetch:
    return RouteFetch("T", allow_default=allow_default, default_topic="TBW102",
                      default_queue_nums=2, known=known)


def _asked(cmd: RemotingCommand) -> str:
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    return cmd.ext_fields["topic"]


def test_fetch_builds_the_route_of_the_answer() -> None:
    fetch = _fetch()
    assert _asked(fetch.request()) == "T"
    route = fetch.answer(_answer(_data("a", "b")), "ns")
    assert route is not None and not route.from_default
    assert route.publish_queues[0] == MessageQueue("T", "a", 0)
    assert len(route.publish_queues) == 8


def test_fetch_of_an_unknown_topic_raises_unless_it_may_auto_create() -> None:
    with pytest.raises(BrokerResponseError) as info:
        _fetch().answer(_not_exist(), "ns")
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    fetch = _fetch(allow_default=True)
    assert fetch.answer(_not_exist(), "ns") is None
    assert _asked(fetch.request()) == "TBW102"
    route = fetch.answer(_answer(_data("a", queues=8)), "ns")
    assert route is not None and route.from_default and route.topic == "T"
    assert route.publish_queues == (MessageQueue("T", "a", 0), MessageQueue("T", "a", 1))


def test_fetch_of_the_template_raises_its_refusal() -> None:
    fetch = _fetch(allow_default=True)
    assert fetch.answer(_not_exist(), "ns") is None
    with pytest.raises(BrokerResponseError) as info:
        fetch.answer(_not_exist(), "ns")
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    assert "for the topic: T; nor for TBW102" in str(info.value), info.value


def test_a_just_started_name_server_does_not_take_brokers_away() -> None:
    known = TopicRoute.build("T", _data("a", "b"))
    kept = _fetch(allow_default=True, known=known).answer(_not_exist(incomplete=True), "ns")
    assert kept is known
    merged = _fetch(known=known).answer(_answer(_data("b"), incomplete=True), "ns")
    assert merged is not None and set(merged.master_addresses) == {"a", "b"}
    # A complete answer is taken as it is.
    shrunk = _fetch(known=known).answer(_answer(_data("b")), "ns")
    assert shrunk is not None and set(shrunk.master_addresses) == {"b"}
    # Without a known route, an incomplete answer is all there is.
    alone = _fetch().answer(_answer(_data("b"), incomplete=True), "ns")
    assert alone is not None and set(alone.master_addresses) == {"b"}
