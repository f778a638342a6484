"""A registration with a changed DataVersion rebuilds only the topics that can change:
those whose config differs from the one the broker name's queues were last built from,
and those a deletion touched since (tidemq.namesrv.topic_diff, tidemq.namesrv.routes).
The routes are the ones a walk of every topic gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemq.namesrv.routes as routes_module
from tidemq.codec.bodies import TopicConfig
from tidemq.namesrv import RouteInfoManager
from tidemq.namesrv.topic_diff import diff_topics

from .conftest import CLUSTER, register_body, register_header, topic

A, A_SLAVE, B = "10.0.0.1:10911", "10.0.0.3:10911", "10.0.0.2:10911"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The topics whose QueueData a registration builds, in order."""
    seen: list[str] = []
    make = routes_module.QueueData

    def counted(**fields: Any) -> Any:
        seen.append(fields["broker_name"])
        return make(**fields)

    monkeypatch.setattr(routes_module, "QueueData", counted)
    return seen


def many(n: int, *extra: str) -> dict[str, TopicConfig]:
    return {name: topic(name) for name in [f"T{i}" for i in range(n)] + list(extra)}


def test_a_changed_version_rebuilds_only_the_topics_that_changed(built: list[str]) -> None:
    routes = RouteInfoManager()
    header = register_header("broker-a", A)
    routes.register_broker(header, register_body(many(1000), counter=1))
    assert len(built) == 1000
    built.clear()
    result = routes.register_broker(header, register_body(many(1000, "New"), counter=2))
    assert result.data_version_changed and result.topics_updated == ("New",)
    assert len(built) == 1
    built.clear()
    table = many(1000)
    table["T7"] = topic("T7", 2)
    result = routes.register_broker(header, register_body(table, counter=3))
    assert result.topics_updated == ("T7",) and len(built) == 1
    route = routes.pick_route("T7")
    assert route is not None and route.queue_datas[0].read_queue_nums == 2


def test_a_topic_deleted_in_the_name_server_comes_back(built: list[str]) -> None:
    routes = RouteInfoManager()
    header = register_header("broker-a", A)
    routes.register_broker(header, register_body(many(100), counter=1))
    assert routes.delete_topic("T5")
    built.clear()
    result = routes.register_broker(header, register_body(many(100), counter=2))
    assert result.topics_updated == ("T5",) and len(built) == 1
    assert routes.pick_route("T5") is not None


def test_a_wiped_write_permission_is_restored_by_a_changed_table() -> None:
    routes = RouteInfoManager()
    header = register_header("broker-a", A)
    routes.register_broker(header, register_body(many(10), counter=1))
    assert routes.change_write_perm("broker-a", writable=False) == 10
    same = routes.register_broker(header, register_body(many(10), counter=1))
    assert same.topics_updated == ()  # holds until the table changes
    result = routes.register_broker(header, register_body(many(10), counter=2))
    assert len(result.topics_updated) == 10
    assert all(r is not None and r.queue_datas[0].perm == 6
               for r in map(routes.pick_route, many(10)))


def test_the_diff_is_against_the_table_it_was_taken_from() -> None:
    routes = RouteInfoManager()
    header = register_header("broker-a", A)
    routes.register_broker(header, register_body(many(3), counter=1))
    stale = diff_topics(routes.applied_topics("broker-a"), many(3, "X"))
    routes.register_broker(header, register_body(many(3, "Y"), counter=2))
    table = many(3, "X")
    result = routes.register_broker(header, register_body(table, counter=3), diff=stale)
    assert result.topics_updated == ("X",)  # compared again: Y is not in the new table
    assert routes.applied_topics("broker-a") == table


# ---------------------------------------------------------------- the same routes


class EveryTopic(RouteInfoManager):
    """The rules applied by walking every topic of each registration."""

    def register_broker(self, *args: Any, **kwargs: Any) -> Any:
        self._applied.clear()
        return super().register_broker(*args, **kwargs)


NAMES = [f"T{i}" for i in range(5)]
configs = st.builds(
    lambda name, queues, perm, logical: TopicConfig(
        topic_name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm,
        attributes={"logical.queues": "8"} if logical else {}),
    st.sampled_from(NAMES), st.integers(1, 2), st.sampled_from([4, 6, 7]), st.booleans())
tables = st.lists(configs, max_size=5).map(lambda tcs: {tc.topic_name: tc for tc in tcs})
brokers = st.sampled_from([("broker-a", A, 0), ("broker-a", A_SLAVE, 1), ("broker-b", B, 0)])
operations = st.one_of(
    st.tuples(st.just("register"), brokers, tables, st.integers(1, 3), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(NAMES), st.sampled_from([None, CLUSTER])),
    st.tuples(st.just("perm"), st.sampled_from(["broker-a", "broker-b"]), st.booleans()),
    st.tuples(st.just("unregister"), st.sampled_from([A, A_SLAVE, B])),
)


def _apply(routes: RouteInfoManager, op: tuple[Any, ...]) -> object:
    if op[0] == "register":
        _kind, (name, addr, broker_id), table, counter, acting = op
        header = register_header(name, addr, broker_id=broker_id,
                                 enable_acting_master=True if acting else None)
        result = routes.register_broker(header, register_body(table, counter))
        return (result.data_version_changed, result.topics_updated,
                result.topics_removed)
    if op[0] == "delete":
        return routes.delete_topic(op[1], op[2])
    if op[0] == "perm":
        return routes.change_write_perm(op[1], writable=op[2])
    removed = routes.unregister_broker(op[1])
    return None if removed is None else removed.topics_removed


@settings(max_examples=300, deadline=None)
@given(st.lists(operations, max_size=25), st.booleans())
def test_the_routes_are_those_of_a_walk_of_every_topic(
        ops: list[tuple[Any, ...]], delete_with_registration: bool) -> None:
    ours = RouteInfoManager(delete_topic_with_broker_registration=delete_with_registration)
    theirs = EveryTopic(delete_topic_with_broker_registration=delete_with_registration)
    for op in ops:
        assert _apply(ours, op) == _apply(theirs, op)
        assert ours.topics() == theirs.topics()
        for name in NAMES:
            assert ours.pick_route(name) == theirs.pick_route(name)
