"""Prometheus metrics of one name server, served at ``/metrics`` when ``metricsPort`` > 0.

A per-app :class:`CollectorRegistry` (tests run several name servers in one process)
with one collector that reads the route table at scrape time; the request counts are
plain integers the processors bump (:meth:`NamesrvMetrics.counted`).

=========================================  =======  ===============================
metric                                     type     labels
=========================================  =======  ===============================
tidemq_namesrv_brokers                     gauge    (live broker registrations)
tidemq_namesrv_broker_names                gauge    (broker names, masters and slaves)
tidemq_namesrv_clusters                    gauge
tidemq_namesrv_topics                      gauge
tidemq_namesrv_requests_total              counter  code, name
tidemq_namesrv_route_requests_total        counter  result (found, not_found)
tidemq_namesrv_connections                 gauge
=========================================  =======  ===============================
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.namesrv.routes import RouteInfoManager
from tidemq.net.connection import Connection
from tidemq.net.server import RemotingServer

__all__ = ["NamesrvMetrics"]

_Handler = Callable[[Connection, RemotingCommand],
                    RemotingCommand | Awaitable[RemotingCommand]]


class NamesrvMetrics:
    """The registry of one name server; see the module docstring."""

    def __init__(self, routes: RouteInfoManager, server: RemotingServer) -> None:
        self.requests: Counter[int] = Counter()
        self.routes_found = 0
        self.routes_missing = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_NamesrvCollector(routes, server, self))

    def counted(self, code: int, handler: _Handler) -> _Handler:
        """``handler`` counting its requests (and, for routes, whether one was found)."""
        requests = self.requests
        is_route = code == RequestCode.GET_ROUTEINFO_BY_TOPIC

        def run(conn: Connection, cmd: RemotingCommand
                ) -> RemotingCommand | Awaitable[RemotingCommand]:
            requests[code] += 1
            response = handler(conn, cmd)
            if is_route and isinstance(response, RemotingCommand):
                if response.code == ResponseCode.SUCCESS:
                    self.routes_found += 1
                else:
                    self.routes_missing += 1
            return response

        return run

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _NamesrvCollector(Collector):
    def __init__(self, routes: RouteInfoManager, server: RemotingServer,
                 metrics: NamesrvMetrics) -> None:
        self.routes = routes
        self.server = server
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        routes = self.routes
        info = routes.cluster_info()
        yield GaugeMetricFamily("tidemq_namesrv_brokers", "Live broker registrations.",
                                value=len(routes.live_brokers()))
        yield GaugeMetricFamily("tidemq_namesrv_broker_names", "Broker names known.",
                                value=len(info.broker_addr_table))
        yield GaugeMetricFamily("tidemq_namesrv_clusters", "Clusters known.",
                                value=len(info.cluster_addr_table))
        yield GaugeMetricFamily("tidemq_namesrv_topics", "Topics with a route.",
                                value=len(routes.topics()))
        yield GaugeMetricFamily("tidemq_namesrv_connections", "Open remoting connections.",
                                value=len(self.server.connections))
        requests = CounterMetricFamily("tidemq_namesrv_requests", "Requests served, by code.",
                                       labels=["code", "name"])
        for code, count in sorted(self.metrics.requests.items()):
            requests.add_metric([str(code), _name(code)], count)
        yield requests
        route = CounterMetricFamily("tidemq_namesrv_route_requests",
                                    "GET_ROUTEINFO_BY_TOPIC requests, by result.",
                                    labels=["result"])
        route.add_metric(["found"], self.metrics.routes_found)
        route.add_metric(["not_found"], self.metrics.routes_missing)
        yield route


def _name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)
