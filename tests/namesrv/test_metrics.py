"""The name server's Prometheus endpoint: brokers, topics and route requests."""

from __future__ import annotations

import asyncio
import shutil
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.tls_certs import Certs, der, renew, served_certificate, wait_until_served

from tidemq.client import AdminClient
from tidemq.errors import TideMQError
from tidemq.namesrv.app import NameServerApp
from tidemq.namesrv.config import NamesrvConfig
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


async def test_metrics_https_serves_a_renewed_certificate(tmp_path: Path,
                                                          tls_certs: Certs) -> None:
    cert, key = tmp_path / "metrics.crt", tmp_path / "metrics.key"
    shutil.copyfile(tls_certs.server_cert, cert)
    shutil.copyfile(tls_certs.server_key, key)
    config = NamesrvConfig(listen_port=0, metrics_port=free_port(),
                           metrics_cert_path=str(cert), metrics_key_path=str(key))
    async with NameServerApp(config):
        port = config.metrics_port
        assert await asyncio.to_thread(served_certificate, port) == der(tls_certs.server_cert)
        renew(cert, key, tls_certs.other_host_cert, tls_certs.other_host_key)
        await asyncio.to_thread(wait_until_served, port, der(tls_certs.other_host_cert))
