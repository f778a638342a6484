"""MetricsHttpServer: a tiny HTTP/1.1 endpoint on the event loop for Prometheus scrapes.

Prometheus needs ``GET /metrics`` and nothing else, so this is not a web server: one
request per connection (``Connection: close``), GET and HEAD only, a head of at most
8 KiB read within 10 seconds, every answer complete in one write. ``render()`` runs on
the event loop, so it reads the application's state without locks; it must be quick, or
return an awaitable of the bytes that leaves the loop to others while it works.

==========================  ===============================================
request                     answer
==========================  ===============================================
GET /metrics                200, ``render()`` with ``content_type``
GET /                       200, the same (scrapers that drop the path)
GET other path              404
other method                405
bad or slow head            400 / connection closed
first bytes not a method    400 at once (a RocketMQ client sent here learns it
                            reached an HTTP port instead of waiting for its answer)
no or wrong credentials     401 with ``WWW-Authenticate`` (only with ``auth``)
==========================  ===============================================

Connections take a slot of the process's
:func:`~tidemq.net.connection_slots.process_slots`: one accepted when none is left is
closed at once.

With ``auth`` (:class:`~tidemq.net.http_auth.MetricsAuth`, from the ``metricsAuth*``
keys) every request must carry its bearer token or basic credentials. Given ``https``
(a :class:`~tidemq.net.tls.ServerTlsContext`) it answers over HTTPS only, and follows the
certificate and key files: a renewed pair is served to the next connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tidemq.net.address import format_address
from tidemq.net.bind import warn_if_exposed
from tidemq.net.connection_slots import process_slots
from tidemq.net.http_auth import MetricsAuth
from tidemq.net.tls import ServerTlsContext

if TYPE_CHECKING:
    from tidemq.net.server_keys import ServerKeys

__all__ = ["MetricsHttpServer", "start_metrics"]

log = logging.getLogger(__name__)

#: What an endpoint serves: the bytes, or an awaitable of them.
Render = Callable[[], bytes | Awaitable[bytes]]

MAX_HEAD = 8192
READ_TIMEOUT = 10.0

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 500: "Internal Server Error"}


class MetricsHttpServer:
    """Serve ``render()`` at ``/metrics`` on ``host:port`` (port 0: any free port)."""

    def __init__(self, render: Render, host: str = "0.0.0.0", port: int = 0,
                 *, content_type: str = "text/plain; version=0.0.4; charset=utf-8",
                 auth: MetricsAuth | None = None,
                 https: ServerTlsContext | None = None) -> None:
        self.render = render
        self.auth = auth
        #: The certificate and key served (``None``: plain HTTP).
        self.https = https
        self.host = host
        self._requested_port = port
        self.content_type = content_type
        self.port = 0
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return format_address((self.host, self.port))

    async def start(self) -> None:
        https = self.https
        self._server = await asyncio.start_server(
            self._handle, self.host, self._requested_port, limit=MAX_HEAD,
            ssl=https.handshake_context() if https is not None else None,
            ssl_handshake_timeout=READ_TIMEOUT if https is not None else None)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on %s://%s/metrics", "https" if https else "http", self.address)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._clients):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._clients, return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> MetricsHttpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        slots = process_slots()
        if not slots.take(f"metrics endpoint {self.address}"):
            writer.close()
            return
        try:
            await self._handle_request(reader, writer)
        finally:
            slots.give()

    async def _handle_request(self, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            status, body, ctype, head_only = await self._answer(reader)
            extra = "".join(f"WWW-Authenticate: {c}\r\n" for c in self.auth.challenges
                            ) if status == 401 and self.auth is not None else ""
            head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n")
            writer.write(head.encode("ascii") + (b"" if head_only else body))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            # only close() cancels a client: it ends as an answered one does, its
            # connection closed below, so that the stream protocol (Python 3.12) does
            # not take the cancellation for a failure and reset the connection
            pass
        finally:
            self._clients.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, bytes, str, bool]:
        text = "text/plain; charset=utf-8"
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                head = await _read_head(reader)
        except _NotHttp:
            return 400, b"not an HTTP request\n", text, False
        except (asyncio.LimitOverrunError, ValueError):
            return 400, b"request head too large\n", text, False
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, b"bad request line\n", text, False
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return 405, b"only GET and HEAD\n", text, False
        if self.auth is not None and not self.auth.allows(_header(lines[1:], b"authorization")):
            return 401, b"credentials needed for /metrics\n", text, method == b"HEAD"
        if target not in (b"/metrics", b"/"):
            return 404, b"metrics are at /metrics\n", text, False
        try:
            rendered = self.render()
            body = await rendered if inspect.isawaitable(rendered) else rendered
        except Exception:
            log.exception("rendering metrics failed")
            return 500, b"rendering metrics failed\n", text, False
        return 200, body, self.content_type, method == b"HEAD"


async def start_metrics(keys: ServerKeys, render: Render, *, server: str,
                        reach: str, logger: logging.Logger) -> MetricsHttpServer | None:
    """``server``'s metrics endpoint, started as ``keys`` configure it (``None`` when
    ``metricsPort`` is 0). A warning when other machines can reach it without credentials
    (``reach``: what they learn); an error and no endpoint when its port cannot be bound:
    metrics are auxiliary, the server serves on without them."""
    if not keys.metrics_port:
        return None
    host, auth, https = keys.metrics_host, keys.metrics_auth, keys.metrics_tls
    warn_if_exposed(logger, f"{server}'s metrics endpoint", host, acl=auth is not None,
                    reach=reach)
    metrics = MetricsHttpServer(render, host, keys.metrics_port, auth=auth,
                                https=ServerTlsContext(https) if https is not None else None)
    try:
        await metrics.start()
    except OSError as exc:
        logger.error("metricsPort %d: cannot serve metrics: %s", keys.metrics_port, exc)
        return None
    return metrics


class _NotHttp(Exception):
    """The first bytes of a request cannot begin an HTTP request line."""


#: The longest method name a request line may begin with.
_MAX_METHOD = 16
_METHOD_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request head up to its blank line; :class:`_NotHttp` as soon as the bytes
    received cannot begin a method name followed by a space, so that a peer speaking
    another protocol (a RocketMQ frame begins with its length's zero bytes) is answered
    at once rather than when its head would have ended."""
    first = await reader.readexactly(1)
    while True:
        method = first.split(b" ", 1)[0]
        if len(method) > _MAX_METHOD or not all(b in _METHOD_CHARS for b in method):
            raise _NotHttp
        if b" " in first:
            break
        first += await reader.readexactly(1)
    if not method:
        raise _NotHttp
    return first + await reader.readuntil(b"\r\n\r\n")


def _header(lines: list[bytes], name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case) when it appears exactly once."""
    found = [value.strip() for key, sep, value in (line.partition(b":") for line in lines)
             if sep and key.strip().lower() == name]
    return found[0] if len(found) == 1 else None
