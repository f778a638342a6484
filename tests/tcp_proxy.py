"""A TCP proxy on loopback for partition tests, in the test's event loop: each
:class:`Link` listens on a port of its own and forwards every connection to one target.
The test cuts and heals a link per direction: a cut direction holds the bytes it reads
(and, once its buffers fill, stops reading, so the sender's TCP backs up) until the
direction is healed, as a network partition does to a TCP connection that outlives it.
Connections opened during a cut are accepted and held the same way."""

from __future__ import annotations

import asyncio
from typing import Self

__all__ = ["Link"]

CHUNK = 64 * 1024


class Link:
    """``127.0.0.1:<port>`` forwarding to ``target`` (``host:port``)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        #: Open while bytes may go client -> target (``up``) and target -> client (``down``).
        self.up = asyncio.Event()
        self.down = asyncio.Event()
        self.up.set()
        self.down.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self, *, up: bool = True, down: bool = True) -> None:
        """Stop forwarding in the directions named."""
        if up:
            self.up.clear()
        if down:
            self.down.clear()

    def heal(self) -> None:
        """Forward both ways again, what was held first."""
        self.up.set()
        self.down.set()

    async def close(self) -> None:
        """Stop listening and close every connection (their pumps end by themselves)."""
        self.heal()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            try:
                t_reader, t_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._writers.add(t_writer)
            await asyncio.gather(self._pump(reader, t_writer, self.up),
                                 self._pump(t_reader, writer, self.down))
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    gate: asyncio.Event) -> None:
        try:
            while data := await src.read(CHUNK):
                await gate.wait()
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.close()
            self._writers.discard(dst)
