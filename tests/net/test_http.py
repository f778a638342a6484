"""MetricsHttpServer: GET /metrics over real TCP, and the answers to everything else."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import ssl
from pathlib import Path

import pytest
from tests.tls_certs import Certs, der, renew, served_certificate

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.frame import encode_command
from tidemq.net.http import READ_TIMEOUT, MetricsHttpServer, start_metrics
from tidemq.net.server_keys import ServerKeys
from tidemq.net.tls import ServerTlsContext, TlsMode, TlsServerSettings


async def exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()  # the server closes after one answer
    writer.close()
    await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), headers, body


async def test_metrics_get_head_and_errors() -> None:
    calls = []

    def render() -> bytes:
        calls.append(1)
        return b"up 1\n"

    async with MetricsHttpServer(render, "127.0.0.1", 0) as server:
        assert server.port > 0 and server.address.endswith(f":{server.port}")
        status, headers, body = await exchange(server.port, b"GET /metrics HTTP/1.1\r\n"
                                                            b"Host: x\r\n\r\n")
        assert (status, body) == (200, b"up 1\n")
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert headers["Content-Length"] == "5" and headers["Connection"] == "close"
        status, headers, body = await exchange(server.port, b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n")
        assert (status, body, headers["Content-Length"]) == (200, b"", "5")
        assert (await exchange(server.port, b"GET / HTTP/1.1\r\n\r\n"))[0] == 200
        assert (await exchange(server.port, b"GET /other HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await exchange(server.port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await exchange(server.port, b"garbage\r\n\r\n"))[0] == 400
        huge = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10_000 + b"\r\n\r\n"
        # closed with the unread rest of the head: the peer may see a reset first
        with contextlib.suppress(ConnectionResetError):
            assert (await exchange(server.port, huge))[0] == 400
        assert len(calls) == 3


async def test_a_remoting_frame_is_answered_at_once() -> None:
    """A RocketMQ client pointed at the metrics port: its frame (which holds no blank
    line, and whose sender waits for an answer without closing) gets a 400 at once, not
    when the head's read times out; so do other bytes no method name begins with."""
    frame = b"".join(encode_command(
        RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)))
    async with MetricsHttpServer(lambda: b"up 1\n", "127.0.0.1", 0) as server:
        for first in (frame, b"G\x00", b"GETTINGLONGERTHANAMETHOD", b" /metrics HTTP/1.1"):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(first)
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), READ_TIMEOUT / 2)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            assert data.startswith(b"HTTP/1.1 400 Bad Request"), (first, data)
            assert data.endswith(b"not an HTTP request\n"), (first, data)


async def test_a_failing_render_is_a_500_and_the_server_goes_on() -> None:
    def render() -> bytes:
        raise RuntimeError("boom")

    async with MetricsHttpServer(render, "127.0.0.1", 0) as server:
        status, _, body = await exchange(server.port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status == 500 and b"failed" in body
        server.render = lambda: b"ok\n"
        assert (await exchange(server.port, b"GET /metrics HTTP/1.1\r\n\r\n"))[2] == b"ok\n"


async def test_close_drops_a_silent_client() -> None:
    server = MetricsHttpServer(lambda: b"", "127.0.0.1", 0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /metrics HTTP/1.1\r\n")  # the head never ends
    await writer.drain()
    await asyncio.wait_for(server.close(), 5)
    # closed before its partial head was read, the connection is reset (TCP's way), which
    # drops the client as well
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    with contextlib.suppress(ConnectionResetError):
        await writer.wait_closed()


async def test_metrics_over_https(tls_certs: Certs) -> None:
    https = ServerTlsContext(TlsServerSettings(
        mode=TlsMode.ENFORCING, cert_path=str(tls_certs.server_cert),
        key_path=str(tls_certs.server_key)))
    async with MetricsHttpServer(lambda: b"up 1\n", "127.0.0.1", 0, https=https) as server:
        client = ssl.create_default_context(cafile=str(tls_certs.ca))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=client)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await reader.read()
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()
        assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"\r\n\r\nup 1\n")
        # plain HTTP to the HTTPS port gets no metrics
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            assert b"up 1" not in await reader.read()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_https_follows_renewed_files(tls_certs: Certs, tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    cert, key = tmp_path / "metrics.crt", tmp_path / "metrics.key"
    shutil.copyfile(tls_certs.server_cert, cert)
    shutil.copyfile(tls_certs.server_key, key)
    https = ServerTlsContext(TlsServerSettings(mode=TlsMode.ENFORCING, cert_path=str(cert),
                                               key_path=str(key)))
    https.recheck = 0.0  # look at the files on every connection
    old, new = der(tls_certs.server_cert), der(tls_certs.other_host_cert)
    async with MetricsHttpServer(lambda: b"up 1\n", "127.0.0.1", 0, https=https) as server:
        client = ssl.create_default_context(cafile=str(tls_certs.ca))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=client)
        # half way through the documented renewal (the new key, the old certificate)
        shutil.copyfile(tls_certs.other_host_key, key)
        with caplog.at_level(logging.WARNING, logger="tidemq.net.tls"):
            assert await asyncio.to_thread(served_certificate, server.port) == old
        assert "cannot be loaded" in caplog.text and https.reloads == 0
        # a half-written certificate is not loaded either
        cert.write_bytes(tls_certs.other_host_cert.read_bytes()[:200])
        assert await asyncio.to_thread(served_certificate, server.port) == old
        assert https.reloads == 0
        renew(cert, key, tls_certs.other_host_cert, tls_certs.other_host_key)
        assert await asyncio.to_thread(served_certificate, server.port) == new
        assert https.reloads == 1
        # the connection opened before the renewal goes on with the certificate it had
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await reader.read()
        assert writer.get_extra_info("ssl_object").getpeercert(binary_form=True) == old
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()
        assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"\r\n\r\nup 1\n")


async def test_start_metrics_serves_what_the_keys_say_and_survives_a_taken_port(
        caplog: pytest.LogCaptureFixture) -> None:
    """A server's metrics endpoint as its keys configure it: none on port 0, served with
    its credentials, a warning when other machines reach it without any, and an error but
    no failure when the port is taken (the server serves on without metrics)."""
    def render() -> bytes:
        return b"up 1\n"

    log = logging.getLogger("test.metrics")
    assert await start_metrics(ServerKeys(), render, server="S", reach="r", logger=log) is None
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    keys = ServerKeys(metrics_port=free, metrics_auth_token="t0k")
    metrics = await start_metrics(keys, render, server="S", reach="r", logger=log)
    assert metrics is not None
    try:
        status, _, _ = await exchange(metrics.port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status == 401
        status, _, body = await exchange(
            metrics.port, b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer t0k\r\n\r\n")
        assert (status, body) == (200, b"up 1\n")
        with caplog.at_level(logging.WARNING, logger="test.metrics"):
            taken = await start_metrics(ServerKeys(metrics_port=metrics.port,
                                                   metrics_bind_address="0.0.0.0"),
                                        render, server="S", reach="read r", logger=log)
        assert taken is None
        assert f"metricsPort {metrics.port}: cannot serve metrics" in caplog.text
        assert "S's metrics endpoint listens on 0.0.0.0" in caplog.text
        assert "read r" in caplog.text
    finally:
        await metrics.close()
