"""RemotingClient over real TCP: shared connections, timeouts, loss, reconnect."""

from __future__ import annotations

import asyncio
import socket

import pytest
from tests.net.support import ECHO, make_server

from tidemq.codec.command import RemotingCommand
from tidemq.errors import ConfigError, ConnectionLost, RequestTimeout
from tidemq.net import Connection, RemotingClient, RemotingServer
from tidemq.net.ports import free_port as _free_port

NEVER = 20020

pytestmark = pytest.mark.timeout(60)




async def test_concurrent_callers_share_one_connection(
    server: RemotingServer, client: RemotingClient
) -> None:
    calls = [
        client.request(server.address, RemotingCommand.request(ECHO, body=str(i).encode()))
        for i in range(20)
    ]
    responses = await asyncio.gather(*calls)
    assert [r.body for r in responses] == [str(i).encode() for i in range(20)]
    assert list(client.connections) == [server.address]
    assert len(server.connections) == 1


async def test_request_timeout_has_fields(server: RemotingServer, client: RemotingClient) -> None:
    async def never(_conn: Connection, _cmd: RemotingCommand) -> None:
        await asyncio.Event().wait()

    server.register(NEVER, never)
    request = RemotingCommand.request(NEVER)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RequestTimeout) as info:
        await client.request(server.address, request, timeout=0.2)
    assert 0.15 < loop.time() - started < 2.0
    error = info.value
    assert (error.address, error.code, error.opaque) == (server.address, NEVER, request.opaque)
    assert error.timeout_ms == pytest.approx(200)
    # the connection is still good and nothing is left pending
    response = await client.request(server.address, RemotingCommand.request(ECHO, body=b"x"))
    assert response.body == b"x"
    assert client.connections[server.address].pending_requests == 0


async def test_start_request_sends_on_an_open_connection_only(
    server: RemotingServer, client: RemotingClient
) -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[RemotingCommand] = loop.create_future()
    cmd = RemotingCommand.request(ECHO, body=b"now")
    assert not client.start_request(server.address, cmd, future)  # not dialled: the caller's
    assert not future.done() and client.connections == {}
    await client.request(server.address, RemotingCommand.request(ECHO, body=b"dial"))
    assert client.start_request(server.address, cmd, future, timeout=5.0)
    assert (await future).body == b"now"
    assert client.connections[server.address].pending_requests == 0


async def test_start_request_times_out_like_request(
    server: RemotingServer, client: RemotingClient
) -> None:
    async def never(_conn: Connection, _cmd: RemotingCommand) -> None:
        await asyncio.Event().wait()

    server.register(NEVER, never)
    await client.request(server.address, RemotingCommand.request(ECHO, body=b"dial"))
    future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    assert client.start_request(server.address, RemotingCommand.request(NEVER), future,
                                timeout=0.1)
    with pytest.raises(RequestTimeout):
        await future
    assert client.connections[server.address].pending_requests == 0


async def test_pending_fail_when_server_goes_away(client: RemotingClient) -> None:
    srv = make_server()
    await srv.start()
    started = asyncio.Event()

    async def never(_conn: Connection, _cmd: RemotingCommand) -> None:
        started.set()
        await asyncio.Event().wait()

    srv.register(NEVER, never)
    calls = [
        asyncio.ensure_future(client.request(srv.address, RemotingCommand.request(NEVER)))
        for _ in range(3)
    ]
    await started.wait()
    (server_side,) = srv.connections
    server_side.abort()
    for call in calls:
        with pytest.raises(ConnectionLost) as info:
            await call
        assert info.value.address == srv.address
    await srv.close(drain_timeout=0)


async def test_reconnects_after_server_restart(client: RemotingClient) -> None:
    first = make_server()
    await first.start()
    port = first.port
    address = f"127.0.0.1:{port}"
    assert (await client.request(address, RemotingCommand.request(ECHO, body=b"1"))).body == b"1"
    conn = client.connections[address]
    await first.close()
    await conn.wait_closed()
    assert address not in client.connections
    with pytest.raises(ConnectionLost):  # nobody listening now
        await client.request(address, RemotingCommand.request(ECHO))
    second = make_server(port=port)
    await second.start()
    try:
        response = await client.request(address, RemotingCommand.request(ECHO, body=b"2"))
        assert response.body == b"2"
        assert client.connections[address] is not conn
    finally:
        await second.close()


async def test_connect_refused_is_connection_lost(client: RemotingClient) -> None:
    address = f"127.0.0.1:{_free_port()}"
    with pytest.raises(ConnectionLost) as info:
        await client.request(address, RemotingCommand.request(ECHO))
    assert info.value.address == address
    assert isinstance(info.value.__cause__, OSError)


async def test_bad_address(client: RemotingClient) -> None:
    with pytest.raises(ConfigError):
        await client.request("no-port", RemotingCommand.request(ECHO))


async def test_closed_client_refuses(server: RemotingServer) -> None:
    cli = RemotingClient()
    await cli.request(server.address, RemotingCommand.request(ECHO))
    await cli.close()
    with pytest.raises(ConnectionLost):
        await cli.request(server.address, RemotingCommand.request(ECHO))


async def test_client_idle_close_then_redial(server: RemotingServer) -> None:
    async with RemotingClient(idle_seconds=0.2) as cli:
        await cli.request(server.address, RemotingCommand.request(ECHO))
        conn = cli.connections[server.address]
        await asyncio.wait_for(conn.wait_closed(), 5)  # nothing received for 0.2 s
        response = await cli.request(server.address, RemotingCommand.request(ECHO, body=b"b"))
        assert response.body == b"b"
        assert cli.connections[server.address] is not conn


async def test_request_to_peer_that_does_not_read_times_out() -> None:
    """A big request stuck behind flow control still honours its timeout."""
    accepted: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    loop = asyncio.get_running_loop()

    async def accept() -> None:
        sock, _ = await loop.sock_accept(listener)
        accepted.append(sock)  # never read from

    acceptor = asyncio.ensure_future(accept())
    try:
        async with RemotingClient() as cli:
            conn = await cli.connection(address)
            body = b"z" * (8 * 1024 * 1024)
            with pytest.raises(RequestTimeout):
                for _ in range(4):  # 32 MiB: more than the kernel buffers take
                    await conn.request(RemotingCommand.request(ECHO, body=body), timeout=0.3)
            assert conn.writing_paused
    finally:
        await acceptor
        for sock in accepted:
            sock.close()
        listener.close()


async def test_a_peer_answering_garbage_fails_the_request_without_a_second_warning(
        client: RemotingClient, caplog: pytest.LogCaptureFixture) -> None:
    """The requests awaiting answers carry the protocol error to their callers; the
    connection does not also warn of it (a CLI printed the error twice)."""
    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4096)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    web = await asyncio.start_server(http, "127.0.0.1", 0)
    address = f"127.0.0.1:{web.sockets[0].getsockname()[1]}"
    try:
        with caplog.at_level("INFO", logger="tidemq.net.connection"), \
                pytest.raises(ConnectionLost, match="speaks HTTP"):
            await client.request(address, RemotingCommand.request(ECHO))
    finally:
        web.close()
        await web.wait_closed()
    records = [r for r in caplog.records if r.name == "tidemq.net.connection"]
    assert [r.levelname for r in records] == ["INFO"], records
