"""BlockingClient (plain sockets, no asyncio) against a real RemotingServer.

The server runs on the test's event loop; blocking calls go through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.net.support import ECHO, make_server

from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand
from tidemq.codec.frame import FrameDecoder, FrameTooLarge, FrameTooLargeToSend, frame_bytes
from tidemq.errors import ConnectFailed, ConnectionLost, RequestTimeout
from tidemq.net import BlockingClient, Connection, RemotingServer
from tidemq.net.ports import free_port

pytestmark = pytest.mark.timeout(60)

GATED = 20030
NOISY = 20031
SIZED = 20032  # answers with a body of ext "size" bytes
SEEN = 20033  # echoes, recording the server-side connection


async def test_round_trip(server: RemotingServer) -> None:
    with BlockingClient() as client:
        request = RemotingCommand.request(ECHO, {"a": "1"}, b"payload")
        response = await asyncio.to_thread(client.request, server.address, request)
        assert (response.code, response.opaque) == (0, request.opaque)
        assert (response.ext_fields, response.body) == ({"a": "1"}, b"payload")


async def test_a_frame_over_the_limit_is_refused_before_sending(server: RemotingServer) -> None:
    with BlockingClient(max_frame_size=2048) as client:
        big = RemotingCommand.request(ECHO, {}, b"x" * 3000)
        with pytest.raises(FrameTooLargeToSend) as info:
            await asyncio.to_thread(client.request, server.address, big)
        assert info.value.limit == 2048 and info.value.size > 3000
        small = RemotingCommand.request(ECHO, {}, b"fits")
        response = await asyncio.to_thread(client.request, server.address, small)
        assert response.body == b"fits"


async def test_body_parts_are_sent_intact(server: RemotingServer) -> None:
    parts = [memoryview(bytearray(b"abc" * 1000))[5:900], b"", bytearray(b"tail")]
    request = RemotingCommand.request(ECHO)
    request.body_parts = parts
    with BlockingClient() as client:
        response = await asyncio.to_thread(client.request, server.address, request)
    assert response.body == b"".join(bytes(p) for p in parts)


async def test_timeout_then_stray_response_is_skipped(server: RemotingServer) -> None:
    gate = asyncio.Event()

    async def gated(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await gate.wait()
        return cmd.response(remark="late")

    server.register(GATED, gated)
    with BlockingClient() as client:
        slow = RemotingCommand.request(GATED)
        with pytest.raises(RequestTimeout) as info:
            await asyncio.to_thread(client.request, server.address, slow, 0.2)
        assert (info.value.code, info.value.opaque) == (GATED, slow.opaque)
        assert info.value.address == server.address
        gate.set()  # the late answer now travels ahead of the next one
        request = RemotingCommand.request(ECHO, body=b"fresh")
        response = await asyncio.to_thread(client.request, server.address, request)
        assert (response.opaque, response.body) == (request.opaque, b"fresh")


async def test_server_requests_are_skipped(server: RemotingServer) -> None:
    async def noisy(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await conn.oneway(RemotingCommand.request(40, {"consumerGroup": "G"}))
        return cmd.response(remark="real answer")

    server.register(NOISY, noisy)
    with BlockingClient() as client:
        response = await asyncio.to_thread(
            client.request, server.address, RemotingCommand.request(NOISY)
        )
    assert response.remark == "real answer"


async def test_threads_share_a_client(server: RemotingServer) -> None:
    def work(client: BlockingClient, worker: int) -> list[bool]:
        ok = []
        for i in range(30):
            body = f"{worker}-{i}".encode()
            response = client.request(server.address, RemotingCommand.request(ECHO, body=body))
            ok.append(response.body == body)
        return ok

    def run_all() -> list[bool]:
        with BlockingClient() as client, ThreadPoolExecutor(6) as pool:
            results = pool.map(lambda w: work(client, w), range(6))
            return [flag for result in results for flag in result]

    flags = await asyncio.to_thread(run_all)
    assert len(flags) == 180 and all(flags)


def sized_and_seen(server: RemotingServer) -> list[Connection]:
    """Register SIZED and SEEN on ``server``; the list fills with SEEN's connections."""
    seen: list[Connection] = []

    def sized(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=b"z" * int(cmd.ext_fields["size"]))

    def record(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(conn)
        return cmd.response(body=cmd.body)

    server.register(SIZED, sized)
    server.register(SEEN, record)
    return seen


async def test_an_oversized_response_fails_only_its_request(server: RemotingServer) -> None:
    seen = sized_and_seen(server)
    with BlockingClient(max_frame_size=8192) as client:
        for i in range(2):  # the second: the skipped frame left the stream in step
            big = RemotingCommand.request(SIZED, {"size": str(300_000 + i)})
            with pytest.raises(FrameTooLarge) as info:
                await asyncio.to_thread(client.request, server.address, big)
            assert info.value.command is not None
            assert (info.value.command.opaque, info.value.limit) == (big.opaque, 8192)
            assert info.value.size > 300_000 + i
            after = RemotingCommand.request(SEEN, body=f"after {i}".encode())
            response = await asyncio.to_thread(client.request, server.address, after)
            assert (response.opaque, response.body) == (after.opaque, f"after {i}".encode())
    assert len(seen) == 2 and seen[0] is seen[1]  # one connection throughout


async def test_an_oversized_late_response_is_skipped(server: RemotingServer) -> None:
    seen = sized_and_seen(server)
    gate = asyncio.Event()

    async def gated_big(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await gate.wait()
        return cmd.response(body=b"z" * 300_000)

    server.register(GATED, gated_big)
    with BlockingClient(max_frame_size=8192) as client:
        first = RemotingCommand.request(SEEN, body=b"first")
        await asyncio.to_thread(client.request, server.address, first)
        with pytest.raises(RequestTimeout):
            await asyncio.to_thread(client.request, server.address,
                                    RemotingCommand.request(GATED), 0.2)
        gate.set()  # the oversized late answer now travels ahead of the next one
        request = RemotingCommand.request(SEEN, body=b"fresh")
        response = await asyncio.to_thread(client.request, server.address, request)
        assert (response.opaque, response.body) == (request.opaque, b"fresh")
    assert len(seen) == 2 and seen[0] is seen[1]


async def test_refused_then_reconnects_after_restart() -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    with BlockingClient(connect_timeout=2.0) as client:
        with pytest.raises(ConnectionLost) as info:
            await asyncio.to_thread(client.request, address, RemotingCommand.request(ECHO))
        assert isinstance(info.value.__cause__, ConnectionRefusedError)
        assert isinstance(info.value, ConnectFailed) and "refused" in str(info.value)
        async with make_server(port=port):
            response = await asyncio.to_thread(
                client.request, address, RemotingCommand.request(ECHO, body=b"up")
            )
            assert response.body == b"up"
        # server gone: the old socket is dead, the request fails cleanly
        with pytest.raises(ConnectionLost):
            await asyncio.to_thread(client.request, address, RemotingCommand.request(ECHO))
        async with make_server(port=port):
            response = await asyncio.to_thread(
                client.request, address, RemotingCommand.request(ECHO, body=b"again")
            )
            assert response.body == b"again"


async def test_first_request_after_an_idle_restart_succeeds() -> None:
    """A socket whose server went away while it was idle is dialed again before sending:
    the first request to the restarted server is answered, not lost."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    with BlockingClient() as client:
        async with make_server(port=port):
            await asyncio.to_thread(client.request, address, RemotingCommand.request(ECHO))
        async with make_server(port=port):
            response = await asyncio.to_thread(
                client.request, address, RemotingCommand.request(ECHO, body=b"back"))
            assert response.body == b"back"


async def test_closed_client_refuses(server: RemotingServer) -> None:
    client = BlockingClient()
    await asyncio.to_thread(client.request, server.address, RemotingCommand.request(ECHO))
    client.close()
    with pytest.raises(ConnectionLost):
        await asyncio.to_thread(client.request, server.address, RemotingCommand.request(ECHO))


# ---------------------------------------------------------------- oversized frames, property


@dataclasses.dataclass
class Answer:
    """What the scripted peer writes for one request: frames before the answer (strays:
    responses to other opaques, or server requests), then the answer, in chunks."""

    strays: list[tuple[bool, int]]  # (a response?, body size) each
    answer_size: int
    chunk: int


class ScriptedPeer:
    """A plain TCP listener answering each request with the next :class:`Answer`."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted = 0
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        with self.listener:
            conn, _ = self.listener.accept()
            self.accepted += 1
            self.listener.close()
            decoder = FrameDecoder()
            with conn:
                for answer in self.answers:
                    while (request := decoder.next_command()) is None:
                        data = conn.recv(65536)
                        if not data:
                            return
                        decoder.receive_data(data)
                    out = b""
                    for n, (is_response, size) in enumerate(answer.strays):
                        stray = RemotingCommand.request(40 + n, {}, b"s" * size)
                        if is_response:
                            stray.flag |= FLAG_RESPONSE
                            stray.opaque = request.opaque + 1 + n
                        out += frame_bytes(stray)
                    out += frame_bytes(request.response(body=b"a" * answer.answer_size))
                    try:
                        for i in range(0, len(out), answer.chunk):
                            conn.sendall(out[i : i + answer.chunk])
                    except OSError:  # the client closed after an oversized last answer
                        return


LIMIT = 4096
#: The frame size that outgrows every smaller one in the client's buffers; written a byte or
#: seven at a time it costs tens of thousands of writes and splits nothing that 3 * LIMIT and
#: 5 * LIMIT, written so, do not, so the fine chunks get it only with larger writes.
HUGE = 70_000


def _chunked_answers(chunk: int) -> st.SearchStrategy[Answer]:
    huge = [HUGE] if chunk >= 512 else []
    return st.builds(
        Answer,
        st.lists(st.tuples(st.booleans(), st.sampled_from([0, 100, LIMIT, 3 * LIMIT, *huge])),
                 max_size=4),
        st.sampled_from([0, 10, LIMIT - 200, LIMIT + 1, 5 * LIMIT, *huge]),
        st.just(chunk))


answers = st.sampled_from([1, 7, 512, 4096, 1 << 20]).flatmap(_chunked_answers)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(answers, min_size=1, max_size=5))
def test_oversized_frames_fail_only_their_request(script: list[Answer]) -> None:
    """Any mix of strays and answers, oversized or not, split anywhere: each request gets
    its own answer or FrameTooLarge for it, over one connection."""
    peer = ScriptedPeer(script)
    with BlockingClient(max_frame_size=LIMIT, request_timeout=10) as client:
        for answer in script:
            request = RemotingCommand.request(ECHO)
            if answer.answer_size > LIMIT:  # the sizes sampled leave room for the header
                with pytest.raises(FrameTooLarge) as info:
                    client.request(peer.address, request)
                assert info.value.command is not None
                assert info.value.command.opaque == request.opaque
            else:
                response = client.request(peer.address, request)
                assert response.opaque == request.opaque
                assert response.body == b"a" * answer.answer_size
    peer.thread.join(10)
    assert peer.accepted == 1
