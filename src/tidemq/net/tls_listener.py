"""TlsListener: one listening port that takes TLS connections, plain ones, or both.

RocketMQ's ``tls.server.mode`` decides per connection, from the first byte the client
sends (clients speak first in the remoting protocol, and every TLS connection opens with
a handshake record, byte ``0x16``; a remoting frame opens with its length, whose high
byte is ``0x00`` for any frame this side of 369 MB):

==========  =================  ===========================================
mode        first byte 0x16    any other first byte
==========  =================  ===========================================
permissive  TLS handshake      plain connection
enforcing   TLS handshake      refused: its first request is answered with
                               SYSTEM_ERROR saying TLS is required, then
                               the connection is closed (logged, rate-limited)
==========  =================  ===========================================

(``disabled`` needs no listener: the server accepts plain connections the usual way.)
:func:`admit` is that table. The byte is peeked, not read, so the TLS layer or the
remoting decoder sees the stream from its start. A client that sends nothing within
``handshake_timeout`` seconds, or whose handshake fails (an untrusted or missing client
certificate, a protocol mismatch), is closed and logged, rate-limited.

The listener knows nothing of remoting beyond the refusal answer: it calls the
factories it is given, so any asyncio protocol (the HA port's, for instance) can sit
behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import socket
import ssl
from collections.abc import Callable

from tidemq.codec.command import RemotingCommand
from tidemq.errors import ResponseCode
from tidemq.net.address import format_address
from tidemq.net.connection import Connection
from tidemq.net.dispatcher import Dispatcher
from tidemq.net.rate_limited_log import RateLimitedLog
from tidemq.net.tasks import cancel_and_wait
from tidemq.net.tls import TLS_HANDSHAKE_BYTE, ServerTlsContext, TlsMode

__all__ = ["PLAIN_REFUSED_REMARK", "Admission", "TlsListener", "admit", "refusing_dispatcher"]

log = logging.getLogger(__name__)
#: Lines a peer causes at will: refused plain connections, failed handshakes.
peer_log = RateLimitedLog(log)

PLAIN_REFUSED_REMARK = ("this server accepts TLS connections only (tls.server.mode=enforcing): "
                        "connect with TLS (tls.enable / --tls)")
_BACKLOG = 100
_ACCEPT_RETRY = 1.0  # seconds to wait after accept() failed (out of descriptors ...)

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class Admission(enum.Enum):
    TLS = "tls"
    PLAIN = "plain"
    REFUSE = "refuse"


def admit(first_byte: int, mode: TlsMode) -> Admission:
    """What to do with a connection whose first byte is ``first_byte`` (module table)."""
    if first_byte == TLS_HANDSHAKE_BYTE and mode is not TlsMode.DISABLED:
        return Admission.TLS
    if mode is TlsMode.ENFORCING:
        return Admission.REFUSE
    return Admission.PLAIN


def _refuse(conn: Connection, request: RemotingCommand) -> None:
    if not request.is_oneway:
        conn.send_response(request.response(ResponseCode.SYSTEM_ERROR, PLAIN_REFUSED_REMARK))
    conn.close("plain connection refused: TLS only")


def refusing_dispatcher() -> Dispatcher:
    """Answers every request on a refused plain connection with the refusal, then closes."""
    dispatcher = Dispatcher()
    dispatcher.register_default(_refuse)
    return dispatcher


class TlsListener:
    """Accepts on ``host:port`` and hands each connection, once admitted, to a protocol
    from ``accepted`` (TLS or plain) or ``refused``; see the module docstring."""

    def __init__(self, host: str, port: int, *, mode: TlsMode, contexts: ServerTlsContext,
                 accepted: ProtocolFactory, refused: ProtocolFactory,
                 not_started: Callable[[asyncio.BaseProtocol], None] = lambda _p: None,
                 handshake_timeout: float = 10.0) -> None:
        self.host = host
        self._requested_port = port
        self.mode = mode
        self.contexts = contexts
        self._accepted = accepted
        self._refused = refused
        self._not_started = not_started
        self.handshake_timeout = handshake_timeout
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._admitting: set[asyncio.Task[None]] = set()
        self.port = 0

    def bind(self) -> int:
        """Bind (not yet listening: connecting is refused until :meth:`serve`); the port."""
        family, kind, proto, _, addr = socket.getaddrinfo(
            self.host or None, self._requested_port, type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.port = int(sock.getsockname()[1])
        return self.port

    @property
    def serving(self) -> bool:
        return self._accepting is not None

    def serve(self) -> None:
        """Listen and start accepting."""
        if self._sock is None:
            raise RuntimeError("serve() before bind()")
        if self._accepting is None:
            self._sock.listen(_BACKLOG)
            self._accepting = asyncio.get_running_loop().create_task(self._accept_loop())

    async def close(self) -> None:
        """Stop accepting; connections still being admitted are dropped."""
        accepting, self._accepting = self._accepting, None
        await cancel_and_wait(accepting)
        admitting = list(self._admitting)
        for task in admitting:
            task.cancel()
        await asyncio.gather(*admitting, return_exceptions=True)
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        peer_log.flush()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        listening = self._sock
        while True:
            try:
                sock, _ = await loop.sock_accept(listening)
            except OSError as exc:
                log.warning("accepting on %s failed: %s; trying again in %.0f s",
                            format_address((self.host, self.port)), exc, _ACCEPT_RETRY)
                await asyncio.sleep(_ACCEPT_RETRY)
                continue
            sock.setblocking(False)
            task = loop.create_task(self._admit(sock))
            self._admitting.add(task)
            task.add_done_callback(self._admitting.discard)

    async def _admit(self, sock: socket.socket) -> None:
        try:
            peer = format_address(sock.getpeername())
            async with asyncio.timeout(self.handshake_timeout):
                first = await _peek_first_byte(sock)
        except (OSError, TimeoutError):  # gone, or silent for too long
            sock.close()
            return
        except asyncio.CancelledError:  # the listener is closing
            sock.close()
            raise
        if first is None:  # connected and closed without a byte (a port probe)
            sock.close()
            return
        admission = admit(first, self.mode)
        if admission is Admission.REFUSE:
            peer_log.warning("refusing the plain connection from %s: tls.server.mode=enforcing "
                             "accepts TLS connections only", peer)
            await self._start(sock, peer, self._refused, None)
        elif admission is Admission.TLS:
            await self._start(sock, peer, self._accepted, self.contexts.current())
        else:
            await self._start(sock, peer, self._accepted, None)

    async def _start(self, sock: socket.socket, peer: str, factory: ProtocolFactory,
                     context: ssl.SSLContext | None) -> None:
        made: list[asyncio.BaseProtocol] = []

        def protocol() -> asyncio.BaseProtocol:
            made.append(factory())
            return made[-1]

        loop = asyncio.get_running_loop()
        try:
            if context is None:
                await loop.connect_accepted_socket(protocol, sock)
            else:
                await loop.connect_accepted_socket(
                    protocol, sock, ssl=context, ssl_handshake_timeout=self.handshake_timeout)
        except (OSError, TimeoutError, asyncio.CancelledError) as exc:
            if not isinstance(exc, asyncio.CancelledError):
                what = "TLS handshake with" if context is not None else "connection from"
                peer_log.warning("%s %s failed: %s", what, peer, _describe(exc))
            for proto in made:
                self._not_started(proto)
            with contextlib.suppress(OSError):
                sock.close()
            if isinstance(exc, asyncio.CancelledError):
                raise


async def _peek_first_byte(sock: socket.socket) -> int | None:
    """The first byte the peer sent, left in the socket; ``None`` if it closed first."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()

            def wake(fut: asyncio.Future[None] = ready) -> None:
                if not fut.done():
                    fut.set_result(None)

            loop.add_reader(sock.fileno(), wake)
            try:
                await ready
            finally:
                loop.remove_reader(sock.fileno())
            continue
        return data[0] if data else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or "").upper()
        if "NO_CERTIFICATE" in reason or "PEER_DID_NOT_RETURN" in reason:
            return "the client sent no certificate (tls.server.need.client.auth=require)"
        if "CERTIFICATE_VERIFY_FAILED" in reason:
            return f"the client's certificate was refused: {exc.verify_message}" if isinstance(
                exc, ssl.SSLCertVerificationError) else "the client's certificate was refused"
        return f"{exc.reason or exc}"
    if isinstance(exc, TimeoutError):
        return "no handshake within the time allowed"
    return f"{type(exc).__name__}: {exc}"
