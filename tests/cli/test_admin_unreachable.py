"""``tidemq admin -n ADDRESS`` where no name server answers: one ``error:`` line that
says what is at that address -- nothing, no such host, a web server, or a broker (and
``-b`` given a name server's address)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from tests.cli.conftest import ThreadedCluster
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


def test_a_brokers_address_as_the_name_server_is_said_to_be_a_broker(
        cluster: ThreadedCluster) -> None:
    """A broker's port given as -n (10911 for 9876, the usual slip): the broker refuses
    the name server's request saying what it is and what the request needs."""
    broker = cluster.broker_addrs[0]
    code, err = _admin(broker)
    assert code == 1
    assert f"error: REQUEST_CODE_NOT_SUPPORTED(3) from {broker}:" in err, err
    assert "GET_ALL_TOPIC_LIST_FROM_NAMESERVER" in err, err
    assert "this is a broker (broker-a)" in err, err
    assert "a name server's address" in err, err


def test_a_name_servers_address_as_a_broker_is_said_to_be_a_name_server(
        cluster: ThreadedCluster) -> None:
    namesrv = cluster.namesrv
    result = CliRunner().invoke(app, ["admin", "brokerStatus", "-b", namesrv,
                                      "-n", namesrv])
    err = " ".join(result.stderr.split())
    assert result.exit_code == 1
    assert f"error: REQUEST_CODE_NOT_SUPPORTED(3) from {namesrv}:" in err, err
    assert "GET_BROKER_RUNTIME_INFO" in err, err
    assert "this is a name server" in err, err
    assert "a broker's address" in err, err
