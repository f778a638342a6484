"""The web console over HTTPS, in front of a cluster that takes TLS connections only:
the browser side is served with the given certificate, the console's own client connects
with TLS, and a plain HTTP request gets no page."""

from __future__ import annotations

import asyncio
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.tls_certs import Certs

from tidemq.client import ClientConfig
from tidemq.console import ConsoleServer
from tidemq.net.tls import TlsMode, TlsServerSettings
from tidemq.testing import Cluster

pytestmark = pytest.mark.timeout(120)


def fetch(url: str, ca: Path | None) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    with urllib.request.urlopen(url, timeout=10, context=context) as answer:
        return answer.status, answer.read().decode()


async def test_console_over_https_for_a_tls_cluster(tmp_path: Path, tls_certs: Certs) -> None:
    keys = {"tls_server_mode": "enforcing", "tls_server_cert_path": str(tls_certs.server_cert),
            "tls_server_key_path": str(tls_certs.server_key)}
    https = TlsServerSettings(mode=TlsMode.ENFORCING, cert_path=str(tls_certs.server_cert),
                              key_path=str(tls_certs.server_key)).context()
    async with Cluster(tmp_path, broker={**keys, "tls_enable": True,
                                         "tls_client_trust_cert_path": str(tls_certs.ca)},
                       namesrv=keys) as cluster:
        config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), use_tls=True,
                              tls_trust_cert_path=str(tls_certs.ca))
        async with ConsoleServer(cluster.namesrv_addr, port=0, ssl=https,
                                 client=config) as web:
            assert web.url.startswith("https://127.0.0.1:")
            status, page = await asyncio.to_thread(fetch, f"{web.url}/cluster", tls_certs.ca)
            assert status == 200
            assert cluster.brokers[0].broker_addr in page  # read from the TLS cluster
            plain = web.url.replace("https://", "http://") + "/cluster"
            with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
                await asyncio.to_thread(fetch, plain, None)
