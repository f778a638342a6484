"""``tidemq admin -n ADDRESS`` where no name server answers: one ``error:`` line that
says what is at that address -- nothing, no such host, or a web server."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from tests.cli.runner import CliRunner

from tidemq.cli.main import app
from tidemq.net.http import MetricsHttpServer
from tidemq.net.ports import free_port


def _admin(namesrv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["admin", "topicList", "-n", namesrv])
    return result.exit_code, " ".join(result.stderr.split())


@pytest.fixture
def web_server() -> Iterator[str]:
    """A web server that answers what it cannot parse at once, as the console does."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        thread.join(10)


@pytest.fixture
def metrics_port() -> Iterator[str]:
    """A metrics endpoint (a server's ``metricsPort``) on its own event loop."""
    loop = asyncio.new_event_loop()
    server = MetricsHttpServer(lambda: b"up 1\n", "127.0.0.1", 0)
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server.address
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_nothing_listening_is_a_refused_connection() -> None:
    address = f"127.0.0.1:{free_port()}"
    code, err = _admin(address)
    assert code == 1
    assert err.startswith(f"error: cannot connect to {address}: connection refused"), err


def test_an_unknown_host_is_named() -> None:
    code, err = _admin("no-such-host.invalid:9876")
    assert code == 1
    assert "error: cannot connect to no-such-host.invalid:9876: unknown host" in err, err


def test_a_web_server_is_said_to_speak_http(web_server: str) -> None:
    code, err = _admin(web_server)
    assert code == 1
    assert f"error: connection to {web_server} lost" in err, err
    assert "the peer speaks HTTP, not RocketMQ remoting" in err, err


def test_a_metrics_port_is_said_to_speak_http(metrics_port: str) -> None:
    """The metrics endpoint answers a remoting frame at once: the command fails with what
    it reached, well within its request timeout."""
    code, err = _admin(metrics_port)
    assert code == 1
    assert f"error: connection to {metrics_port} lost" in err, err
    assert "the peer speaks HTTP, not RocketMQ remoting" in err, err
