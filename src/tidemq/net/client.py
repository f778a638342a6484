"""RemotingClient: one multiplexed connection per server address, opened on first use.

Used by producers, consumers, the admin client and the broker's registrar::

    client = RemotingClient(request_timeout=3.0)
    response = await client.request("127.0.0.1:9876", RemotingCommand.request(105, {...}))
    await client.close()

Connections are keyed by the address string. The decision of what to use is a plain
method that never awaits (:meth:`RemotingClient._plan`): it returns the open connection,
or the one dial in progress for that address, starting it if there is none. Only then is
the dial awaited, so concurrent callers share a single connection. A connection that
closes is forgotten (its pending requests fail with
:class:`~tidemq.errors.ConnectionLost`) and the next request dials again.

With ``tls`` settings that enable it (:class:`~tidemq.net.tls.TlsClientSettings`) every
connection is TLS, the server's certificate checked against the host of the address; a
handshake that fails raises :class:`~tidemq.errors.TlsError` saying why.

Servers may send requests to the client over the same connection (for example
``NOTIFY_CONSUMER_IDS_CHANGED``); :meth:`RemotingClient.register` routes them, with the
answering rules of :mod:`tidemq.net.dispatcher`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from types import TracebackType

from tidemq.codec.command import RemotingCommand
from tidemq.codec.frame import DEFAULT_MAX_FRAME_SIZE
from tidemq.codec.signature import Credentials
from tidemq.errors import ConnectFailed, ConnectionLost, TideMQError, TlsError
from tidemq.net.address import parse_address
from tidemq.net.connection import DEFAULT_IDLE_SECONDS, Connection
from tidemq.net.dispatcher import Dispatcher, Processor
from tidemq.net.errors import ExceptionMapping, dial_errors, map_exceptions
from tidemq.net.self_connect import refuse_self_connection
from tidemq.net.tls import ClientTlsContext, TlsClientSettings, describe_tls_failure

__all__ = ["RemotingClient"]

log = logging.getLogger(__name__)


class RemotingClient:
    """Connections to many remoting servers; see the module docstring."""

    def __init__(
        self,
        *,
        request_timeout: float = 3.0,
        connect_timeout: float = 3.0,
        idle_seconds: float | None = DEFAULT_IDLE_SECONDS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        credentials: Credentials | None = None,
        tls: TlsClientSettings | None = None,
    ) -> None:
        #: The context of new connections, following its files; ``None``: plain. Built
        #: here, so a bad file raises ConfigError now rather than at the first request.
        self.tls = ClientTlsContext(tls) if tls is not None and tls.enable else None
        #: Signs every request sent (RocketMQ ACL 1.0); ``None``: unsigned.
        self.credentials = credentials
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self._idle_seconds = idle_seconds
        self._max_frame_size = max_frame_size
        self._dispatcher = Dispatcher()
        self._connections: dict[str, Connection] = {}
        self._dials: dict[str, asyncio.Task[Connection]] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<RemotingClient connections={sorted(self._connections)}>"

    def register(self, code: int, processor: Processor) -> None:
        """Route server-initiated requests with ``code`` to ``processor``."""
        self._dispatcher.register(code, processor)

    def register_default(self, processor: Processor) -> None:
        """Route server-initiated requests with an unregistered code to ``processor``."""
        self._dispatcher.register_default(processor)

    @property
    def connections(self) -> dict[str, Connection]:
        """Open connections by address."""
        return dict(self._connections)

    @property
    def tls_context(self) -> ssl.SSLContext | None:
        """The context a connection dialed now uses (``None``: plain)."""
        return self.tls.current() if self.tls is not None else None

    async def connection(self, address: str) -> Connection:
        """The open connection to ``address``, dialing it if there is none."""
        planned = self._plan(address)
        if isinstance(planned, Connection):
            return planned
        return await asyncio.shield(planned)

    async def request(
        self, address: str, cmd: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        """Send ``cmd`` to ``address`` and return the response.

        Raises :class:`~tidemq.errors.RequestTimeout` or
        :class:`~tidemq.errors.ConnectionLost`; a non-success response code is returned,
        not raised (the caller knows which codes it expects).
        """
        if self.credentials is not None:
            self.credentials.sign(cmd)
        conn = self._connections.get(address)
        if conn is None or not conn.is_open:
            conn = await self.connection(address)
        return await conn.request(cmd, self.request_timeout if timeout is None else timeout)

    def start_request(self, address: str, cmd: RemotingCommand,
                      future: asyncio.Future[RemotingCommand], timeout: float | None = None
                      ) -> bool:
        """Send ``cmd`` to ``address`` now, without awaiting, if a connection to it is open
        and accepts writes: its response (or failure) settles ``future``
        (:meth:`Connection.send_request <tidemq.net.connection.Connection.send_request>`,
        written at once). ``False``, with nothing sent: use :meth:`request`."""
        conn = self._connections.get(address)
        if conn is None or not conn.is_open or conn.writing_paused:
            return False
        if self.credentials is not None:
            self.credentials.sign(cmd)
        conn.send_request(cmd, future, self.request_timeout if timeout is None else timeout,
                          write_now=True)
        return True

    async def oneway(self, address: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` to ``address`` as a oneway request."""
        if self.credentials is not None:
            self.credentials.sign(cmd)
        conn = await self.connection(address)
        await conn.oneway(cmd)

    async def close(self) -> None:
        """Close every connection and cancel dials in progress."""
        self._closed = True
        dials, self._dials = list(self._dials.values()), {}
        for dial in dials:
            dial.cancel()
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*dials, return_exceptions=True)
        await asyncio.gather(*(conn.aclose("client closed") for conn in connections))

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ internals

    def _plan(self, address: str) -> Connection | asyncio.Task[Connection]:
        """Decide, without awaiting: the open connection, or the dial that will make it."""
        if self._closed:
            raise ConnectionLost(address, "client closed")
        conn = self._connections.get(address)
        if conn is not None and conn.is_open:
            return conn
        dial = self._dials.get(address)
        if dial is None:
            dial = asyncio.ensure_future(self._dial(address))
            self._dials[address] = dial
        return dial

    async def _dial(self, address: str) -> Connection:
        try:
            host, port = parse_address(address)
            loop = asyncio.get_running_loop()
            context = self.tls_context
            with map_exceptions(self._dial_errors(address)):
                async with asyncio.timeout(self.connect_timeout):
                    if context is None:
                        _, conn = await loop.create_connection(self._new_connection, host, port)
                    else:
                        _, conn = await loop.create_connection(
                            self._new_connection, host, port, ssl=context,
                            server_hostname=host, ssl_handshake_timeout=self.connect_timeout)
            try:
                refuse_self_connection(conn.transport_socket(), address)
            except ConnectFailed:
                conn.abort()
                raise
        finally:
            self._dials.pop(address, None)
        conn.remote_address = address
        self._connections[address] = conn
        conn.on_close(self._forget)
        log.debug("connected to %s", address)
        return conn

    def _dial_errors(self, address: str) -> ExceptionMapping:
        def timed_out(_exc: BaseException) -> ConnectionLost:
            if self.tls_context is not None:
                return TlsError(address, f"no TLS handshake within {self.connect_timeout} s: "
                                "does the server accept TLS on this port?")
            return ConnectFailed(address, f"no answer within {self.connect_timeout} s")

        def tls_failed(exc: BaseException) -> ConnectionLost:
            return TlsError(address, describe_tls_failure(exc))

        mapping: dict[type[BaseException], Callable[[BaseException], TideMQError]] = {
            TimeoutError: timed_out, ssl.SSLError: tls_failed}  # timeouts keep their place
        if self.tls_context is not None:
            mapping[ConnectionResetError] = tls_failed
            mapping[ConnectionAbortedError] = tls_failed
        for foreign, factory in dial_errors(address, self.connect_timeout).items():
            mapping.setdefault(foreign, factory)  # after these: the first match wins
        return mapping

    def _new_connection(self) -> Connection:
        return Connection(
            self._dispatcher, max_frame_size=self._max_frame_size, idle_seconds=self._idle_seconds
        )

    def _forget(self, conn: Connection, error: ConnectionLost) -> None:
        if self._connections.get(conn.remote_address) is conn:
            del self._connections[conn.remote_address]
        log.debug("connection to %s closed: %s", conn.remote_address, error.reason)
