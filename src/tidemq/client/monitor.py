"""Cluster views for dashboards, over an :class:`~tidemq.client.admin.AdminClient`.

The web console draws its pages from these: each call asks every master broker (or the
one given) and merges the answers into plain values (frozen dataclasses, dicts). Inside
a :func:`~tidemq.client.request_deadline.request_deadline` scope, the views that read
merge the brokers that answered and leave out those the scope names as unanswered;
outside one (and for :func:`reset_offset`, a change), one failure fails the call. The
broker statistics bodies are TideMQ's standard-JSON lists (docs/protocol.md).

===============================  ==========================================================
function                         requests
===============================  ==========================================================
:func:`topic_configs`            21 GET_ALL_TOPIC_CONFIG on one broker (configs, attributes,
                                 static-topic mapping details)
:func:`topic_stats`              202 GET_TOPIC_STATS_INFO on every master of the topic
:func:`consume_stats`            208 GET_CONSUME_STATS on every master
:func:`subscription_groups`      201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG on every master
:func:`committed_groups`         43 GET_ALL_CONSUMER_OFFSET on every master: the groups
                                 with stored offsets, configured or not
:func:`topic_consumers`          300 QUERY_TOPIC_CONSUME_BY_WHO on the given brokers
:func:`topic_clusters`           106 GET_ROUTEINFO_BY_TOPIC of every topic, then 300 on
                                 the masters of each (mqadmin's ``topicList -c``)
:func:`consumer_connections`     203 GET_CONSUMER_CONNECTION_LIST on every master
:func:`reset_offset`             222 INVOKE_BROKER_TO_RESET_OFFSET on every master of the
                                 topic (3 REQUEST_CODE_NOT_SUPPORTED from a broker that
                                 lacks it: :class:`ResetNotSupportedError`)
===============================  ==========================================================
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from tidemq.client import offsets as ofs
from tidemq.client import request_deadline
from tidemq.client.admin import AdminClient
from tidemq.client.errors import ClientError
from tidemq.codec import fastjson
from tidemq.codec.bodies import TopicConfigSerializeWrapper, TopicRouteData, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, TideMQError, error_for_code

__all__ = [
    "ConsumeStats",
    "QueueLag",
    "QueueStats",
    "ResetNotSupportedError",
    "TopicStats",
    "committed_groups",
    "consume_stats",
    "consumer_connections",
    "reset_offset",
    "subscription_groups",
    "topic_clusters",
    "topic_configs",
    "topic_consumers",
    "topic_stats",
]


class ResetNotSupportedError(ClientError):
    """A broker answered INVOKE_BROKER_TO_RESET_OFFSET with REQUEST_CODE_NOT_SUPPORTED."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__(f"broker {address} does not support resetting offsets "
                         "(INVOKE_BROKER_TO_RESET_OFFSET, request code 222)")


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue of :func:`topic_stats`; ``last_update_time`` is epoch ms (0: empty)."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_time: int


@dataclasses.dataclass(frozen=True, slots=True)
class TopicStats:
    topic: str
    queues: list[QueueStats]
    put_tps: float

    @property
    def messages(self) -> int:
        """Messages still stored (max - min over the queues)."""
        return sum(q.max_offset - q.min_offset for q in self.queues)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueLag:
    """One queue of :func:`consume_stats`: broker max offset, the group's committed one."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeStats:
    group: str
    queues: list[QueueLag]
    consume_tps: float

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    @property
    def topics(self) -> list[str]:
        return sorted({q.topic for q in self.queues})


async def _gather(calls: Sequence[Any], *, partial: bool = True) -> list[Any]:
    """Every call's result; a failure is raised, unless ``partial`` and the open
    :func:`~tidemq.client.request_deadline.request_deadline` names its broker as
    unanswered: then the view is merged from the brokers that answered."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    if partial:
        return request_deadline.answers(results)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)


async def _call(admin: AdminClient, addr: str, code: int,
                ext: dict[str, str] | None = None) -> RemotingCommand:
    response = await admin.instance.request(addr, RemotingCommand.request(code, ext or {}))
    ofs.check_success(response, address=addr)
    return response


async def _addresses(admin: AdminClient, addresses: Sequence[str] | None) -> list[str]:
    """``addresses``, or every master's."""
    if addresses is not None:
        return list(addresses)
    return sorted((await admin.masters()).values())


def _masters_of(route: TopicRouteData) -> list[str]:
    return sorted({a for b in route.broker_datas if (a := b.master_addr()) is not None})


def _json(response: RemotingCommand, what: str) -> Any:
    try:
        return fastjson.loads(bytes(response.full_body()) or b"{}")
    except ValueError as exc:
        raise error_for_code(ResponseCode.SYSTEM_ERROR, f"{what}: body is not JSON: {exc}"
                             ) from None


async def topic_configs(admin: AdminClient, address: str) -> TopicConfigSerializeWrapper:
    """Every topic config of broker ``address``, with attributes and mapping details."""
    response = await _call(admin, address, RequestCode.GET_ALL_TOPIC_CONFIG)
    return decode_body(response.full_body(), TopicConfigSerializeWrapper)


async def topic_stats(admin: AdminClient, topic: str, *,
                      addresses: Sequence[str] | None = None) -> TopicStats:
    """Offsets of every queue of ``topic`` on every master of its route (or on the
    brokers at ``addresses``: a topic just created may not be routed yet), and its put
    TPS."""
    addrs = list(addresses) if addresses is not None else _masters_of(
        await admin.topic_route(topic))
    bodies = await _gather([_call(admin, a, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
                            for a in addrs])
    queues: list[QueueStats] = []
    tps = 0.0
    for response in bodies:
        body = _json(response, "GET_TOPIC_STATS_INFO")
        tps += float(body.get("putTps", 0.0))
        queues.extend(QueueStats(row["brokerName"], int(row["queueId"]), int(row["minOffset"]),
                                 int(row["maxOffset"]), int(row.get("lastUpdateTimestamp", 0)))
                      for row in body.get("offsetTable", []))
    queues.sort(key=lambda q: (q.broker_name, q.queue_id))
    return TopicStats(topic, queues, tps)


async def consume_stats(admin: AdminClient, group: str, topic: str | None = None, *,
                        addresses: Sequence[str] | None = None) -> ConsumeStats:
    """Per queue: broker max offset vs ``group``'s committed offset, on every master (or
    the brokers at ``addresses``: those holding ``topic``)."""
    ext = {"consumerGroup": group}
    if topic:
        ext["topic"] = topic
    addrs = await _addresses(admin, addresses)
    bodies = await _gather([_call(admin, a, RequestCode.GET_CONSUME_STATS, ext) for a in addrs])
    queues: list[QueueLag] = []
    tps = 0.0
    for response in bodies:
        body = _json(response, "GET_CONSUME_STATS")
        tps += float(body.get("consumeTps", 0.0))
        queues.extend(QueueLag(row["topic"], row["brokerName"], int(row["queueId"]),
                               int(row["brokerOffset"]), int(row["consumerOffset"]),
                               int(row.get("lastTimestamp", 0)))
                      for row in body.get("offsetTable", []))
    queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
    return ConsumeStats(group, queues, tps)


async def subscription_groups(admin: AdminClient, *, addresses: Sequence[str] | None = None
                              ) -> dict[str, dict[str, Any]]:
    """Group name -> subscription group config, merged over every master (or the
    brokers at ``addresses``)."""
    addrs = await _addresses(admin, addresses)
    bodies = await _gather([_call(admin, a, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
                            for a in addrs])
    out: dict[str, dict[str, Any]] = {}
    for response in bodies:
        table = _json(response, "GET_ALL_SUBSCRIPTIONGROUP_CONFIG").get(
            "subscriptionGroupTable", {})
        for name, cfg in table.items():
            out.setdefault(name, cfg if isinstance(cfg, dict) else {})
    return dict(sorted(out.items()))


async def committed_groups(admin: AdminClient, *, addresses: Sequence[str] | None = None
                           ) -> dict[str, list[str]]:
    """Group name -> the topics it has stored offsets of, merged over every master (or
    the brokers at ``addresses``).

    A group that commits offsets without ever sending a heartbeat (a Spark query, any
    stateless pull reader) has no subscription-group config, so only the brokers' offset
    tables (``topic@group`` keys) know it. Retry topics are left out of the topics; a
    group whose only offsets are on its retry topic is still listed."""
    addrs = await _addresses(admin, addresses)
    bodies = await _gather([_call(admin, a, RequestCode.GET_ALL_CONSUMER_OFFSET)
                            for a in addrs])
    out: dict[str, set[str]] = {}
    for response in bodies:
        table = _json(response, "GET_ALL_CONSUMER_OFFSET").get("offsetTable", {})
        for key in table if isinstance(table, dict) else ():
            topic, sep, group = str(key).partition("@")
            if not sep or not group:
                continue
            topics = out.setdefault(group, set())
            if not topic.startswith("%RETRY%"):
                topics.add(topic)
    return {g: sorted(t) for g, t in sorted(out.items())}


async def topic_consumers(admin: AdminClient, topic: str, addresses: Sequence[str]
                          ) -> list[str]:
    """The groups that consume ``topic`` on the brokers at ``addresses``: those with
    stored offsets of it and those online with a subscription to it."""
    bodies = await _gather([_call(admin, a, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                                  {"topic": topic}) for a in addresses])
    groups: set[str] = set()
    for response in bodies:
        found = _json(response, "QUERY_TOPIC_CONSUME_BY_WHO").get("groupList", [])
        groups.update(str(g) for g in found if isinstance(found, list))
    return sorted(groups)


#: Topics :func:`topic_clusters` asks about at once.
_TOPICS_AT_ONCE = 16


async def topic_clusters(admin: AdminClient, topics: Sequence[str]
                         ) -> list[tuple[str, str, list[str]]]:
    """Each of ``topics`` but the retry and dead-letter ones, in order, as mqadmin's
    ``topicList -c`` lists them: the cluster of its first broker and the groups that
    consume it on its masters. A topic whose route or groups cannot be read is listed
    with what was found (an empty cluster, no groups), as mqadmin does."""
    limit = asyncio.Semaphore(_TOPICS_AT_ONCE)

    async def one(topic: str) -> tuple[str, str, list[str]]:
        async with limit:
            try:
                route = await admin.topic_route(topic)
            except TideMQError:
                return "", topic, []
            cluster = route.broker_datas[0].cluster if route.broker_datas else ""
            try:
                groups = await topic_consumers(admin, topic, _masters_of(route))
            except TideMQError:
                groups = []
            return cluster, topic, groups

    listed = [t for t in topics if not t.startswith(("%RETRY%", "%DLQ%"))]
    return list(await asyncio.gather(*map(one, listed)))


async def consumer_connections(admin: AdminClient, group: str, *,
                               addresses: Sequence[str] | None = None
                               ) -> list[dict[str, Any]]:
    """The consumers of ``group`` connected to any master, or to the brokers at
    ``addresses`` (empty when none is online)."""
    addrs = await _addresses(admin, addresses)

    async def one(addr: str) -> list[dict[str, Any]]:
        response = await admin.instance.request(addr, RemotingCommand.request(
            RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}))
        if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return []
        ofs.check_success(response, address=addr)
        rows = _json(response, "GET_CONSUMER_CONNECTION_LIST").get("connectionSet", [])
        return [{**row, "broker": addr} for row in rows]

    seen: dict[str, dict[str, Any]] = {}
    for rows in await _gather([one(a) for a in addrs]):
        for row in rows:
            seen.setdefault(str(row.get("clientId")), row)
    return list(seen.values())


async def reset_offset(admin: AdminClient, group: str, topic: str, *, timestamp: int,
                       force: bool = True, queue_id: int = -1, offset: int | None = None,
                       addresses: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Reset ``group``'s offsets of ``topic`` on every master to the first message stored
    at or after ``timestamp`` (epoch ms; -1: the end), or to ``offset`` for one
    ``queue_id``; returns the broker's ``offsetTable`` rows (topic, brokerName, queueId,
    offset). The brokers are the masters of the topic's route, or those at ``addresses``."""
    addrs = list(addresses) if addresses is not None else _masters_of(
        await admin.topic_route(topic))
    ext = {"topic": topic, "group": group, "timestamp": str(timestamp),
           "isForce": "true" if force else "false", "queueId": str(queue_id)}
    if offset is not None:
        ext["offset"] = str(offset)

    async def one(addr: str) -> list[dict[str, Any]]:
        response = await admin.instance.request(addr, RemotingCommand.request(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext))
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise ResetNotSupportedError(addr)
        ofs.check_success(response, address=addr)
        rows = _json(response, "INVOKE_BROKER_TO_RESET_OFFSET").get("offsetTable", [])
        return list(rows) if isinstance(rows, list) else []

    results = await _gather([one(a) for a in addrs], partial=False)  # a change: all or fail
    return [row for rows in results for row in rows]
