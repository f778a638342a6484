"""Both ends of the HA transfer stop when told to, even when the stop lands on the loop
step in which bytes from the other end arrive: a replica elected while its master
streams to it, a master stepping down while its replicas report."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tidemq.broker.replication.master import HaServer
from tidemq.broker.replication.replica import HaClient, _Link
from tidemq.codec.ha import FRAME_HEADER_SIZE, encode_frame_header, encode_report
from tidemq.store.message_store import MessageStore


async def test_a_stop_that_arrives_with_a_frame_ends_the_copy(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    writers: list[asyncio.StreamWriter] = []

    async def master(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with contextlib.suppress(ConnectionError):
            while True:  # empty frames at the replica's end: a master with nothing new
                writer.write(encode_frame_header(0, 0))
                await writer.drain()
                await asyncio.sleep(0.005)

    server = await asyncio.start_server(master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = HaClient(store, f"127.0.0.1:{port}", max_frame=1024 + FRAME_HEADER_SIZE,
                      heartbeat_ms=5000, housekeeping_ms=20_000)
    stopping: list[asyncio.Task[None]] = []
    original = _Link.buffer_updated

    def buffer_updated(self: _Link, nbytes: int) -> None:
        original(self, nbytes)
        if nbytes and client.frames >= 3 and not stopping:
            task = client._task
            assert task is not None
            stopping.append(task)
            task.cancel()  # the stop, in the very step the bytes came in

    monkeypatch.setattr(_Link, "buffer_updated", buffer_updated)
    try:
        client.start()
        while not stopping:
            await asyncio.sleep(0.01)
        done, _ = await asyncio.wait(stopping, timeout=5)
        assert done, "the HA client went on copying after it was stopped"
        assert stopping[0].cancelled()
    finally:
        for task in stopping:
            task.cancel()
        await asyncio.wait(stopping, timeout=5)
        for writer in writers:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        server.close()
        await server.wait_closed()


async def test_a_close_that_arrives_with_a_report_ends_the_master_side(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    server = HaServer(store, "127.0.0.1", 0, batch_size=1024, heartbeat_ms=5000,
                      housekeeping_ms=20_000, max_gap_not_in_sync=1 << 20)
    await server.start()
    stopping: list[asyncio.Task[None]] = []
    original = asyncio.StreamReader.read
    reports = 0

    async def read(self: asyncio.StreamReader, n: int = -1) -> bytes:
        nonlocal reports
        data = await original(self, n)
        reports += 1
        if data and reports >= 3 and not stopping:
            (task,) = [t for t in server._tasks
                       if t.get_coro().__name__ == "_serve"]  # type: ignore[union-attr]
            stopping.append(task)
            task.cancel()  # the close, in the very step the report came in
        return data

    monkeypatch.setattr(asyncio.StreamReader, "read", read)
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        while not stopping:  # a replica reporting its end
            writer.write(encode_report(0))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            await asyncio.sleep(0.005)
        done, _ = await asyncio.wait(stopping, timeout=5)
        assert done, "the master went on serving the replica after it was closed"
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        for task in stopping:
            task.cancel()
        await server.close()
