"""A replica dialling a master that is down, on an HA port in the ephemeral range, may
meet itself (the kernel picks the port dialled as the dial's own end). It must not copy
its own reports as frames nor keep the port: it says why and dials again, and the master
that restarts there listens and is copied. The collision, rare by chance, is made
certain by binding the dial's own end."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from tidemq.broker.replication.replica import HaClient
from tidemq.codec.ha import FRAME_HEADER_SIZE, encode_frame_header
from tidemq.net.ports import free_port
from tidemq.store.message_store import MessageStore


async def test_a_replica_that_meets_itself_dials_again(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    loop = asyncio.get_running_loop()
    dial = loop.create_connection
    dials: list[int] = []
    errors: list[str] = []  # why the previous dial failed, as each dial starts
    dialled_again = asyncio.Event()

    async def colliding(factory: Any, host: str, p: int, **kw: Any) -> Any:
        dials.append(p)
        errors.append(client.last_error)
        if len(dials) == 1:
            return await dial(factory, host, p, local_addr=(host, p), **kw)
        dialled_again.set()
        return await dial(factory, host, p, **kw)

    monkeypatch.setattr(loop, "create_connection", colliding)
    client = HaClient(store, f"127.0.0.1:{port}", max_frame=1024 + FRAME_HEADER_SIZE,
                      heartbeat_ms=5000, housekeeping_ms=20_000)
    writers: list[asyncio.StreamWriter] = []

    async def master(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        writer.write(encode_frame_header(0, 0))
        await writer.drain()

    client.start()
    server = None
    try:
        await asyncio.wait_for(dialled_again.wait(), 10)
        assert "met itself" in errors[1], errors
        assert not client.connected.is_set() and store.commitlog.max_offset == 0
        server = await asyncio.start_server(master, "127.0.0.1", port)  # the port is free
        await asyncio.wait_for(client.connected.wait(), 10)
    finally:
        await client.stop()
        for writer in writers:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        if server is not None:
            server.close()
            await server.wait_closed()
