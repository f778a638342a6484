"""Topic routes from the name servers, and the queues clients derive from them.

A :class:`TopicRoute` is one ``TopicRouteData`` (remoting.md §2.3) plus what clients read
off it, computed once when it arrives:

* publish queues -- for each *writable* QueueData whose broker has a master (id 0),
  queues ``0..writeQueueNums-1``, QueueDatas in broker-name order; with
  ``orderTopicConf`` (``brokerName:count;...``) exactly those queues instead;
* subscribe queues -- for each *readable* QueueData, queues ``0..readQueueNums-1``;
* broker name -> master address.

Auto-creation: when the name server answers TOPIC_NOT_EXIST a producer takes the route
of the template topic ``TBW102`` with each QueueData clamped to
``min(default_topic_queue_nums, readQueueNums)`` queues (:meth:`TopicRoute.build` with
``from_default=True``) and sends with ``defaultTopic=TBW102``; the broker creates the
topic on the first send.

:class:`RouteCache` asks any live name server (each in turn, starting with the last one
that answered), caches routes, and refreshes them on demand and periodically. Which
topics to refresh is decided by a plain method (:meth:`RouteCache.topics_to_refresh`);
only then are the fetches awaited. The request and response handling are plain
functions shared with :mod:`tidemq.client.blocking`. Listeners
(:meth:`RouteCache.add_listener`) hear of every topic whose readable queues or masters
changed when a route was stored (push consumers rebalance on it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import msgspec

from tidemq.codec.bodies import BrokerData, QueueData, TopicRouteData, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ROUTE_MAY_BE_INCOMPLETE, GetRouteInfoRequestHeader
from tidemq.errors import (
    BrokerResponseError,
    ConnectionLost,
    RequestTimeout,
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.net.client import RemotingClient
from tidemq.types import MessageQueue

__all__ = [
    "MASTER_ID",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "RouteCache",
    "TopicRoute",
    "is_readable",
    "is_writable",
    "name_server_order",
    "read_route_response",
    "route_request",
    "with_absent_brokers",
]

log = logging.getLogger(__name__)

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
MASTER_ID = 0


def is_writable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


# ---------------------------------------------------------------- the route and its queues


def _clamped(qd: QueueData, limit: int) -> QueueData:
    n = min(limit, qd.read_queue_nums)
    return QueueData(broker_name=qd.broker_name, read_queue_nums=n, write_queue_nums=n,
                     perm=qd.perm, topic_sys_flag=qd.topic_sys_flag)


def _order_queues(topic: str, conf: str) -> list[MessageQueue]:
    queues: list[MessageQueue] = []
    for item in conf.split(";"):
        name, sep, count = item.strip().partition(":")
        if sep and name and count.strip().isdigit():
            queues.extend(MessageQueue(topic, name, i) for i in range(int(count)))
    return queues


def _publish_queues(topic: str, data: TopicRouteData,
                    brokers: Mapping[str, BrokerData]) -> list[MessageQueue]:
    if data.order_topic_conf:
        return _order_queues(topic, data.order_topic_conf)
    queues: list[MessageQueue] = []
    for qd in sorted(data.queue_datas, key=lambda q: q.broker_name):
        broker = brokers.get(qd.broker_name)
        if not is_writable(qd.perm) or broker is None or broker.master_addr() is None:
            continue
        queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return queues


def _subscribe_queues(topic: str, data: TopicRouteData) -> list[MessageQueue]:
    queues: list[MessageQueue] = []
    for qd in sorted(data.queue_datas, key=lambda q: q.broker_name):
        if is_readable(qd.perm):
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    return queues


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic's route and the queues derived from it (see the module docstring)."""

    topic: str
    data: TopicRouteData
    publish_queues: tuple[MessageQueue, ...]
    subscribe_queues: tuple[MessageQueue, ...]
    brokers: Mapping[str, BrokerData]
    from_default: bool = False

    @classmethod
    def build(cls, topic: str, data: TopicRouteData, *, from_default: bool = False,
              default_queue_nums: int = 4) -> TopicRoute:
        """Derive the queues of ``topic`` from ``data``; with ``from_default``, ``data`` is
        the template topic's route and each QueueData is clamped to
        ``default_queue_nums``."""
        if from_default:
            data = TopicRouteData(
                queue_datas=[_clamped(qd, default_queue_nums) for qd in data.queue_datas],
                broker_datas=list(data.broker_datas),
                filter_server_table=dict(data.filter_server_table),
            )
        brokers = {bd.broker_name: bd for bd in data.broker_datas}
        return cls(topic, data, tuple(_publish_queues(topic, data, brokers)),
                   tuple(_subscribe_queues(topic, data)), brokers, from_default)

    def master_address(self, broker_name: str) -> str | None:
        broker = self.brokers.get(broker_name)
        return broker.master_addr() if broker is not None else None

    @property
    def master_addresses(self) -> dict[str, str]:
        """Broker name -> master address, for brokers that have a master."""
        out: dict[str, str] = {}
        for name, broker in self.brokers.items():
            addr = broker.master_addr()
            if addr is not None:
                out[name] = addr
        return out


def with_absent_brokers(data: TopicRouteData, known: TopicRouteData) -> TopicRouteData:
    """``data`` plus the brokers of ``known`` that it lacks (their queue data and
    addresses): the route to use while the answering name server may not have heard from
    every broker yet. Brokers ``data`` has are taken as ``data`` says."""
    present = {bd.broker_name for bd in data.broker_datas}
    absent = [bd for bd in known.broker_datas if bd.broker_name not in present]
    if not absent:
        return data
    names = {bd.broker_name for bd in absent}
    log.info("keeping brokers %s in a route from a name server that has just started",
             sorted(names))
    return msgspec.structs.replace(
        data, broker_datas=[*data.broker_datas, *absent],
        queue_datas=[*data.queue_datas,
                     *(qd for qd in known.queue_datas if qd.broker_name in names)])


# ---------------------------------------------------------------- request and response


def route_request(topic: str) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC asking for standard JSON (remoting.md §1.6)."""
    header = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header.to_ext())


def read_route_response(response: RemotingCommand, *, address: str) -> TopicRouteData:
    """The route in ``response``; a non-success code raises its
    :func:`~tidemq.errors.error_for_code` error (TOPIC_NOT_EXIST has ``code`` 17)."""
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(response.code, response.remark or "", address=address)
    return decode_body(response.full_body(), TopicRouteData)


def name_server_order(addrs: Sequence[str], start: int) -> list[str]:
    """Every name server once, beginning with ``addrs[start]``."""
    n = len(addrs)
    return [addrs[(start + i) % n] for i in range(n)]


#: Failures after which the next name server is asked.
_NEXT_SERVER = (ConnectionLost, RequestTimeout)


# ---------------------------------------------------------------- the cache


@dataclasses.dataclass(slots=True)
class _Entry:
    route: TopicRoute
    fetched_at: float
    stale: bool = False


class RouteCache:
    """Routes by topic, fetched from the name servers; see the module docstring."""

    def __init__(
        self,
        client: RemotingClient,
        namesrv: Sequence[str],
        *,
        timeout: float = 3.0,
        refresh_interval: float = 30.0,
        default_topic: str = "TBW102",
        default_queue_nums: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not namesrv:
            raise ValueError("RouteCache needs at least one name server address")
        self._client = client
        self.namesrv = tuple(namesrv)
        self.timeout = timeout
        self.refresh_interval = refresh_interval
        self.default_topic = default_topic
        self.default_queue_nums = default_queue_nums
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._inflight: dict[tuple[str, bool], asyncio.Task[TopicRoute]] = {}
        self._ns_index = 0
        self._listeners: list[Callable[[str], None]] = []

    # ------------------------------------------------------------------ listeners

    def add_listener(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(topic)`` whenever a stored route of ``topic`` differs from the
        cached one in its readable queues or its masters."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[str], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    # ------------------------------------------------------------------ lookups

    def cached(self, topic: str) -> TopicRoute | None:
        entry = self._entries.get(topic)
        return entry.route if entry is not None else None

    @property
    def topics(self) -> list[str]:
        return list(self._entries)

    def master_address(self, broker_name: str) -> str | None:
        """The master of ``broker_name`` according to any cached route."""
        for entry in self._entries.values():
            addr = entry.route.master_address(broker_name)
            if addr is not None:
                return addr
        return None

    def master_addresses(self) -> set[str]:
        """Every master address in the cached routes."""
        out: set[str] = set()
        for entry in self._entries.values():
            out.update(entry.route.master_addresses.values())
        return out

    # ------------------------------------------------------------------ fetching

    async def get(self, topic: str, *, allow_default: bool = False,
                  refresh: bool = False) -> TopicRoute:
        """The route of ``topic``: cached, or fetched now (``refresh`` forces a fetch).

        With ``allow_default`` an unknown topic gets the template topic's route (the
        producer's auto-creation path); otherwise TOPIC_NOT_EXIST is raised. When no name
        server can be reached, a cached route (even a stale one) is returned.
        """
        entry = self._entries.get(topic)
        if (entry is not None and not refresh and not entry.stale
                and (allow_default or not entry.route.from_default)):
            return entry.route
        key = (topic, allow_default)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._load(topic, allow_default))
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._settled(key, t))
        try:
            return await asyncio.shield(task)
        except _NEXT_SERVER as exc:
            if entry is None:
                raise
            log.info("keeping the cached route of %s: %s", topic, exc)
            return entry.route

    async def fetch(self, topic: str) -> TopicRouteData:
        """Ask the name servers for ``topic``'s route (see :meth:`request_any`)."""
        response, addr = await self.request_any(lambda: route_request(topic))
        return read_route_response(response, address=addr)

    async def request_any(self, build: Callable[[], RemotingCommand]
                          ) -> tuple[RemotingCommand, str]:
        """Send ``build()`` to the name servers in turn until one answers; the answer
        and who gave it.

        Any answer (TOPIC_NOT_EXIST included) from a reachable server is final; an
        unreachable or silent server passes the question to the next one, and the last
        such failure is raised when none answers.
        """
        last: TideMQError | None = None
        for i, addr in enumerate(name_server_order(self.namesrv, self._ns_index)):
            try:
                response = await self._client.request(addr, build(), self.timeout)
            except _NEXT_SERVER as exc:
                log.info("name server %s failed: %s", addr, exc)
                last = exc
                continue
            self._ns_index = (self._ns_index + i) % len(self.namesrv)
            return response, addr
        assert last is not None
        raise last

    def mark_stale(self, topic: str) -> None:
        """Fetch ``topic`` again on its next use (after a send to it failed)."""
        entry = self._entries.get(topic)
        if entry is not None:
            entry.stale = True

    def forget(self, topic: str) -> None:
        self._entries.pop(topic, None)

    def topics_to_refresh(self, now: float | None = None) -> list[str]:
        """Decide, without I/O: the cached topics that are stale or older than the
        refresh interval."""
        now = self._clock() if now is None else now
        return [t for t, e in self._entries.items()
                if e.stale or now - e.fetched_at >= self.refresh_interval]

    async def refresh_due(self) -> None:
        """Refresh :meth:`topics_to_refresh`; a failure keeps the old route."""
        for topic in self.topics_to_refresh():
            entry = self._entries.get(topic)
            allow_default = entry is not None and entry.route.from_default
            try:
                await self.get(topic, allow_default=allow_default, refresh=True)
            except TideMQError as exc:
                log.info("route refresh of %s failed: %s", topic, exc)

    def store(self, topic: str, route: TopicRoute) -> None:
        """Cache ``route`` for ``topic`` (fetched now) and tell the listeners if it
        changed."""
        old = self._entries.get(topic)
        self._entries[topic] = _Entry(route, self._clock())
        if old is not None and (old.route.subscribe_queues != route.subscribe_queues
                                or old.route.master_addresses != route.master_addresses):
            for callback in list(self._listeners):
                callback(topic)

    def _settled(self, key: tuple[str, bool], task: asyncio.Task[TopicRoute]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # seen here even if every waiter was cancelled

    async def _load(self, topic: str, allow_default: bool) -> TopicRoute:
        known = self._entries.get(topic)
        if known is not None and known.route.from_default:
            known = None
        try:
            response, addr = await self.request_any(lambda: route_request(topic))
            incomplete = response.ext_fields.get(ROUTE_MAY_BE_INCOMPLETE) == "true"
            if (incomplete and known is not None
                    and response.code == ResponseCode.TOPIC_NOT_EXIST):
                log.info("keeping the route of %s: the name server at %s has just started",
                         topic, addr)
                return known.route
            data = read_route_response(response, address=addr)
            if incomplete and known is not None:
                data = with_absent_brokers(data, known.route.data)
            route = TopicRoute.build(topic, data)
        except BrokerResponseError as exc:
            if not allow_default or exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            template = await self.fetch(self.default_topic)
            route = TopicRoute.build(topic, template, from_default=True,
                                     default_queue_nums=self.default_queue_nums)
        self.store(topic, route)
        return route

