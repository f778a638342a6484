"""RemotingServer: accept connections, route their requests to processors by code.

Used by the broker and the name server::

    server = RemotingServer("0.0.0.0", 10911)
    server.register(RequestCode.SEND_MESSAGE, send_processor)
    await server.start()
    ...
    await server.close(drain_timeout=5.0)

Every accepted socket becomes a :class:`~tidemq.net.connection.Connection` whose inbound
requests go to the server's :class:`~tidemq.net.dispatcher.Dispatcher` (answering rules
there). Server connections stop reading while their writes are paused, which slows down
a client that pipelines requests without reading the responses.

Memory taken by peers is bounded: a frame's buffer grows with the bytes that arrive, and
the receive buffers over all connections -- incomplete frames, and the grown buffers
kept between frames -- stay within ``receive_budget``
(:class:`~tidemq.net.receive_budget.ReceiveBudget`): past it, kept buffers are given
back first, then the connections holding the most for the longest are closed.

With ``tls`` settings that have a certificate (:mod:`tidemq.net.tls`), connections are
accepted by a :class:`~tidemq.net.tls_listener.TlsListener`, which takes TLS, plain or
both on the one port as ``tls.server.mode`` says; otherwise asyncio accepts them plain.

Connections take a slot of the process's :func:`~tidemq.net.connection_slots.process_slots`
(or of ``slots``), which keep half its open files for its store: one accepted when none
is left is closed at once, and those open go on being served.

Shutdown is graceful: stop accepting and stop reading new requests, give the processors
still running up to ``drain_timeout`` seconds to finish and answer (their responses are
flushed), then close every connection, aborting those that cannot flush within a second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from types import TracebackType

from tidemq.codec.frame import DEFAULT_MAX_FRAME_SIZE
from tidemq.errors import ConnectionLost
from tidemq.net.address import format_address
from tidemq.net.connection import DEFAULT_IDLE_SECONDS, CloseCallback, Connection, protocol_log
from tidemq.net.connection_slots import ConnectionSlots, process_slots
from tidemq.net.dispatcher import Dispatcher, Processor
from tidemq.net.errors import bind_errors, map_exceptions
from tidemq.net.receive_budget import DEFAULT_RECEIVE_BUDGET, ReceiveBudget
from tidemq.net.tls import ServerTlsContext, TlsServerSettings
from tidemq.net.tls_listener import TlsListener, refusing_dispatcher

__all__ = ["RemotingServer"]

log = logging.getLogger(__name__)

_ABORT_AFTER = 1.0  # seconds a closing connection may take to flush before it is aborted
#: A refused plain connection (enforcing mode) is answered once: it needs no big frames.
_REFUSED_MAX_FRAME = 64 * 1024
_REFUSED_IDLE = 10.0


class RemotingServer:
    """A listening remoting endpoint; see the module docstring."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_seconds: float | None = DEFAULT_IDLE_SECONDS,
        receive_budget: int = DEFAULT_RECEIVE_BUDGET,
        tls: TlsServerSettings | None = None,
        slots: ConnectionSlots | None = None,
    ) -> None:
        self.host = host
        #: The slots its connections take (the process's unless given).
        self.slots = slots if slots is not None else process_slots()
        self._requested_port = port
        self._max_frame_size = max_frame_size
        self.budget: ReceiveBudget[Connection] = ReceiveBudget(receive_budget)
        self._idle_seconds = idle_seconds
        self._dispatcher = Dispatcher()
        #: Request codes whose bodies the connections lend (:meth:`lend_bodies`).
        self._lent: set[int] = set()
        self._server: asyncio.Server | None = None
        #: Set when ``tls`` is active; builds its context now, so bad files fail early.
        self._listener: TlsListener | None = None
        if tls is not None and tls.active:
            self._listener = TlsListener(
                host, port, mode=tls.mode, contexts=ServerTlsContext(tls),
                accepted=self._new_connection, refused=self._refused_connection,
                not_started=self._not_started)
        self._connections: set[Connection] = set()
        self._close_callbacks: list[CloseCallback] = []
        self.port = 0

    def __repr__(self) -> str:
        return f"<RemotingServer {self.address} connections={len(self._connections)}>"

    @property
    def address(self) -> str:
        """``"host:port"`` of the bound socket (after :meth:`start`)."""
        return format_address((self.host, self.port))

    @property
    def connections(self) -> frozenset[Connection]:
        """The connections currently open."""
        return frozenset(self._connections)

    @property
    def in_flight(self) -> int:
        """Processors still running."""
        return self._dispatcher.in_flight

    def register(self, code: int, processor: Processor) -> None:
        """Route requests with ``code`` to ``processor``."""
        self._dispatcher.register(code, processor)

    def lend_bodies(self, codes: Iterable[int]) -> None:
        """Hand requests with ``codes`` to their processors with the body as a view of the
        connection's receive buffer, not a copy. The view is valid only while the
        processor's call runs (the next read reuses the buffer): a processor that answers
        within the call reads the body then and copies what it keeps beyond it; one that
        answers later (a coroutine, a request held) is handed a copy by the dispatcher
        (:mod:`tidemq.net.dispatcher`)."""
        self._lent.update(map(int, codes))

    @property
    def codes(self) -> frozenset[int]:
        """The request codes with a registered processor."""
        return self._dispatcher.codes

    def register_default(self, processor: Processor) -> None:
        """Route requests with a code nobody registered to ``processor``."""
        self._dispatcher.register_default(processor)

    def processor(self, code: int) -> Processor | None:
        """The processor registered for ``code``, if any (the batch protocol runs its
        children through them)."""
        return self._dispatcher.processor(code)

    def on_connection_closed(self, callback: CloseCallback) -> None:
        """Call ``callback(conn, error)`` whenever a client connection goes away."""
        self._close_callbacks.append(callback)

    async def start(self, *, serving: bool = True) -> None:
        """Bind and start accepting; :attr:`port` is the bound port afterwards. With
        ``serving=False`` the port is only bound -- connecting to it is refused, as to a
        server that is down -- until :meth:`serve`."""
        where = format_address((self.host, self._requested_port))
        if self._listener is not None:
            with map_exceptions(bind_errors(where)):
                self.port = self._listener.bind()
            if serving:
                self._listener.serve()
                self._log_listening()
            return
        loop = asyncio.get_running_loop()
        with map_exceptions(bind_errors(where)):
            self._server = await loop.create_server(
                self._new_connection, self.host, self._requested_port, reuse_address=True,
                start_serving=serving,
            )
        self.port = int(self._server.sockets[0].getsockname()[1])
        if serving:
            self._log_listening()

    def _log_listening(self) -> None:
        if self._listener is None:
            log.info("remoting server listening on %s", self.address)
        else:
            log.info("remoting server listening on %s (TLS %s)", self.address,
                     self._listener.mode.value)

    @property
    def tls(self) -> TlsListener | None:
        """The listener that admits TLS connections, when TLS is configured."""
        return self._listener

    async def serve(self) -> None:
        """Start accepting on the port :meth:`start` bound (``serving=False``)."""
        if self._listener is not None:
            if not self._listener.serving:
                self._listener.serve()
                self._log_listening()
            return
        if self._server is None:
            raise RuntimeError("serve() before start()")
        if not self._server.is_serving():
            await self._server.start_serving()
            self._log_listening()

    async def close(self, drain_timeout: float = 5.0) -> None:
        """Stop accepting, let running processors finish (bounded), close connections."""
        server, self._server = self._server, None
        listener = self._listener
        if server is None and (listener is None or not listener.port):
            return
        if server is not None:
            server.close()
        if listener is not None:
            await listener.close()
            listener.port = 0
        for conn in self._connections:
            conn.stop_reading()
        if not await self._dispatcher.drain(drain_timeout):
            log.warning(
                "%d processors still running after %.1f s; cancelling",
                self._dispatcher.in_flight,
                drain_timeout,
            )
            self._dispatcher.cancel()
            await self._dispatcher.drain(_ABORT_AFTER)
        connections = list(self._connections)
        await asyncio.gather(
            *(conn.aclose("server shutting down", _ABORT_AFTER) for conn in connections)
        )
        if server is not None:
            await server.wait_closed()
        protocol_log.flush()
        log.info("remoting server on %s closed", self.address)

    async def __aenter__(self) -> RemotingServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _new_connection(self) -> asyncio.BaseProtocol:
        if not self.slots.take(f"remoting server {self.address}"):
            return _Closing()
        conn = Connection(
            self._dispatcher,
            max_frame_size=self._max_frame_size,
            idle_seconds=self._idle_seconds,
            pause_reads_on_backpressure=True,
            budget=self.budget,
            lent_bodies=self._lent,
        )
        self._connections.add(conn)
        conn.on_close(self._connection_closed)
        return conn

    def _refused_connection(self) -> asyncio.BaseProtocol:
        if not self.slots.take(f"remoting server {self.address}"):
            return _Closing()
        conn = Connection(refusing_dispatcher(), max_frame_size=_REFUSED_MAX_FRAME,
                          idle_seconds=_REFUSED_IDLE)
        self._connections.add(conn)
        conn.on_close(self._connection_closed)
        return conn

    def _not_started(self, protocol: asyncio.BaseProtocol) -> None:
        """A connection whose TLS handshake failed never opened: forget it."""
        if isinstance(protocol, Connection) and protocol in self._connections:
            self._connections.discard(protocol)
            self.slots.give()

    def _connection_closed(self, conn: Connection, error: ConnectionLost) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            self.slots.give()
        log.debug("connection %s closed: %s", conn.remote_address, error.reason)
        for callback in self._close_callbacks:
            try:
                callback(conn, error)
            except Exception:
                log.exception("connection-closed callback %r failed", callback)


class _Closing(asyncio.Protocol):
    """A connection accepted with no slot left: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
