"""A frame that stops half-way: the whole records it brought are in the replica's queues
before the replica's heartbeat report acknowledges them, and once the connection ends,
not only when the next frame completes (which may never come: a master that died)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tidemq.broker.replication.replica import HaClient
from tidemq.codec.ha import FRAME_HEADER_SIZE, ReportDecoder, encode_frame_header
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore

RECORDS = 5


def master_log(root: Path) -> tuple[bytes, int]:
    """A master's log of RECORDS whole records and the first bytes of one more, and where
    the whole ones end."""
    store = MessageStore(StoreConfig(store_path_root_dir=str(root),
                                     mapped_file_size_commit_log=64 * 1024))
    store.start()
    try:
        puts = [store.put("T", 0, MessageInput(b"m%d" % i)) for i in range(RECORDS + 1)]
        ends = [put.phys_offsets[0] + put.sizes[0] for put in puts]
        wire = bytes(store.read_log(0, 1 << 20) or b"")
    finally:
        store.shutdown()
    return wire[: ends[RECORDS - 1] + 10], ends[RECORDS - 1]


@contextlib.asynccontextmanager
async def fake_master(master: Callable[..., Awaitable[None]]) -> AsyncIterator[int]:
    """A master on the yielded port: ``master(reader, writer)`` serves each replica's
    connection; on leaving, every connection still served is cancelled and closed."""
    handlers: set[asyncio.Task[object]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await master(reader, writer)
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


@contextlib.asynccontextmanager
async def replicating(store: MessageStore, master: Callable[..., Awaitable[None]],
                      heartbeat_ms: int) -> AsyncIterator[HaClient]:
    async with fake_master(master) as port:
        store.replica = True
        client = HaClient(store, f"127.0.0.1:{port}",
                          max_frame=(1 << 20) + FRAME_HEADER_SIZE,
                          heartbeat_ms=heartbeat_ms, housekeeping_ms=60_000)
        client.start()
        try:
            yield client
        finally:
            await client.stop()


async def reports(reader: asyncio.StreamReader) -> AsyncIterator[int]:
    decoder = ReportDecoder()
    while data := await reader.read(64):
        offset = decoder.receive(data)
        if offset is not None:
            yield offset


@pytest.mark.timeout(60)
async def test_a_heartbeat_report_follows_the_dispatch(store: MessageStore, tmp_path: Path
                                                       ) -> None:
    wire, whole = master_log(tmp_path / "master")
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(encode_frame_header(0, len(wire) + 1000) + wire)  # the rest never comes
        async for offset in reports(reader):
            if offset >= len(wire) and not seen.done():
                # what a SYNC_MASTER answers its senders on: the queues must hold it now
                seen.set_result(store.max_offset("T", 0) if store.wait_dispatched() else -1)

    async with replicating(store, master, heartbeat_ms=100):
        assert await asyncio.wait_for(seen, 30) == RECORDS
    assert store.commitlog.max_offset == len(wire) > whole


@pytest.mark.timeout(60)
async def test_a_connection_that_ends_mid_frame_leaves_its_records_readable(
        store: MessageStore, tmp_path: Path) -> None:
    wire, _ = master_log(tmp_path / "master")
    connections: asyncio.Queue[int] = asyncio.Queue()

    async def master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async for offset in reports(reader):
            await connections.put(offset)
            if offset == 0:
                writer.write(encode_frame_header(0, len(wire) + 1000) + wire)
                await writer.drain()
                while store.commitlog.max_offset < len(wire):  # the replica holds it all
                    await asyncio.sleep(0.01)
            break  # the master dies mid-frame

    async with replicating(store, master, heartbeat_ms=60_000):
        assert await asyncio.wait_for(connections.get(), 30) == 0
        # the replica reconnects after the first connection ended, reporting what it holds
        assert await asyncio.wait_for(connections.get(), 30) == len(wire)
        assert store.wait_dispatched()
        assert store.max_offset("T", 0) == RECORDS
