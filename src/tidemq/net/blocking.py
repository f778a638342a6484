"""BlockingClient: the remoting protocol over plain sockets, for Spark executors and scripts.

No asyncio: each call sends one request and reads frames until the response with its
opaque arrives. Frames that are not that response (a late answer to a request that timed
out, a request the server sent us) are skipped. One socket per address; a lock per socket
makes the client safe to share between threads (requests to one address take turns).

A timeout while *waiting* for the response leaves the connection usable (a late response
is skipped by opaque); a timeout while *sending*, a reset or a protocol error drops the
socket, and the next request dials again. Errors are :class:`~tidemq.errors.RequestTimeout` and
:class:`~tidemq.errors.ConnectionLost`, never raw socket exceptions.

A response frame over ``max_frame_size`` fails only the request waiting for it, with
:class:`~tidemq.codec.frame.FrameTooLarge` (its ``command`` the response's header); the
decoder drops the rest of that frame as it arrives and the socket stays open, as in the
asyncio client. An oversized stray frame is skipped like any other; one whose header
cannot be read is a protocol error.

With ``tls`` settings that enable it, sockets are wrapped in TLS (the server's
certificate checked against the address's host); a failed handshake raises
:class:`~tidemq.errors.TlsError` saying why.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from tidemq.codec.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from tidemq.codec.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    FrameTooLarge,
    encode_command,
)
from tidemq.codec.signature import Credentials
from tidemq.errors import (
    ConnectFailed,
    ConnectionLost,
    RemoteProtocolError,
    RequestTimeout,
    TlsError,
)
from tidemq.net.address import parse_address
from tidemq.net.errors import dial_errors, map_exceptions, network_errors
from tidemq.net.self_connect import refuse_self_connection
from tidemq.net.tls import ClientTlsContext, TlsClientSettings, describe_tls_failure

__all__ = ["BlockingClient"]

_OPAQUE_MASK = 0x7FFFFFFF
_RECV_SIZE = 256 * 1024
_IOV_MAX = 1024

Buffer = bytes | bytearray | memoryview


class BlockingClient:
    """Synchronous remoting requests; see the module docstring."""

    def __init__(
        self,
        *,
        request_timeout: float = 3.0,
        connect_timeout: float = 3.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        credentials: Credentials | None = None,
        tls: TlsClientSettings | None = None,
    ) -> None:
        #: Signs every request sent (RocketMQ ACL 1.0); ``None``: unsigned.
        self.credentials = credentials
        #: The context every socket is wrapped in; ``None``: plain.
        #: The context of new connections, following its files; ``None``: plain.
        self.tls = ClientTlsContext(tls) if tls is not None and tls.enable else None
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self._max_frame_size = max_frame_size
        self._lock = threading.Lock()
        self._connections: dict[str, _BlockingConnection] = {}
        self._closed = False

    def request(
        self, address: str, cmd: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        """Send ``cmd`` to ``address`` and return its response (any response code)."""
        timeout = self.request_timeout if timeout is None else timeout
        if self.credentials is not None:
            self.credentials.sign(cmd)
        return self._connection(address).request(cmd, timeout)

    def close(self) -> None:
        """Close every socket; later requests raise :class:`ConnectionLost`."""
        with self._lock:
            self._closed = True
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _connection(self, address: str) -> _BlockingConnection:
        with self._lock:
            if self._closed:
                raise ConnectionLost(address, "client closed")
            conn = self._connections.get(address)
            if conn is None:
                conn = _BlockingConnection(address, self.connect_timeout, self._max_frame_size,
                                           self.tls.current if self.tls is not None else None)
                self._connections[address] = conn
            return conn


class _BlockingConnection:
    """One socket to one address, dialed on first use and again after it broke."""

    def __init__(self, address: str, connect_timeout: float, max_frame_size: int,
                 tls_context: Callable[[], ssl.SSLContext] | None = None) -> None:
        """``tls_context``: the context for each dial (``None``: plain)."""
        self.address = address
        self._tls_context = tls_context
        self.lock = threading.Lock()
        self._connect_timeout = connect_timeout
        self._max_frame_size = max_frame_size
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(max_frame_size)
        self._opaque = 0
        self._closed = False

    def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        deadline = time.monotonic() + timeout
        with self.lock:
            if self._closed:
                raise ConnectionLost(self.address, "client closed")
            sock = self._sock
            if sock is not None and self._closed_by_peer(sock):
                self._drop_socket()  # idle while the peer went away: nothing sent yet
                sock = None
            if sock is None:
                sock = self._dial()
            opaque = self._opaque = (self._opaque + 1) & _OPAQUE_MASK
            cmd.opaque = opaque
            cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
            errors = network_errors(
                self.address, code=cmd.code, opaque=opaque, timeout_ms=timeout * 1e3
            )
            try:
                with map_exceptions(errors):
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    _send_all(sock, encode_command(cmd, self._max_frame_size))
            except (RequestTimeout, ConnectionLost):
                self._drop_socket()  # a frame may be half written
                raise
            try:
                with map_exceptions(errors):
                    return self._receive(sock, opaque, deadline)
            except ConnectionLost:
                self._drop_socket()
                raise
            except FrameTooLarge as exc:
                if exc.command is not None:
                    raise  # only this request fails: its frame is skipped, the socket kept
                self._drop_socket()
                raise ConnectionLost(self.address, f"protocol error: {exc}") from exc
            except RemoteProtocolError as exc:
                self._drop_socket()
                raise ConnectionLost(self.address, f"protocol error: {exc}") from exc

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self._drop_socket()

    def _dial(self) -> socket.socket:
        host, port = parse_address(self.address)
        with map_exceptions(dial_errors(self.address, self._connect_timeout)):
            sock = socket.create_connection((host, port), timeout=self._connect_timeout)
        try:
            refuse_self_connection(sock, self.address)
        except ConnectFailed:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls_context is not None:
            try:
                sock = self._tls_context().wrap_socket(sock, server_hostname=host)
            except (OSError, ValueError) as exc:
                sock.close()
                if isinstance(exc, TimeoutError):
                    raise TlsError(self.address, f"no TLS handshake within "
                                   f"{self._connect_timeout} s: does the server accept "
                                   "TLS on this port?") from exc
                raise TlsError(self.address, describe_tls_failure(exc)) from exc
        self._sock = sock
        return sock

    def _closed_by_peer(self, sock: socket.socket) -> bool:
        if not isinstance(sock, ssl.SSLSocket):
            return _closed_by_peer(sock)
        # TLS has no peek: read what is there; bytes are kept for the decoder, which
        # skips frames that are not the response awaited.
        sock.settimeout(0.0)
        try:
            data = sock.recv(_RECV_SIZE)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError,
                InterruptedError):
            return False
        except OSError:
            return True
        if not data:
            return True
        self._decoder.receive_data(data)
        return False

    def _receive(self, sock: socket.socket, opaque: int, deadline: float) -> RemotingCommand:
        decoder = self._decoder
        while True:
            try:
                cmd = decoder.next_command()
            except FrameTooLarge as exc:
                head = exc.command
                if head is None or (head.flag & FLAG_RESPONSE and head.opaque == opaque):
                    raise
                continue  # an oversized stray response or server request: skipped
            if cmd is not None:
                if cmd.flag & FLAG_RESPONSE and cmd.opaque == opaque:
                    return cmd
                continue  # stray response or server request: skip
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sock.settimeout(remaining)
            data = sock.recv(_RECV_SIZE)
            if not data:
                raise ConnectionLost(self.address, "closed by peer")
            decoder.receive_data(data)

    def _drop_socket(self) -> None:
        """Forget the socket and any partial frame; the next request dials again."""
        sock, self._sock = self._sock, None
        self._decoder = FrameDecoder(self._max_frame_size)
        if sock is not None:
            sock.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle socket's peer has closed it (or reset it), seen without waiting;
    bytes waiting to be read are not a close. The socket is left non-blocking; every
    request sets its own timeout before using it."""
    sock.settimeout(0.0)  # with a timeout, recv would first wait for data
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def _send_all(sock: socket.socket, parts: Sequence[Buffer]) -> None:
    """Write every buffer with scatter I/O (``sendmsg``): body parts are not joined."""
    if isinstance(sock, ssl.SSLSocket):  # no scatter I/O through TLS
        sock.sendall(b"".join(parts))
        return
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])
        while sent:
            first = views[0]
            if sent >= first.nbytes:
                sent -= first.nbytes
                views.pop(0)
            else:
                views[0] = first[sent:]
                sent = 0
