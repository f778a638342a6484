"""The name server's Prometheus endpoint: brokers, topics and route requests."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tidemq.client import AdminClient
from tidemq.errors import TideMQError
from tidemq.net.ports import free_port
from tidemq.testing import Cluster


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


async def test_namesrv_metrics(tmp_path: Path) -> None:
    port = free_port()
    async with Cluster(tmp_path, brokers=2, namesrv={"metrics_port": port}) as cluster:
        assert cluster.namesrv is not None and cluster.namesrv.metrics_server is not None
        async with AdminClient(cluster.namesrv_addr) as admin:
            await admin.create_topic("Routed", read_queue_nums=2, write_queue_nums=2)
            for broker in cluster.brokers:
                assert broker.registrar is not None
                await broker.registrar.register_all()
            await admin.topic_route("Routed")
            with pytest.raises(TideMQError):
                await admin.topic_route("NoSuchTopic")
        m = await asyncio.to_thread(scrape, port)
    assert m[("tidemq_namesrv_brokers", ())] == 2
    assert m[("tidemq_namesrv_broker_names", ())] == 2
    assert m[("tidemq_namesrv_clusters", ())] == 1
    assert m[("tidemq_namesrv_topics", ())] >= 1
    assert m[("tidemq_namesrv_connections", ())] >= 2
    assert m[("tidemq_namesrv_route_requests_total", (("result", "found"),))] >= 1
    assert m[("tidemq_namesrv_route_requests_total", (("result", "not_found"),))] >= 1
    assert m[("tidemq_namesrv_requests_total",
              (("code", "103"), ("name", "REGISTER_BROKER")))] >= 4
