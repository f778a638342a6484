"""Helpers for the tidemq.net tests: processors, a server factory, a raw-socket peer."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from tidemq.codec.command import RemotingCommand
from tidemq.codec.frame import FrameDecoder, frame_bytes
from tidemq.net import Connection, RemotingServer

ECHO = 20001  # plain-function processor: body and ext echoed
ECHO_ASYNC = 20002  # coroutine processor: same answer, in a task


def echo(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ext_fields=dict(cmd.ext_fields), body=cmd.body)


async def echo_async(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    await asyncio.sleep(0)
    return cmd.response(ext_fields=dict(cmd.ext_fields), body=cmd.body)


def make_server(port: int = 0, **kwargs: float | None) -> RemotingServer:
    """A server on 127.0.0.1 with the echo processors (not started)."""
    server = RemotingServer("127.0.0.1", port, **kwargs)  # type: ignore[arg-type]
    server.register(ECHO, echo)
    server.register(ECHO_ASYNC, echo_async)
    return server


class RawPeer:
    """A plain stream to a server: write any bytes, read whole commands, see EOF."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()

    @classmethod
    async def connect(cls, port: int) -> RawPeer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes | RemotingCommand) -> None:
        self.writer.write(frame_bytes(data) if isinstance(data, RemotingCommand) else data)
        await self.writer.drain()

    async def read_command(self, timeout: float = 5.0) -> RemotingCommand:
        async with asyncio.timeout(timeout):
            while (cmd := self.decoder.next_command()) is None:
                data = await self.reader.read(65536)
                if not data:
                    raise EOFError("peer closed")
                self.decoder.receive_data(data)
            return cmd

    async def wait_eof(self, timeout: float = 5.0) -> None:
        """Return when the server closed the connection (data before EOF is discarded)."""
        async with asyncio.timeout(timeout):
            try:
                while await self.reader.read(65536):
                    pass
            except ConnectionResetError:
                pass

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


class MemoryTransport(asyncio.Transport):
    """An in-memory transport double: records writes, closes on request."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.writes: list[list[bytes]] = []
        self.closing = False
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.0.0.7", 5555) if name == "peername" else default

    def writelines(self, list_of_data: Any) -> None:
        self.writes.append([bytes(b) for b in list_of_data])

    def write(self, data: Any) -> None:
        self.writelines([data])

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def written_commands(self) -> list[RemotingCommand]:
        decoder = FrameDecoder()
        for call in self.writes:
            for part in call:
                decoder.receive_data(part)
        out = []
        while (cmd := decoder.next_command()) is not None:
            out.append(cmd)
        return out


def port_frees(port: int) -> bool:
    """Whether a server could listen on ``port`` of 127.0.0.1 now."""
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        probe.close()
