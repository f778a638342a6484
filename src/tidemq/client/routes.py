"""The asyncio route cache: topic routes from the name servers, fetched on demand and
refreshed periodically.

The route and the queues clients derive from it are :mod:`tidemq.client.topic_route`;
what the cache decides -- whether a
cached route serves, which name server to ask, what an answer means, which topics are
due -- is :mod:`tidemq.client.route_table`, shared with the blocking client. Here only
the waiting: :class:`RouteCache` asks the name servers, runs one fetch per topic at a
time (concurrent lookups share it), and tells listeners
(:meth:`RouteCache.add_listener`) of every topic whose readable queues or masters
changed when a route was stored (push consumers rebalance on it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from tidemq.client.route_table import NEXT_SERVER, RouteCacheCore
from tidemq.client.topic_route import (
    MASTER_ID,
    TopicRoute,
    read_member,
    read_route_response,
    route_request,
)
from tidemq.codec.bodies import TopicRouteData
from tidemq.codec.command import RemotingCommand
from tidemq.errors import TideMQError
from tidemq.net.client import RemotingClient

__all__ = ["RouteCache", "TopicRoute"]  # TopicRoute: where it was first defined

log = logging.getLogger(__name__)


class RouteCache(RouteCacheCore[RemotingClient]):
    """Routes by topic, fetched from the name servers; see the module docstring.

    Options: ``timeout`` (per name server), ``refresh_interval``, ``ttl``,
    ``default_topic``, ``default_queue_nums``, ``clock``
    (:class:`~tidemq.client.route_table.RouteCacheCore`).
    """

    @functools.cached_property
    def _inflight(self) -> dict[tuple[str, bool], asyncio.Task[TopicRoute]]:
        """The fetch under way per ``(topic, allow_default)``: concurrent lookups share
        it."""
        return {}

    # ------------------------------------------------------------------ lookups

    def master_address(self, broker_name: str) -> str | None:
        """The master of ``broker_name`` according to any cached route."""
        for route in self._table.routes():
            addr = route.master_address(broker_name)
            if addr is not None:
                return addr
        return None

    def read_address(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        """Where to read ``broker_name``'s queues according to the cached routes: member
        ``broker_id`` (a pull answer's suggestion), else the master, else a replica
        (:func:`~tidemq.client.topic_route.read_member`). Routes cached at different
        times may list different members: one that lists the member wanted wins, then
        one that lists a master."""
        best: tuple[int, str] | None = None
        for route in self._table.routes():
            broker = route.brokers.get(broker_name)
            if broker is None or not broker.broker_addrs:
                continue
            member = read_member(broker.broker_addrs, broker_id)
            rank = 0 if member == broker_id else 1 if member == MASTER_ID else 2
            if best is None or rank < best[0]:
                best = rank, broker.broker_addrs[member]
        return None if best is None else best[1]

    def member_addresses(self) -> set[str]:
        """Every broker address in the cached routes: masters and replicas."""
        out: set[str] = set()
        for route in self._table.routes():
            for broker in route.brokers.values():
                out.update(broker.broker_addrs.values())
        return out

    def master_addresses(self) -> set[str]:
        """Every master address in the cached routes."""
        out: set[str] = set()
        for route in self._table.routes():
            out.update(route.master_addresses.values())
        return out

    # ------------------------------------------------------------------ fetching

    async def get(self, topic: str, *, allow_default: bool = False,
                  refresh: bool = False) -> TopicRoute:
        """The route of ``topic``: cached, or fetched now (``refresh`` forces a fetch).

        With ``allow_default`` an unknown topic gets the template topic's route (the
        producer's auto-creation path); otherwise TOPIC_NOT_EXIST is raised. When no name
        server can be reached, a cached route (even a stale one) is returned.
        """
        if not refresh:
            route = self.ready(topic, allow_default=allow_default)
            if route is not None:
                return route
        found = self._lookup(topic, allow_default, refresh)
        if found.route is not None:
            return found.route
        key = (topic, allow_default)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._load(topic, allow_default))
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._settled(key, t))
        try:
            return await asyncio.shield(task)
        except NEXT_SERVER as exc:
            return self._table.kept(topic, exc, found.fallback)

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
        for addr in self._ring.order():
            try:
                response = await self._client.request(addr, build(), self.timeout)
            except NEXT_SERVER as exc:
                last = self._ring.failed(addr, exc)
                continue
            self._ring.answered(addr)
            return response, addr
        raise self._ring.exhausted(last)

    def mark_stale(self, topic: str) -> None:
        """Fetch ``topic`` again on its next use (after a send to it failed)."""
        self._table.mark_stale(topic)

    def forget(self, topic: str) -> None:
        self._table.forget(topic)

    async def refresh_all(self) -> None:
        """The periodic refresh (every ``refresh_interval``): fetch every cached route
        again, however recently it was fetched, as upstream's client does every
        ``pollNameServerInterval``, so that none is more than one interval old -- a route
        a send fetched while a broker group's master was down lists that group again
        at most one interval after the master is back. A failure keeps the old route."""
        for topic in self.topics:
            route = self._table.cached(topic)
            allow_default = route is not None and route.from_default
            try:
                await self.get(topic, allow_default=allow_default, refresh=True)
            except TideMQError as exc:
                log.info("route refresh of %s failed: %s", topic, exc)

    def _settled(self, key: tuple[str, bool], task: asyncio.Task[TopicRoute]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # seen here even if every waiter was cancelled

    async def _load(self, topic: str, allow_default: bool) -> TopicRoute:
        fetch = self._route_fetch(topic, allow_default)
        route = None
        while route is None:
            route = fetch.answer(*await self.request_any(fetch.request))
        if route is not fetch.known:  # a route kept whole was not fetched afresh
            self.store(topic, route)
        return route
