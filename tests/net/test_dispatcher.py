"""Dispatcher: sync and async processors, answering rules, in-flight tracking."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.net.support import MemoryTransport

from tidemq.codec.command import FLAG_ONEWAY, RemotingCommand
from tidemq.codec.frame import frame_bytes
from tidemq.errors import ResponseCode, StoreReadOnly
from tidemq.net import Connection, Dispatcher

pytestmark = pytest.mark.timeout(60)


async def _wired(dispatcher: Dispatcher) -> tuple[Connection, MemoryTransport]:
    conn = Connection(dispatcher)
    transport = MemoryTransport(conn)
    conn.connection_made(transport)
    return conn, transport


async def _roundtrip(dispatcher: Dispatcher, *requests: RemotingCommand) -> list[RemotingCommand]:
    conn, transport = await _wired(dispatcher)
    for i, request in enumerate(requests):
        request.opaque = 500 + i
    conn.data_received(b"".join(frame_bytes(r) for r in requests))
    for _ in range(5):
        await asyncio.sleep(0)
    conn.close()
    return transport.written_commands()


async def test_sync_processor_answers_inline() -> None:
    dispatcher = Dispatcher()
    dispatcher.register(5, lambda _c, cmd: cmd.response(remark="sync"))
    conn, transport = await _wired(dispatcher)
    request = RemotingCommand.request(5)
    conn.data_received(frame_bytes(request))
    assert dispatcher.in_flight == 0  # no task was needed
    await asyncio.sleep(0)
    (response,) = transport.written_commands()
    assert (response.remark, response.opaque) == ("sync", request.opaque)
    conn.close()


async def test_response_opaque_and_flag_are_forced() -> None:
    dispatcher = Dispatcher()
    # a processor that builds its response from scratch
    dispatcher.register(5, lambda _c, _cmd: RemotingCommand(code=0, remark="fresh"))
    (response,) = await _roundtrip(dispatcher, RemotingCommand.request(5))
    assert response.opaque == 500 and response.is_response


async def test_error_mapping() -> None:
    def read_only(_c: Connection, _cmd: RemotingCommand) -> None:
        raise StoreReadOnly("DISK_FULL")

    def not_awaitable(_c: Connection, _cmd: RemotingCommand) -> Any:
        return 42  # a bug: neither a response nor an awaitable

    dispatcher = Dispatcher()
    dispatcher.register(5, read_only)
    dispatcher.register(6, not_awaitable)
    first, second = await _roundtrip(
        dispatcher, RemotingCommand.request(5), RemotingCommand.request(6)
    )
    assert first.code == ResponseCode.SYSTEM_ERROR
    assert first.remark == "store is read-only (DISK_FULL)"
    assert second.code == ResponseCode.SYSTEM_ERROR
    assert second.remark is not None and second.remark.startswith("TypeError")


async def test_oneway_errors_stay_silent() -> None:
    def boom(_c: Connection, _cmd: RemotingCommand) -> None:
        raise RuntimeError("nobody hears this")

    dispatcher = Dispatcher()
    dispatcher.register(5, boom)
    oneway = RemotingCommand.request(5, oneway=True)
    unknown = RemotingCommand.request(6)
    unknown.flag |= FLAG_ONEWAY
    assert await _roundtrip(dispatcher, oneway, unknown) == []


async def test_drain_and_cancel() -> None:
    release = asyncio.Event()
    dispatcher = Dispatcher()

    async def slow(_c: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await release.wait()
        return cmd.response()

    async def stuck(_c: Connection, _cmd: RemotingCommand) -> None:
        await asyncio.Event().wait()

    dispatcher.register(5, slow)
    dispatcher.register(6, stuck)
    conn, transport = await _wired(dispatcher)
    conn.data_received(frame_bytes(RemotingCommand.request(5)))
    conn.data_received(frame_bytes(RemotingCommand.request(6)))
    assert dispatcher.in_flight == 2
    assert not await dispatcher.drain(0.01)
    release.set()
    assert not await dispatcher.drain(0.05)  # the stuck one remains
    assert dispatcher.in_flight == 1
    dispatcher.cancel()
    assert await dispatcher.drain(1.0)
    assert [c.code for c in transport.written_commands()] == [0]
    conn.close()


async def test_unencodable_response_becomes_system_error() -> None:
    dispatcher = Dispatcher()
    dispatcher.register(5, lambda _c, cmd: cmd.response(remark="x" * (17 * 1024 * 1024)))
    (response,) = await _roundtrip(dispatcher, RemotingCommand.request(5))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None and "does not fit" in response.remark
