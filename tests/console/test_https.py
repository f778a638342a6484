"""The web console over HTTPS, in front of a cluster that takes TLS connections only:
the browser side is served with the given certificate, the console's own client connects
with TLS, and a plain HTTP request gets no page. A renewed certificate is served without a
restart."""

from __future__ import annotations

import asyncio
import http.client
import logging
import shutil
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.tls_certs import Certs, der, renew, served_certificate

from tidemq.cli.commands.server import https_context
from tidemq.client import ClientConfig
from tidemq.console import ConsoleServer
from tidemq.net.tls import ServerTlsContext, TlsMode, TlsServerSettings
from tidemq.testing import Cluster

pytestmark = pytest.mark.timeout(120)


def fetch(url: str, ca: Path | None) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    with urllib.request.urlopen(url, timeout=10, context=context) as answer:
        return answer.status, answer.read().decode()


async def test_console_over_https_for_a_tls_cluster(tmp_path: Path, tls_certs: Certs) -> None:
    keys = {"tls_server_mode": "enforcing", "tls_server_cert_path": str(tls_certs.server_cert),
            "tls_server_key_path": str(tls_certs.server_key)}
    https = ServerTlsContext(TlsServerSettings(
        mode=TlsMode.ENFORCING, cert_path=str(tls_certs.server_cert),
        key_path=str(tls_certs.server_key)))
    async with Cluster(tmp_path, broker={**keys, "tls_enable": True,
                                         "tls_client_trust_cert_path": str(tls_certs.ca)},
                       namesrv=keys) as cluster:
        config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), use_tls=True,
                              tls_trust_cert_path=str(tls_certs.ca))
        async with ConsoleServer(cluster.namesrv_addr, port=0, https=https,
                                 client=config) as web:
            assert web.url.startswith("https://127.0.0.1:")
            status, page = await asyncio.to_thread(fetch, f"{web.url}/cluster", tls_certs.ca)
            assert status == 200
            assert cluster.brokers[0].broker_addr in page  # read from the TLS cluster
            plain = web.url.replace("https://", "http://") + "/cluster"
            with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
                await asyncio.to_thread(fetch, plain, None)


def get(connection: http.client.HTTPSConnection, path: str) -> int:
    connection.request("GET", path)
    answer = connection.getresponse()
    answer.read()
    return answer.status


async def test_console_https_follows_renewed_files(tmp_path: Path, tls_certs: Certs,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    cert, key = tmp_path / "console.crt", tmp_path / "console.key"
    shutil.copyfile(tls_certs.server_cert, cert)
    shutil.copyfile(tls_certs.server_key, key)
    https = https_context(str(cert), str(key))  # what --https-cert / --https-key build
    assert https is not None
    https.recheck = 0.0  # look at the files on every connection
    old, new = der(tls_certs.server_cert), der(tls_certs.other_host_cert)
    async with ConsoleServer("127.0.0.1:9", port=0, https=https) as web:
        kept = http.client.HTTPSConnection(
            "127.0.0.1", web.port, timeout=10,
            context=ssl.create_default_context(cafile=str(tls_certs.ca)))
        try:
            assert await asyncio.to_thread(get, kept, "/login") == 303  # no users: no login
            shutil.copyfile(tls_certs.self_signed_cert, cert)  # a certificate without its key
            with caplog.at_level(logging.WARNING, logger="tidemq.net.tls"):
                assert await asyncio.to_thread(served_certificate, web.port) == old
            assert "cannot be loaded" in caplog.text and https.reloads == 0
            renew(cert, key, tls_certs.other_host_cert, tls_certs.other_host_key)
            assert await asyncio.to_thread(served_certificate, web.port) == new
            assert https.reloads == 1
            # the keep-alive connection opened before the renewal keeps its certificate
            assert await asyncio.to_thread(get, kept, "/login") == 303
            assert kept.sock is not None and kept.sock.getpeercert(binary_form=True) == old
        finally:
            kept.close()
