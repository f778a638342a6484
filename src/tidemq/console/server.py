"""ConsoleServer: the web console served by uvicorn on the running event loop.

::

    console = ConsoleServer("127.0.0.1:9876", host="127.0.0.1", port=8080)
    await console.start()        # binds (port 0: any free port), connects the admin client
    ...
    await console.stop()

It shares the loop with whatever else runs there (``tidemq standalone`` runs it beside
the name server and the broker). uvicorn's startup, main loop and shutdown are driven
directly, leaving out its signal handling: the process that owns the loop decides when
to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Sequence

import uvicorn

from tidemq.client import AdminClient
from tidemq.console.app import Console, create_app

__all__ = ["ConsoleServer"]

log = logging.getLogger(__name__)


class ConsoleServer:
    """The console on ``host:port`` for the cluster behind ``namesrv``."""

    def __init__(self, namesrv: str | Sequence[str], *, host: str = "127.0.0.1",
                 port: int = 8080) -> None:
        self.admin = AdminClient(namesrv)
        self.console = Console(self.admin)
        self.app = create_app(self.console)
        self.host = host
        self._requested_port = port
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        await self.admin.start()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._requested_port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            await self.admin.close()
            raise
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, lifespan="off", ws="none", http="h11",
                                access_log=False, log_config=None, server_header=False)
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])  # listening once this returns
        self._server = server
        self._task = asyncio.create_task(self._serve(server, sock), name="tidemq-console")
        log.info("console on %s", self.url)

    @staticmethod
    async def _serve(server: uvicorn.Server, sock: socket.socket) -> None:
        await server.main_loop()
        await server.shutdown(sockets=[sock])

    async def stop(self) -> None:
        server, task, self._server, self._task = self._server, self._task, None, None
        if server is not None and task is not None:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        await self.console.close()
        await self.admin.close()

    async def __aenter__(self) -> ConsoleServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
