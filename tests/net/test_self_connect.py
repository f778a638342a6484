"""A dial whose own end the kernel picks as the port dialled meets itself; both clients
fail it as a refused dial, close it (so a server can listen there) and send nothing.
The collision, rare by chance, is made certain by binding the dial's own end."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from tests.net.support import ECHO, make_server, port_frees

from tidemq.codec.command import RemotingCommand
from tidemq.errors import ConnectFailed
from tidemq.net import RemotingClient
from tidemq.net.blocking import BlockingClient
from tidemq.net.ports import free_port


async def test_the_async_client_refuses_a_connection_to_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    loop = asyncio.get_running_loop()
    dial = loop.create_connection

    async def colliding(factory: Any, host: str, p: int, **kw: Any) -> Any:
        return await dial(factory, host, p, local_addr=(host, p), **kw)

    monkeypatch.setattr(loop, "create_connection", colliding)
    client = RemotingClient(request_timeout=2.0)
    try:
        with pytest.raises(ConnectFailed) as info:
            await client.request(address, RemotingCommand.request(ECHO))
        assert "met itself" in str(info.value) and info.value.address == address
        assert address not in client.connections
        monkeypatch.undo()
        assert port_frees(port)
        async with make_server(port=port):  # the server meant for the port starts
            answer = await client.request(address, RemotingCommand.request(ECHO, body=b"up"))
            assert answer.body == b"up"
    finally:
        await client.close()


async def test_the_blocking_client_refuses_a_connection_to_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    dial = socket.create_connection

    def colliding(where: tuple[str, int], timeout: float | None = None) -> socket.socket:
        return dial(where, timeout=timeout, source_address=where)

    monkeypatch.setattr(socket, "create_connection", colliding)
    with BlockingClient(connect_timeout=2.0, request_timeout=2.0) as client:
        with pytest.raises(ConnectFailed) as info:
            await asyncio.to_thread(client.request, address, RemotingCommand.request(ECHO))
        assert "met itself" in str(info.value)
        monkeypatch.undo()
        assert port_frees(port)
        async with make_server(port=port):
            answer = await asyncio.to_thread(
                client.request, address, RemotingCommand.request(ECHO, body=b"up"))
            assert answer.body == b"up"
