"""Connection: opaque matching, write coalescing, close semantics, causes of loss."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import types
from typing import Any

import pytest
from tests.net.support import MemoryTransport

from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand
from tidemq.codec.frame import frame_bytes
from tidemq.errors import ConnectionLost, RemoteProtocolError, RequestTimeout
from tidemq.net import Connection, ConnState, Dispatcher
from tidemq.net import connection as connection_module

pytestmark = pytest.mark.timeout(60)


def _echo(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(body=cmd.body)


async def _memory_connection(**kwargs: Any) -> tuple[Connection, MemoryTransport]:
    dispatcher = Dispatcher()
    dispatcher.register(1, _echo)
    conn = Connection(dispatcher, **kwargs)
    transport = MemoryTransport(conn)
    conn.connection_made(transport)
    return conn, transport


async def _one_iteration() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_pipelined_responses_leave_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # Quick requests: however slow this machine, their handling stays under the hold.
    monkeypatch.setattr(connection_module, "_HOLD_ANSWERS", 60.0)
    conn, transport = await _memory_connection()
    assert conn.remote_address == "10.0.0.7:5555"
    frames = b""
    for i in range(10):
        request = RemotingCommand.request(1, body=bytes([i]))
        request.opaque = 100 + i
        frames += frame_bytes(request)
    conn.data_received(frames[:7])  # a frame split anywhere is fine
    conn.data_received(frames[7:])
    await _one_iteration()
    assert len(transport.writes) == 1
    responses = transport.written_commands()
    assert [(r.opaque, r.body) for r in responses] == [(100 + i, bytes([i])) for i in range(10)]
    assert all(r.flag & FLAG_RESPONSE for r in responses)
    conn.close()


async def test_answers_of_a_read_leave_before_its_callback_returns() -> None:
    """A plain processor's answer is written within the receive callback: a callback of
    its own would wait for the GIL while the store's dispatch thread, woken by the
    request's append, holds it. An answer given later still leaves with the loop."""
    dispatcher = Dispatcher()
    dispatcher.register(1, _echo)
    later = asyncio.get_running_loop().create_future()

    async def slow(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await later
        return cmd.response(remark="later")

    dispatcher.register(2, slow)
    conn = Connection(dispatcher)
    transport = MemoryTransport(conn)
    conn.connection_made(transport)
    first, second = RemotingCommand.request(1, body=b"a"), RemotingCommand.request(2)
    first.opaque, second.opaque = 1, 2
    conn.data_received(frame_bytes(first) + frame_bytes(second))
    assert [(c.opaque, c.body) for c in transport.written_commands()] == [(1, b"a")]
    later.set_result(None)
    await _one_iteration()
    await _one_iteration()
    assert [(c.opaque, c.remark) for c in transport.written_commands()][1:] == [(2, "later")]
    assert len(transport.writes) == 2
    conn.close()


async def test_response_matched_by_opaque_and_strays_ignored() -> None:
    conn, transport = await _memory_connection()
    first = asyncio.ensure_future(conn.request(RemotingCommand.request(7), timeout=5))
    second = asyncio.ensure_future(conn.request(RemotingCommand.request(8), timeout=5))
    await _one_iteration()
    sent = transport.written_commands()
    assert [c.code for c in sent] == [7, 8]
    assert sent[0].opaque != sent[1].opaque
    stray = sent[0].response(remark="stray")
    stray.opaque = 999_999
    answers = [sent[1].response(remark="b"), stray, sent[0].response(remark="a")]
    conn.data_received(b"".join(frame_bytes(a) for a in answers))
    assert (await first).remark == "a"
    assert (await second).remark == "b"
    assert conn.pending_requests == 0
    conn.close()


async def test_sweep_waits_for_the_earliest_deadline() -> None:
    """A request pending for long (a held long poll) does not wake the loop every sweep
    period: the sweep runs when the earliest deadline is due, and a later short request
    brings it forward."""
    conn, _transport = await _memory_connection()
    sweeps = 0

    def profile(frame: types.FrameType, event: str, _arg: object) -> None:
        nonlocal sweeps
        if event == "call" and frame.f_code is Connection._sweep.__code__:
            sweeps += 1

    held = asyncio.ensure_future(conn.request(RemotingCommand.request(7), timeout=60))
    await _one_iteration()
    sys.setprofile(profile)
    try:
        with pytest.raises(RequestTimeout):  # sent after, due first: the sweep moves up
            await conn.request(RemotingCommand.request(8), timeout=0.5)
    finally:
        sys.setprofile(None)
    assert 1 <= sweeps <= 2  # every 50 ms, this would be ten
    assert not held.done() and conn.pending_requests == 1
    conn.close()
    with pytest.raises(ConnectionLost):
        await held


async def test_close_fails_pending_and_runs_callbacks_once() -> None:
    conn, _transport = await _memory_connection()
    seen: list[ConnectionLost] = []
    conn.on_close(lambda _c, error: seen.append(error))
    pending = asyncio.ensure_future(conn.request(RemotingCommand.request(7), timeout=5))
    await _one_iteration()
    conn.close("shutting down")
    conn.close("again")  # no-op
    with pytest.raises(ConnectionLost) as info:
        await pending
    assert info.value.reason == "shutting down"
    await conn.wait_closed()
    assert conn.state is ConnState.CLOSED
    assert len(seen) == 1 and seen[0].reason == "shutting down"
    assert not conn.send_response(RemotingCommand(code=0, opaque=1))
    with pytest.raises(ConnectionLost):
        await conn.request(RemotingCommand.request(7), timeout=5)
    late: list[ConnectionLost] = []
    conn.on_close(lambda _c, error: late.append(error))  # registered after the fact
    await _one_iteration()
    assert len(late) == 1


async def test_protocol_error_is_the_cause() -> None:
    conn, transport = await _memory_connection()
    pending = asyncio.ensure_future(conn.request(RemotingCommand.request(7), timeout=5))
    await _one_iteration()
    conn.data_received(struct.pack(">i", 2))  # length below the minimum
    assert transport.closing
    with pytest.raises(ConnectionLost) as info:
        await pending
    assert isinstance(info.value.__cause__, RemoteProtocolError)
    assert info.value.reason.startswith("protocol error")
    conn.data_received(frame_bytes(RemotingCommand.request(1)))  # ignored once closing
    await conn.wait_closed()


async def test_server_stops_reading_on_write_backpressure() -> None:
    conn, transport = await _memory_connection(pause_reads_on_backpressure=True)
    conn.pause_writing()
    assert conn.writing_paused and not transport.reading
    conn.resume_writing()
    assert not conn.writing_paused and transport.reading
    conn.stop_reading()
    conn.pause_writing()
    conn.resume_writing()
    assert not transport.reading  # a stopped connection stays stopped
    conn.close()


async def test_drain_waits_for_resume_and_fails_on_close() -> None:
    conn, _transport = await _memory_connection()
    await conn.drain()  # not paused: returns at once
    conn.pause_writing()
    waiter = asyncio.ensure_future(conn.drain())
    await _one_iteration()
    assert not waiter.done()
    conn.resume_writing()
    await waiter
    conn.pause_writing()
    waiter = asyncio.ensure_future(conn.drain())
    await _one_iteration()
    conn.close()
    with pytest.raises(ConnectionLost):
        await waiter


async def test_idle_close_with_memory_transport() -> None:
    conn, transport = await _memory_connection(idle_seconds=0.1)
    await conn.wait_closed()
    assert transport.closing


async def test_reset_by_peer_is_the_cause() -> None:
    """A peer that resets the socket: pending requests fail with the OS error as cause."""
    loop = asyncio.get_running_loop()
    got_request = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        got_request.set()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # close with linger 0: the peer sees a reset

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        _transport, conn = await loop.create_connection(
            lambda: Connection(Dispatcher()), "127.0.0.1", port
        )
        with pytest.raises(ConnectionLost) as info:
            await conn.request(RemotingCommand.request(7), timeout=5)
        assert got_request.is_set()
        cause = info.value.__cause__
        assert isinstance(cause, ConnectionResetError)
        assert "reset" in info.value.reason
        assert info.value.address == f"127.0.0.1:{port}"
    finally:
        listener.close()
        await listener.wait_closed()
