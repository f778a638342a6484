"""What a route cache decides, with no I/O: shared by the asyncio cache
(:mod:`tidemq.client.routes`) and the blocking one (:mod:`tidemq.client.blocking`), which
only add the waiting.

* :class:`NameServerRing` -- which name server to ask next: each in turn, beginning with
  the last one that answered; an unreachable or silent one passes the question on.
* :class:`RouteTable` -- the cached routes: whether a lookup may use the cached route
  (:meth:`RouteTable.lookup`), which route to keep when no name server answers, and
  whether a stored route changed what consumers see.
* :class:`RouteCacheCore` -- what both caches hold (client, ring, table, template topic)
  and the :class:`RouteFetch` they start;
* :class:`RouteFetch` -- one route fetch: the request to send and what its answer means
  (a route, or "ask for the template topic ``TBW102`` instead" on TOPIC_NOT_EXIST when
  the caller may auto-create the topic).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from tidemq.client.topic_route import (
    TopicRoute,
    name_server_order,
    read_route_response,
    route_request,
    with_absent_brokers,
)
from tidemq.codec.command import RemotingCommand
from tidemq.codec.headers import ROUTE_MAY_BE_INCOMPLETE
from tidemq.errors import (
    ConnectionLost,
    RequestTimeout,
    ResponseCode,
    TideMQError,
    error_for_code,
)

__all__ = ["NEXT_SERVER", "Lookup", "NameServerRing", "RouteCacheCore", "RouteFetch",
           "RouteTable"]

log = logging.getLogger(__name__)

_Client = TypeVar("_Client")

#: Failures after which the next name server is asked (and a cached route is kept).
NEXT_SERVER = (ConnectionLost, RequestTimeout)


class NameServerRing:
    """The name servers, asked in turn: iterate :meth:`order`, call :meth:`answered` for
    the one that answers and :meth:`failed` for each that does not, and raise
    :meth:`exhausted` (with the last failure) when none answered."""

    def __init__(self, addrs: Sequence[str]) -> None:
        if not addrs:
            raise ValueError("a route cache needs at least one name server address")
        self.addrs = tuple(addrs)
        self._start = 0

    def order(self) -> list[str]:
        """Every name server once, beginning with the last one that answered."""
        return name_server_order(self.addrs, self._start)

    def answered(self, addr: str) -> None:
        self._start = self.addrs.index(addr)

    def failed(self, addr: str, exc: TideMQError) -> TideMQError:
        log.info("name server %s failed: %s", addr, exc)
        return exc

    def exhausted(self, last: TideMQError | None) -> TideMQError:
        """The error of a round in which every server failed: the last failure."""
        assert last is not None, "a round asks at least one name server"
        return last


@dataclasses.dataclass(slots=True)
class _Entry:
    route: TopicRoute
    fetched_at: float
    stale: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Lookup:
    """What :meth:`RouteTable.lookup` decided: ``route`` to use as is, or ``None`` to
    fetch one; ``fallback`` is the cached route to keep if the fetch finds no name
    server (``None``: raise)."""

    route: TopicRoute | None
    fallback: TopicRoute | None


def _serves(route: TopicRoute, allow_default: bool) -> bool:
    """Whether a cached ``route`` answers a lookup. A consumer's (not ``allow_default``)
    takes no template route. A send's (``allow_default``) takes none that lists no
    writable queue with a master: it asks the name servers again, as upstream's
    producer does when its publish info is not ok, so that a group whose only master
    was replaced takes sends once the name servers list the new one instead of at the
    next periodic refresh."""
    if allow_default:
        return bool(route.publish_queues)
    return not route.from_default


class RouteTable:
    """Routes by topic and when they were fetched.

    ``max_age`` is how long a cached route is used before a lookup fetches it again
    (``None``: until it is marked stale, or a periodic refresh fetches it again).
    """

    def __init__(self, *, clock: Callable[[], float], max_age: float | None = None) -> None:
        self._clock = clock
        self.max_age = max_age
        self._entries: dict[str, _Entry] = {}

    def lookup(self, topic: str, *, allow_default: bool = False,
               refresh: bool = False) -> Lookup:
        """Whether the cached route of ``topic`` serves (not ``refresh``, not stale, not
        too old, and one :func:`_serves` takes for this kind of lookup)."""
        entry = self._entries.get(topic)
        if entry is None:
            return Lookup(None, None)
        fresh = not refresh and not entry.stale and (
            self.max_age is None or self._clock() - entry.fetched_at < self.max_age)
        if fresh and _serves(entry.route, allow_default):
            return Lookup(entry.route, entry.route)
        return Lookup(None, entry.route)

    def serving(self, topic: str, *, allow_default: bool = False) -> TopicRoute | None:
        """The cached route of ``topic`` if it serves (:meth:`lookup` without
        ``refresh``), else ``None``: the question every send asks first."""
        entry = self._entries.get(topic)
        if entry is None or entry.stale or (
                self.max_age is not None and self._clock() - entry.fetched_at >= self.max_age):
            return None
        route = entry.route
        return route if _serves(route, allow_default) else None

    def kept(self, topic: str, exc: TideMQError, fallback: TopicRoute | None) -> TopicRoute:
        """The route to use when fetching ``topic`` failed with ``exc``: ``fallback``
        if no name server could be reached, else ``exc`` is raised."""
        if fallback is None or not isinstance(exc, NEXT_SERVER):
            raise exc
        log.info("keeping the cached route of %s: %s", topic, exc)
        return fallback

    def cached(self, topic: str) -> TopicRoute | None:
        entry = self._entries.get(topic)
        return entry.route if entry is not None else None

    def known(self, topic: str) -> TopicRoute | None:
        """The cached route of ``topic`` unless it is a template route."""
        route = self.cached(topic)
        return route if route is not None and not route.from_default else None

    @property
    def topics(self) -> list[str]:
        return list(self._entries)

    def routes(self) -> list[TopicRoute]:
        return [e.route for e in self._entries.values()]

    def store(self, topic: str, route: TopicRoute) -> bool:
        """Cache ``route`` (fetched now); ``True`` if it replaced a route whose readable
        queues or masters differ."""
        old = self._entries.get(topic)
        self._entries[topic] = _Entry(route, self._clock())
        return old is not None and (old.route.subscribe_queues != route.subscribe_queues
                                    or old.route.master_addresses != route.master_addresses)

    def mark_stale(self, topic: str) -> None:
        entry = self._entries.get(topic)
        if entry is not None:
            entry.stale = True

    def forget(self, topic: str) -> None:
        self._entries.pop(topic, None)


class RouteFetch:
    """One fetch of ``topic``'s route: send :meth:`request` to a name server and give
    the answer to :meth:`answer`, until it returns a route.

    With ``allow_default``, TOPIC_NOT_EXIST turns the fetch into one of
    ``default_topic``'s route, clamped to ``default_queue_nums`` queues per broker. With
    ``known`` (the cached, non-template route), an answer the name server marks as
    possibly incomplete (it has just started) keeps the brokers it has not heard from
    yet, and TOPIC_NOT_EXIST from it keeps ``known`` whole.
    """

    def __init__(self, topic: str, *, allow_default: bool, default_topic: str,
                 default_queue_nums: int, known: TopicRoute | None = None) -> None:
        self.topic = topic
        self.allow_default = allow_default
        self.default_topic = default_topic
        self.default_queue_nums = default_queue_nums
        self.known = known
        self.template = False

    def request(self) -> RemotingCommand:
        return route_request(self.default_topic if self.template else self.topic)

    def answer(self, response: RemotingCommand, address: str) -> TopicRoute | None:
        """The route ``response`` gives, or ``None`` when the template topic's route must
        be fetched next; a refusal raises its error."""
        if self.template:
            if response.code == ResponseCode.TOPIC_NOT_EXIST:  # name the topic asked for
                raise error_for_code(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"No topic route info in name server for the topic: {self.topic}; nor "
                    f"for {self.default_topic}, the template a send creates a topic from: "
                    "create the topic first (updateTopic), as no registered broker creates "
                    "topics on a send (autoCreateTopicEnable)", address=address)
            return TopicRoute.build(self.topic, read_route_response(response, address=address),
                                    from_default=True,
                                    default_queue_nums=self.default_queue_nums)
        incomplete = (self.known is not None
                      and response.ext_fields.get(ROUTE_MAY_BE_INCOMPLETE) == "true")
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            if incomplete and self.known is not None:
                log.info("keeping the route of %s: the name server at %s has just started",
                         self.topic, address)
                return self.known
            if self.allow_default:
                self.template = True
                return None
        data = read_route_response(response, address=address)
        if incomplete and self.known is not None:
            data = with_absent_brokers(data, self.known.data)
        return TopicRoute.build(self.topic, data)


class RouteCacheCore(Generic[_Client]):
    """The state of a route cache over ``client``, whichever way it waits: the name
    servers, the cached routes (guarded by a lock, as threads may share a blocking
    cache) and the listeners.

    ``refresh_interval`` is the period of the owner's periodic refresh, which fetches
    every cached route again; ``ttl`` is how long a lookup uses a cached route before
    fetching it again (default :attr:`default_ttl`; ``None``: until it is marked stale
    or refreshed).
    """

    #: The ``ttl`` when none is given.
    default_ttl: float | None = None

    def __init__(
        self,
        client: _Client,
        namesrv: Sequence[str],
        *,
        timeout: float = 3.0,
        refresh_interval: float = 30.0,
        ttl: float | None = None,
        default_topic: str = "TBW102",
        default_queue_nums: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ring = NameServerRing(namesrv)
        self.namesrv = self._ring.addrs
        self.timeout = timeout
        self.default_topic = default_topic
        self.default_queue_nums = default_queue_nums
        self.refresh_interval = refresh_interval
        self._lock = threading.Lock()
        self._table = RouteTable(clock=clock,
                                 max_age=ttl if ttl is not None else self.default_ttl)
        self._listeners: list[Callable[[str], None]] = []

    @property
    def ttl(self) -> float | None:
        return self._table.max_age

    def add_listener(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(topic)`` whenever a stored route of ``topic`` differs from the
        cached one in its readable queues or its masters."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[str], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def cached(self, topic: str) -> TopicRoute | None:
        with self._lock:
            return self._table.cached(topic)

    @property
    def topics(self) -> list[str]:
        with self._lock:
            return self._table.topics

    def store(self, topic: str, route: TopicRoute) -> None:
        """Cache ``route`` for ``topic`` (fetched now) and tell the listeners if it
        changed."""
        with self._lock:
            changed = self._table.store(topic, route)
        if changed:
            for callback in list(self._listeners):
                callback(topic)

    def ready(self, topic: str, *, allow_default: bool = False) -> TopicRoute | None:
        """The route :meth:`get` would return without asking a name server, or ``None``
        when it would ask."""
        with self._lock:
            return self._table.serving(topic, allow_default=allow_default)

    def _lookup(self, topic: str, allow_default: bool, refresh: bool) -> Lookup:
        with self._lock:
            return self._table.lookup(topic, allow_default=allow_default, refresh=refresh)

    def _route_fetch(self, topic: str, allow_default: bool) -> RouteFetch:
        with self._lock:
            known = self._table.known(topic)
        return RouteFetch(topic, allow_default=allow_default,
                          default_topic=self.default_topic,
                          default_queue_nums=self.default_queue_nums, known=known)
