"""RemotingServer over real TCP on 127.0.0.1: answering rules, bad peers, shutdown."""

from __future__ import annotations

import asyncio
import logging
import mmap
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from tests.net.support import ECHO, ECHO_ASYNC, RawPeer, make_server

from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand
from tidemq.codec.frame import FrameDecoder, FrameTooLarge, FrameTooLargeToSend, frame_bytes
from tidemq.errors import ConnectionLost, ResponseCode, error_for_code
from tidemq.net import Connection, RemotingClient, RemotingServer
from tidemq.net import connection as connection_module
from tidemq.net.rate_limited_log import RateLimitedLog

SLOW = 20010
FAIL = 20011

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("code", [ECHO, ECHO_ASYNC])
async def test_round_trip(server: RemotingServer, client: RemotingClient, code: int) -> None:
    request = RemotingCommand.request(code, {"topic": "T"}, b"hello")
    response = await client.request(server.address, request)
    assert response.code == ResponseCode.SUCCESS
    assert response.flag & FLAG_RESPONSE
    assert response.opaque == request.opaque
    assert response.ext_fields == {"topic": "T"}
    assert response.body == b"hello"


async def test_concurrent_requests_answered_out_of_order(
    server: RemotingServer, client: RemotingClient
) -> None:
    count = 50
    gates = {i: asyncio.Event() for i in range(count)}
    arrived = asyncio.Event()
    seen: list[int] = []

    async def slow(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        i = int(cmd.ext_fields["i"])
        seen.append(i)
        if len(seen) == count:
            arrived.set()
        await gates[i].wait()
        return cmd.response(ext_fields={"i": str(i)})

    server.register(SLOW, slow)
    requests = [RemotingCommand.request(SLOW, {"i": str(i)}) for i in range(count)]
    calls = [asyncio.ensure_future(client.request(server.address, r)) for r in requests]
    await arrived.wait()  # all in flight at once on the one connection
    assert len(client.connections) == 1
    for i in reversed(range(count)):
        gates[i].set()
    responses = await asyncio.gather(*calls)
    assert [r.ext_fields["i"] for r in responses] == [str(i) for i in range(count)]


async def test_an_answer_leaves_before_a_slow_next_request_of_the_same_read_is_handled(
        server: RemotingServer) -> None:
    """Requests that arrive in one read are handled in turn; once handling them has taken
    a while, the answers so far go out before the next one is handled (the peer can work
    on them meanwhile) instead of all together after the last."""
    first_read = threading.Event()
    seen: list[bool] = []

    def handle(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.ext_fields["i"] == "1":
            time.sleep(0.002)  # a slow request (the loop is blocked: nothing is flushed)
        else:  # blocks the loop until the peer read the first answer, or 5 s
            seen.append(first_read.wait(5.0))
        return cmd.response(ext_fields={"i": cmd.ext_fields["i"]})

    server.register(SLOW, handle)
    host, port = server.address.rsplit(":", 1)
    answers: list[str] = []

    def peer() -> None:
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"".join(frame_bytes(RemotingCommand.request(SLOW, {"i": str(i)}))
                                  for i in (1, 2)))  # one write: most likely one read
            decoder = FrameDecoder()
            while len(answers) < 2:
                data = sock.recv(65536)
                if not data:
                    return
                decoder.receive_data(data)
                while (cmd := decoder.next_command()) is not None:
                    answers.append(cmd.ext_fields["i"])
                    first_read.set()

    await asyncio.to_thread(peer)
    assert answers == ["1", "2"]
    assert seen == [True]


async def test_unknown_code(server: RemotingServer, client: RemotingClient) -> None:
    response = await client.request(server.address, RemotingCommand.request(999))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 999 not supported"


async def test_register_default(server: RemotingServer, client: RemotingClient) -> None:
    def fallback(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(remark=f"default got {cmd.code}")

    server.register_default(fallback)
    response = await client.request(server.address, RemotingCommand.request(999))
    assert (response.code, response.remark) == (0, "default got 999")


@pytest.mark.parametrize("is_async", [False, True])
async def test_processor_exception_is_system_error(
    server: RemotingServer, client: RemotingClient, is_async: bool
) -> None:
    def boom(_conn: Connection, _cmd: RemotingCommand) -> RemotingCommand:
        raise ValueError("disk on fire")

    async def boom_async(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0)
        return boom(conn, cmd)

    server.register(FAIL, boom_async if is_async else boom)
    response = await client.request(server.address, RemotingCommand.request(FAIL))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "ValueError: disk on fire"
    # the connection keeps working
    again = await client.request(server.address, RemotingCommand.request(ECHO, body=b"ok"))
    assert again.body == b"ok"
    assert len(server.connections) == 1


async def test_broker_error_keeps_its_code(server: RemotingServer, client: RemotingClient) -> None:
    async def missing(_conn: Connection, _cmd: RemotingCommand) -> RemotingCommand:
        raise error_for_code(ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist")

    server.register(FAIL, missing)
    response = await client.request(server.address, RemotingCommand.request(FAIL))
    assert (response.code, response.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist")


async def test_oneway_gets_no_response(
    server: RemotingServer, raw_peers: list[RawPeer]
) -> None:
    got = asyncio.Event()

    def record(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        got.set()
        return cmd.response(remark="must not be sent")

    server.register(FAIL, record)
    peer = await RawPeer.connect(server.port)
    raw_peers.append(peer)
    await peer.send(RemotingCommand.request(FAIL, oneway=True))
    await peer.send(RemotingCommand.request(999, oneway=True))  # unknown code, still silent
    follow_up = RemotingCommand.request(ECHO, body=b"next")
    follow_up.opaque = 77
    await peer.send(follow_up)
    await got.wait()
    response = await peer.read_command()
    assert (response.opaque, response.body) == (77, b"next")


async def test_client_oneway(server: RemotingServer, client: RemotingClient) -> None:
    got: asyncio.Queue[RemotingCommand] = asyncio.Queue()

    def record(_conn: Connection, cmd: RemotingCommand) -> None:
        got.put_nowait(cmd)

    server.register(FAIL, record)
    await client.oneway(server.address, RemotingCommand.request(FAIL, {"k": "v"}))
    cmd = await asyncio.wait_for(got.get(), 5)
    assert cmd.is_oneway and cmd.ext_fields == {"k": "v"}


async def test_garbage_closes_only_that_connection(
    server: RemotingServer, client: RemotingClient, raw_peers: list[RawPeer]
) -> None:
    await client.request(server.address, RemotingCommand.request(ECHO))
    bad = await RawPeer.connect(server.port)
    raw_peers.append(bad)
    # a plausible length, then a header word naming serialization type 9
    await bad.send(struct.pack(">ii", 12, (9 << 24) | 8) + b"\x00" * 8)
    await bad.wait_eof()
    response = await client.request(server.address, RemotingCommand.request(ECHO, body=b"still"))
    assert response.body == b"still"


async def test_undecodable_header_closes(server: RemotingServer, raw_peers: list[RawPeer]) -> None:
    peer = await RawPeer.connect(server.port)
    raw_peers.append(peer)
    header = b"{not json"
    await peer.send(struct.pack(">ii", 4 + len(header), len(header)) + header)
    await peer.wait_eof()


async def test_oversized_frame_is_answered_skipped_and_the_connection_serves_on(
        raw_peers: list[RawPeer]) -> None:
    async with make_server(max_frame_size=1024) as small:
        peer = await RawPeer.connect(small.port)
        raw_peers.append(peer)
        big = RemotingCommand.request(ECHO, {"topic": "T"}, body=b"x" * 300_000)
        big.opaque = 41
        await peer.send(big)
        resp = await peer.read_command()
        assert (resp.code, resp.opaque, resp.is_response) == (
            ResponseCode.MESSAGE_ILLEGAL, 41, True)
        size = len(frame_bytes(big)) - 4
        assert resp.remark and f"{size} bytes" in resp.remark and "1024" in resp.remark
        after = RemotingCommand.request(ECHO, body=b"next")
        after.opaque = 42
        await peer.send(after)
        resp = await peer.read_command()
        assert (resp.code, resp.opaque, resp.body) == (0, 42, b"next")


async def test_oversized_oneway_gets_no_answer(raw_peers: list[RawPeer]) -> None:
    async with make_server(max_frame_size=1024) as small:
        peer = await RawPeer.connect(small.port)
        raw_peers.append(peer)
        await peer.send(RemotingCommand.request(ECHO, body=b"x" * 5000, oneway=True))
        after = RemotingCommand.request(ECHO, body=b"next")
        after.opaque = 7
        await peer.send(after)
        resp = await peer.read_command()
        assert (resp.code, resp.opaque) == (0, 7)  # the first answer is this one's


async def test_oversized_frame_without_a_readable_header_closes(
        raw_peers: list[RawPeer]) -> None:
    async with make_server(max_frame_size=1024) as small:
        peer = await RawPeer.connect(small.port)
        raw_peers.append(peer)
        # a header longer than the decoder waits for (64 KiB): nothing to answer
        await peer.send(struct.pack(">ii", 200_000, 100_000) + b"{not json")
        await peer.wait_eof()


async def test_default_limit_is_16_mib(server: RemotingServer, raw_peers: list[RawPeer]) -> None:
    peer = await RawPeer.connect(server.port)
    raw_peers.append(peer)
    header = frame_bytes(RemotingCommand.request(ECHO))[8:]
    await peer.send(struct.pack(">ii", 16 * 1024 * 1024 + 1, len(header)) + header)
    resp = await peer.read_command()
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert resp.remark and "16777217 bytes" in resp.remark and "16777216" in resp.remark


async def test_a_client_refuses_to_send_over_its_frame_limit(server: RemotingServer) -> None:
    cli = RemotingClient(request_timeout=5.0, max_frame_size=2048)
    try:
        with pytest.raises(FrameTooLargeToSend) as info:
            await cli.request(server.address, RemotingCommand.request(ECHO, body=b"x" * 3000))
        assert info.value.limit == 2048 and info.value.size > 3000
        ok = await cli.request(server.address, RemotingCommand.request(ECHO, body=b"y" * 100))
        assert ok.body == b"y" * 100
    finally:
        await cli.close()


async def test_an_oversized_response_fails_only_its_request(server: RemotingServer) -> None:
    server.register(FAIL, lambda _conn, cmd: cmd.response(body=b"x" * 8000))
    cli = RemotingClient(request_timeout=5.0, max_frame_size=4096)
    try:
        with pytest.raises(FrameTooLarge) as info:
            await cli.request(server.address, RemotingCommand.request(FAIL))
        assert info.value.limit == 4096 and info.value.size > 8000
        ok = await cli.request(server.address, RemotingCommand.request(ECHO, body=b"small"))
        assert ok.body == b"small"
    finally:
        await cli.close()


async def test_server_initiated_request(server: RemotingServer, client: RemotingClient) -> None:
    notify_code = 40  # NOTIFY_CONSUMER_IDS_CHANGED
    heartbeat_code = 34
    server_side: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()

    def heartbeat(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        server_side.set_result(conn)
        return cmd.response()

    def on_notify(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(remark=f"client saw {cmd.ext_fields['consumerGroup']}")

    server.register(heartbeat_code, heartbeat)
    client.register(notify_code, on_notify)
    await client.request(server.address, RemotingCommand.request(heartbeat_code))
    conn = await server_side
    answer = await conn.request(
        RemotingCommand.request(notify_code, {"consumerGroup": "G"}), timeout=5.0
    )
    assert answer.remark == "client saw G"
    # a code the client does not handle is answered by the client's dispatcher
    unknown = await conn.request(RemotingCommand.request(12345), timeout=5.0)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_idle_connection_is_closed(raw_peers: list[RawPeer]) -> None:
    closed: asyncio.Queue[str] = asyncio.Queue()
    async with make_server(idle_seconds=0.2) as idle_server:
        idle_server.on_connection_closed(lambda _conn, err: closed.put_nowait(err.reason))
        peer = await RawPeer.connect(idle_server.port)
        raw_peers.append(peer)
        await peer.wait_eof(timeout=5.0)
        reason = await asyncio.wait_for(closed.get(), 5)
        assert reason.startswith("idle for")
        assert not idle_server.connections


async def test_traffic_keeps_connection_open(raw_peers: list[RawPeer]) -> None:
    async with make_server(idle_seconds=0.3) as idle_server:
        peer = await RawPeer.connect(idle_server.port)
        raw_peers.append(peer)
        loop = asyncio.get_running_loop()
        end = loop.time() + 0.8  # well past one idle period
        while loop.time() < end:
            await peer.send(RemotingCommand.request(ECHO))
            await peer.read_command()
            await asyncio.sleep(0.1)
        assert len(idle_server.connections) == 1


async def test_graceful_close_drains_in_flight(client: RemotingClient) -> None:
    srv = make_server()
    await srv.start()
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        started.set()
        await release.wait()
        return cmd.response(remark="finished")

    srv.register(SLOW, slow)
    call = asyncio.ensure_future(client.request(srv.address, RemotingCommand.request(SLOW)))
    await started.wait()
    closing = asyncio.ensure_future(srv.close(drain_timeout=5.0))
    await asyncio.sleep(0)  # let close() stop the listener and start draining
    assert not closing.done()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", srv.port)  # no longer accepting
    release.set()
    response = await call
    assert response.remark == "finished"
    await asyncio.wait_for(closing, 5)
    assert not srv.connections


async def test_close_gives_up_on_stuck_processor(client: RemotingClient) -> None:
    srv = make_server()
    await srv.start()
    started = asyncio.Event()

    async def stuck(_conn: Connection, _cmd: RemotingCommand) -> RemotingCommand:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    srv.register(SLOW, stuck)
    call = asyncio.ensure_future(client.request(srv.address, RemotingCommand.request(SLOW)))
    await started.wait()
    await asyncio.wait_for(srv.close(drain_timeout=0.1), 5)
    with pytest.raises(ConnectionLost):
        await call


async def test_body_parts_memoryviews_of_a_mapped_file(
    server: RemotingServer, client: RemotingClient, tmp_path: Path
) -> None:
    records = [bytes([i]) * (1000 + i * 37) for i in range(20)]
    path = tmp_path / "segment"
    path.write_bytes(b"".join(records) + b"\x00" * 4096)
    offsets = []
    pos = 0
    for record in records:
        offsets.append((pos, len(record)))
        pos += len(record)
    with path.open("r+b") as f:
        mapped = mmap.mmap(f.fileno(), 0)
    view = memoryview(mapped)

    def pull(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        response = cmd.response()
        response.body_parts = [view[start : start + size] for start, size in offsets]
        return response

    server.register(SLOW, pull)
    try:
        response = await client.request(server.address, RemotingCommand.request(SLOW))
        assert response.body == b"".join(records)
    finally:
        view.release()
        mapped.close()


async def test_large_body_round_trip(server: RemotingServer, client: RemotingClient) -> None:
    body = bytes(range(256)) * 16384  # 4 MiB
    response = await client.request(server.address, RemotingCommand.request(ECHO, body=body))
    assert response.body == body


async def test_server_stops_reading_while_client_does_not_read(
    server: RemotingServer, raw_peers: list[RawPeer]
) -> None:
    """Backpressure: a peer that pipelines without reading its answers gets stalled."""
    answer = b"a" * (256 * 1024)
    handled = 0

    def fat(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        nonlocal handled
        handled += 1
        return cmd.response(body=answer)

    server.register(SLOW, fat)
    peer = await RawPeer.connect(server.port)
    raw_peers.append(peer)
    total = 200  # 50 MiB of answers if nothing pushed back

    async def write_all() -> None:
        for i in range(total):
            request = RemotingCommand.request(SLOW, body=b"q" * 65536)
            request.opaque = i
            peer.writer.write(frame_bytes(request))
            await peer.writer.drain()

    writer = asyncio.ensure_future(write_all())
    # No event says "kernel buffers are full": wait until the count stops moving.
    last = -1
    for _ in range(100):
        await asyncio.sleep(0.05)
        if handled == last:
            break
        last = handled
    (conn,) = server.connections
    assert conn.writing_paused
    assert 0 < handled < total
    for i in range(total):
        response = await peer.read_command(timeout=10)
        assert response.opaque == i and response.body == answer
    await writer
    assert handled == total


async def test_a_bound_server_refuses_connections_until_it_serves(
        client: RemotingClient) -> None:
    server = make_server()
    await server.start(serving=False)
    try:
        assert server.port > 0
        request = RemotingCommand.request(ECHO, {}, b"early")
        with pytest.raises(ConnectionLost):
            await client.request(server.address, request)
        await server.serve()
        await server.serve()  # a second call changes nothing
        response = await client.request(server.address, RemotingCommand.request(ECHO, {}, b"x"))
        assert response.body == b"x"
    finally:
        await server.close()


# ---------------------------------------------------------------- hostile peers


async def test_over_the_receive_budget_the_worst_holder_is_closed(
        client: RemotingClient, raw_peers: list[RawPeer]) -> None:
    async with make_server(receive_budget=1_000_000) as small:
        big = frame_bytes(RemotingCommand.request(ECHO, body=b"b" * 900_000))
        slow = await RawPeer.connect(small.port)
        fast = await RawPeer.connect(small.port)
        raw_peers += [slow, fast]
        # When the total passes the budget, slow holds more than 600 kB and fast less,
        # and slow has held its bytes longer: slow ranks worst however the reads fall.
        await slow.send(big[:700_000])
        resp = await client.request(small.address, RemotingCommand.request(ECHO, body=b"?"))
        assert resp.body == b"?"
        await fast.send(big[:400_000])  # 1.1 MB in all: over
        await slow.wait_eof()
        await fast.send(big[400_000:])
        resp = await fast.read_command()
        assert resp.code == 0 and resp.body == b"b" * 900_000
        assert not any(small.budget.held(c) for c in small.connections)
        resp = await client.request(small.address, RemotingCommand.request(ECHO, body=b"!"))
        assert resp.body == b"!"


async def test_over_the_receive_budget_kept_buffers_are_given_back_first(
        raw_peers: list[RawPeer]) -> None:
    async with make_server(receive_budget=1_000_000) as small:
        idle = await RawPeer.connect(small.port)
        busy = await RawPeer.connect(small.port)
        raw_peers += [idle, busy]
        await idle.send(RemotingCommand.request(ECHO, body=b"i" * 700_000))
        assert len((await idle.read_command()).body) == 700_000
        [conn] = [c for c in small.connections if small.budget.spare(c)]
        assert small.budget.spare(conn) > 500_000  # its grown buffer, kept
        big = frame_bytes(RemotingCommand.request(ECHO, body=b"b" * 600_000))
        await busy.send(big[:500_000])  # over: the kept buffer goes, nobody is closed
        await busy.send(big[500_000:])
        assert len((await busy.read_command()).body) == 600_000
        assert small.budget.spare(conn) == 0 and conn.is_open
        await idle.send(RemotingCommand.request(ECHO, body=b"again"))
        assert (await idle.read_command()).body == b"again"


async def test_protocol_errors_are_logged_at_a_limited_rate(
        server: RemotingServer, raw_peers: list[RawPeer], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    limited = RateLimitedLog(logging.getLogger("tidemq.net.connection"), burst=5, period=3600)
    monkeypatch.setattr(connection_module, "protocol_log", limited)
    with caplog.at_level(logging.WARNING, logger="tidemq.net.connection"):
        for _ in range(12):
            bad = await RawPeer.connect(server.port)
            raw_peers.append(bad)
            await bad.send(struct.pack(">ii", 12, (9 << 24) | 8) + b"\x00" * 8)
            await bad.wait_eof()
        limited.flush()
    lines = [r.getMessage() for r in caplog.records if r.name == "tidemq.net.connection"]
    assert len(lines) == 6 and all("protocol error" in line for line in lines[:5])
    assert lines[5] == "7 similar lines suppressed" and limited.suppressed == 7


async def test_a_port_another_process_holds_is_an_error_naming_the_address() -> None:
    """Still an ``OSError`` (its errno kept) for the code that catches one; its words name
    the address and what to do instead of asyncio's tuple."""
    import errno

    from tidemq.errors import BindFailed

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BindFailed) as info:
            await make_server(port=port).start()
    assert isinstance(info.value, OSError) and info.value.errno == errno.EADDRINUSE
    assert info.value.address == f"127.0.0.1:{port}"
    assert str(info.value) == (f"cannot listen on 127.0.0.1:{port}: address already in use: "
                               "another process listens on this port (stop it, or give "
                               "this server another port)")
