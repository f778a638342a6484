"""One remoting connection, shared by the server side and the client side.

A :class:`Connection` is the asyncio protocol of one TCP socket. It owns:

* a :class:`~tidemq.codec.frame.FrameDecoder` for the bytes it receives. It is a
  ``BufferedProtocol``: the transport reads straight into the decoder's buffer, so
  receiving allocates nothing per read and a large frame is copied out of it once
  (``data_received`` is still accepted, for transports that call it). Requests whose code
  is one of ``lent_bodies`` get their body as a view of that buffer, valid only while
  the handler's call for that request runs (:mod:`tidemq.codec.frame`);
* the requests *this side* sent and awaits: a dict ``opaque -> Future`` with a deadline per
  request. One sweep timer per connection, armed for the earliest deadline of the
  requests pending (give or take 50 ms), fails the overdue ones with
  :class:`~tidemq.errors.RequestTimeout` (a timer per request would cost more than the
  rest of a small request's client-side work; a timer every 50 ms would wake an idle
  client twenty times a second while a long poll waits);
* the state table below; closing fails every pending future with
  :class:`~tidemq.errors.ConnectionLost` chained to the cause;
* the idle timer: nothing received for ``idle_seconds`` closes the connection.

Inbound requests (frames without the response flag) go to the ``handler`` given at
construction, a plain callable that must not block (the
:class:`~tidemq.net.dispatcher.Dispatcher` of a server or client). Frame-level garbage
(:class:`~tidemq.errors.RemoteProtocolError`) closes this connection only. A frame over
``max_frame_size`` is answered with ``MESSAGE_ILLEGAL`` (13) and a remark naming its size
and the limit -- or, if it was a response, fails the request awaiting it -- and is skipped
as it arrives; the connection goes on. This side refuses to send a frame over its own
``max_frame_size`` (:class:`~tidemq.codec.frame.FrameTooLargeToSend`).

A server's connections share a :class:`~tidemq.net.receive_budget.ReceiveBudget`: after
each read a connection reports the bytes of the incomplete frame it holds (or the spare
buffer it keeps between frames); when the server's total goes over the budget it makes
the connections the budget names give back their spare buffers, and aborts those it
names to close.
Protocol errors are logged through a :class:`~tidemq.net.rate_limited_log.RateLimitedLog`.

Writing: commands are encoded into buffers (head + untouched body parts) and queued; the
buffers queued during one event-loop iteration go to ``transport.writelines`` in one call
(one system call for many pipelined requests or responses) -- those queued while the
frames of one read are handled (the answers of a plain-function processor) at the end of
that read, within its receive callback. Body parts are never joined here.
Flow control: when the transport pauses writing, :meth:`request` and :meth:`oneway` wait
for it to drain, and a connection built with ``pause_reads_on_backpressure`` (the server's)
also stops reading until it drains, so a peer that pipelines requests without reading the
answers is slowed down instead of growing our buffers.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import socket
import ssl
import sys
from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple, cast

from tidemq.codec.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from tidemq.codec.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    FrameTooLarge,
    encode_command,
)
from tidemq.errors import ConnectionLost, RemoteProtocolError, RequestTimeout, ResponseCode
from tidemq.net.address import format_address
from tidemq.net.rate_limited_log import RateLimitedLog
from tidemq.net.receive_budget import ReceiveBudget
from tidemq.net.tls import describe_tls_failure

__all__ = [
    "DEFAULT_IDLE_SECONDS",
    "CloseCallback",
    "ConnState",
    "Connection",
    "RequestHandler",
]

log = logging.getLogger(__name__)
#: Lines a peer causes at will: protocol errors, oversized frames, budget closes.
protocol_log = RateLimitedLog(log)

#: Close a connection after this long without receiving anything (remoting.md §1.1).
DEFAULT_IDLE_SECONDS = 120.0

_OPAQUE_MASK = 0x7FFFFFFF  # opaque is a signed int on the wire; stay positive
#: Timeouts fire up to this late (seconds): a request whose deadline falls this soon after
#: the sweep armed leaves the sweep as it is, so that requests sent in a row re-arm nothing.
_SWEEP_SECONDS = 0.05
#: Answers written while one read's requests are handled wait for the rest of them, to go
#: out in one write, for at most about this long (seconds): a fraction of one batch
#: parent's handling, so that the client never idles while the broker handles a whole read
#: (``tidemq bench produce`` with batch parents: a longer hold, or none, is slower).
_HOLD_ANSWERS = 0.0002

Buffer = bytes | bytearray | memoryview
RequestHandler = Callable[["Connection", RemotingCommand], None]
CloseCallback = Callable[["Connection", ConnectionLost], None]


class _Pending(NamedTuple):
    future: asyncio.Future[RemotingCommand]
    deadline: float  # loop.time() after which the request times out
    code: int
    timeout: float


class ConnState(enum.Enum):
    OPENING = "opening"  # protocol built, socket not attached yet
    OPEN = "open"  # reading and writing
    CLOSING = "closing"  # close() called: pending failed, flushing what was written
    CLOSED = "closed"  # socket gone, close callbacks run


class _Event(enum.Enum):
    MADE = "connection_made"
    CLOSE = "close"
    LOST = "connection_lost"


# Rule 1: every change of ConnState goes through this table; a pair that is missing is a
# no-op (closing twice, or losing a connection that never opened, changes nothing).
_TRANSITIONS: dict[tuple[ConnState, _Event], ConnState] = {
    (ConnState.OPENING, _Event.MADE): ConnState.OPEN,
    (ConnState.OPENING, _Event.CLOSE): ConnState.CLOSING,
    (ConnState.OPEN, _Event.CLOSE): ConnState.CLOSING,
    (ConnState.OPEN, _Event.LOST): ConnState.CLOSED,
    (ConnState.CLOSING, _Event.LOST): ConnState.CLOSED,
}
#: ``ConnState.OPEN`` read once: an attribute of an enum class goes through the enum
#: type's ``__getattr__`` hook (Python 3.11), several times slower than a global.
_OPEN = ConnState.OPEN


class Connection(asyncio.BufferedProtocol):
    """The protocol object of one remoting socket; see the module docstring."""

    def __init__(
        self,
        handler: RequestHandler,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_seconds: float | None = DEFAULT_IDLE_SECONDS,
        pause_reads_on_backpressure: bool = False,
        budget: ReceiveBudget[Connection] | None = None,
        lent_bodies: Collection[int] = (),
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._handler = handler
        self._max_frame_size = max_frame_size
        self._decoder = FrameDecoder(max_frame_size, lent=lent_bodies)
        self._budget = budget
        self._idle_seconds = idle_seconds or None
        self._pause_reads = pause_reads_on_backpressure
        self.state = ConnState.OPENING
        self.remote_address = "?"
        self._transport: asyncio.Transport | None = None
        self._check_flow: Callable[[], None] | None = None
        self._pending: dict[int, _Pending] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_at = 0.0  # when the armed sweep runs (loop time)
        self._opaque = 0
        self._out: list[Buffer] = []
        self._receiving = False  # handling the frames of a read: _write needs no callback
        self._budgeted = False  # the last report to the receive budget was not all zero
        self._write_paused = False
        self._reading_stopped = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._last_received = self._loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._close_callbacks: list[CloseCallback] = []
        self._lost: ConnectionLost | None = None
        #: A TLS connection that has not had an answer yet: in TLS 1.3 a server that
        #: refuses our certificate does so after our handshake ended, by closing.
        self._tls_unanswered = False
        self._closed = self._loop.create_future()

    def __repr__(self) -> str:
        return f"<Connection {self.remote_address} {self.state.value} pending={len(self._pending)}>"

    # ------------------------------------------------------------------ public API

    @property
    def is_open(self) -> bool:
        return self.state is _OPEN

    @property
    def writing_paused(self) -> bool:
        """The transport's buffer is above its high-water mark (flow control)."""
        return self._write_paused

    @property
    def pending_requests(self) -> int:
        """Requests sent by this side that still await their response."""
        return len(self._pending)

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` as a request and return the response with the same opaque.

        Raises :class:`RequestTimeout` after ``timeout`` seconds and
        :class:`ConnectionLost` if the connection closes first.
        """
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        opaque = self.send_request(cmd, future, timeout)
        try:
            if self._write_paused:
                await self._drain_while(future)
            return await future
        finally:
            self._pending.pop(opaque, None)

    def send_request(self, cmd: RemotingCommand, future: asyncio.Future[RemotingCommand],
                     timeout: float, *, write_now: bool = False) -> int:
        """Send ``cmd`` as a request whose response (or failure) settles ``future``;
        returns its opaque. Synchronous: for a caller that decided, at the end of its own
        coalescing step, that this request goes now -- with ``write_now`` it is written at
        once rather than with the rest of this loop iteration's writes, saving the
        request one loop iteration. The caller owns ``future``: cancelling it leaves the
        entry until the response or the timeout removes it. Raises as :meth:`request`
        does before anything is sent (:class:`ConnectionLost`, a frame too large)."""
        if self.state is not _OPEN:
            raise self._lost_error()
        opaque = self._opaque = (self._opaque + 1) & _OPAQUE_MASK
        cmd.opaque = opaque
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        parts = encode_command(cmd, self._max_frame_size)
        deadline = self._loop.time() + timeout
        self._pending[opaque] = _Pending(future, deadline, cmd.code, timeout)
        if self._sweeper is None or deadline + _SWEEP_SECONDS < self._sweep_at:
            self._arm_sweep(deadline)
        if write_now and not self._write_paused:
            self._out.extend(parts)
            self._flush()
        else:
            self._write(parts)
        return opaque

    async def oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` as a oneway request (flag bit 1): the peer sends no response."""
        if self.state is not _OPEN:
            raise self._lost_error()
        cmd.opaque = self._opaque = (self._opaque + 1) & _OPAQUE_MASK
        cmd.flag = (cmd.flag & ~FLAG_RESPONSE) | FLAG_ONEWAY
        self._write(encode_command(cmd, self._max_frame_size))
        if self._write_paused:
            await self.drain()

    def send_response(self, cmd: RemotingCommand) -> bool:
        """Write a response (flag bit 0 is set here); ``False`` if the connection is gone.

        ``cmd.opaque`` must be the request's (``request.response(...)`` copies it). Long
        polls answer this way much later; a client that left meanwhile is not an error.
        """
        if self.state is not _OPEN:
            log.debug("response %d to closed connection %s dropped", cmd.opaque, self)
            return False
        cmd.flag |= FLAG_RESPONSE
        self._write(encode_command(cmd))
        return True

    async def drain(self) -> None:
        """Wait until the transport accepts writes again (returns at once if it does)."""
        if not self._write_paused:
            return
        if self.state is not _OPEN:
            raise self._lost_error()
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def stop_reading(self) -> None:
        """Take no more frames from the peer (a server draining before shutdown)."""
        self._reading_stopped = True
        if self._transport is not None and self.state is _OPEN:
            self._transport.pause_reading()

    def on_close(self, callback: CloseCallback) -> None:
        """Call ``callback(conn, error)`` once, when the socket is gone."""
        if self.state is ConnState.CLOSED:
            assert self._lost is not None
            self._loop.call_soon(callback, self, self._lost)
        else:
            self._close_callbacks.append(callback)

    def close(self, reason: str = "closed locally", cause: BaseException | None = None) -> None:
        """Start closing: fail pending requests, flush what was written, close the socket."""
        if self._move(_Event.CLOSE) is not ConnState.CLOSING:
            return
        if self._budget is not None:
            self._budget.release(self)
        self._decoder.clear()
        self._record_loss(reason, cause)
        self._fail_pending()
        self._wake_drainers()
        transport = self._transport
        if transport is not None:
            self._flush()
            transport.close()

    def transport_socket(self) -> socket.socket | None:
        """The connection's socket (``None`` before it is made)."""
        transport = self._transport
        return None if transport is None else transport.get_extra_info("socket")

    def abort(self) -> None:
        """Close at once, dropping unsent data (after a graceful close did not finish)."""
        self.close("aborted locally")
        if self._transport is not None:
            self._transport.abort()

    async def aclose(self, reason: str = "closed locally", flush_timeout: float = 1.0) -> None:
        """Close, give the transport ``flush_timeout`` seconds to flush, then abort."""
        self.close(reason)
        if self._transport is None:
            return  # never connected: nothing to flush or wait for
        try:
            async with asyncio.timeout(flush_timeout):
                await self.wait_closed()
        except TimeoutError:
            log.info("%s did not flush within %.1f s; aborting", self.remote_address, flush_timeout)
            self.abort()
            await self.wait_closed()

    async def wait_closed(self) -> None:
        """Wait until the socket is gone and the close callbacks have run."""
        await asyncio.shield(self._closed)

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport = transport
        if sys.version_info >= (3, 12) and hasattr(transport, "_high_water"):
            # CPython gh-127655: the selector transport's writelines() skipped flow control
            # (fixed in 3.12.9 / 3.13.2); its own idempotent check runs after each flush.
            # Only that transport: a TLS one keeps its limits in its SSL protocol (its
            # inherited check would fail on them) and its writelines() checks them.
            self._check_flow = getattr(transport, "_maybe_pause_protocol", None)
        self.remote_address = format_address(transport.get_extra_info("peername"))
        self._tls_unanswered = transport.get_extra_info("ssl_object") is not None
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._move(_Event.MADE) is not ConnState.OPEN:  # closed before it was made
            transport.close()
            return
        self._last_received = self._loop.time()
        if self._idle_seconds is not None:
            self._idle_timer = self._loop.call_later(self._idle_seconds, self._check_idle)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._decoder.buffer_updated(nbytes)
        self._frames_received()

    def data_received(self, data: bytes) -> None:
        if self.state is _OPEN:
            self._decoder.receive_data(data)
            self._frames_received()

    def _frames_received(self) -> None:
        if self.state is not _OPEN:
            self._decoder.clear()  # closing: what still comes is dropped
            return
        loop = self._loop
        started = self._last_received = loop.time()
        decoder = self._decoder
        completed = False
        self._receiving = True
        try:
            while self.state is _OPEN:
                try:
                    cmd = decoder.next_command()
                except FrameTooLarge as exc:
                    self._too_large(exc)
                    completed = True
                    continue
                if cmd is None:
                    break
                completed = True
                if cmd.flag & FLAG_RESPONSE:
                    self._on_response(cmd)
                    continue
                if self._out and loop.time() - started > _HOLD_ANSWERS:
                    # The requests before this one took a while: their answers leave now
                    # rather than after this one too (the peer works on them meanwhile).
                    self._flush()
                    started = loop.time()
                self._handler(self, cmd)
        except RemoteProtocolError as exc:
            if self._pending:  # the requests awaiting answers fail with it: told there
                log.info("closing %s: protocol error from peer: %s", self.remote_address, exc)
            else:
                protocol_log.warning("closing %s: protocol error from peer: %s",
                                     self.remote_address, exc)
            self.close(f"protocol error: {exc}", exc)
            return
        finally:
            self._receiving = False
            if self._out:  # this read's answers leave now, in one write (see _write)
                self._flush()
        budget = self._budget
        if budget is not None and self.state is _OPEN:
            held, spare = decoder.buffered, decoder.spare
            if not (held or spare or self._budgeted):
                return  # nothing held now, nor reported before: the budget has no entry
            self._budgeted = bool(held or spare)
            trim, close = budget.update(self, held, self._last_received,
                                        completed=completed, spare=spare)
            for conn in trim:
                conn._decoder.release()
            for conn in close:
                conn._over_budget(budget)

    def _too_large(self, exc: FrameTooLarge) -> None:
        """Answer (or fail the request awaiting) a frame over the size limit."""
        cmd = exc.command
        if cmd is None:  # nothing to answer: as garbage
            raise exc
        if cmd.flag & FLAG_RESPONSE:
            pending = self._pending.pop(cmd.opaque, None)
            if pending is not None and not pending.future.done():
                pending.future.set_exception(exc)
            return
        protocol_log.warning("%s sent request code %d (opaque %d) in %s", self.remote_address,
                             cmd.code, cmd.opaque, exc)
        if not cmd.flag & FLAG_ONEWAY:
            remark = (f"request code {cmd.code}: a frame of {exc.size} bytes exceeds the "
                      f"maximum frame size of {exc.limit} bytes; it was not processed")
            self.send_response(cmd.response(ResponseCode.MESSAGE_ILLEGAL, remark))

    def _over_budget(self, budget: ReceiveBudget[Connection]) -> None:
        """Close at once: the server holds too many bytes of incomplete frames and this
        connection ranks worst."""
        held = self._decoder.buffered
        protocol_log.warning(
            "closing %s: it held %d bytes of an incomplete frame when the server's incomplete "
            "frames passed %d bytes", self.remote_address, held, budget.limit)
        self.close(f"over the receive budget: {held} bytes of an incomplete frame held")
        self.abort()

    def eof_received(self) -> bool:
        return False  # let the transport close; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError):
            reason = f"TLS: {describe_tls_failure(exc)}"
        elif (exc is None or isinstance(exc, ConnectionResetError)) and (
                self._tls_unanswered and self._pending):
            # A server that refuses our certificate after the handshake closes; whether we
            # read its alert or a reset first is the kernel's timing.
            how = "closed" if exc is None else "reset"
            reason = (f"TLS: the server {how} the connection before its first answer: it "
                      "may require a client certificate (tls.client.certPath) or refuse ours")
        else:
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by peer"
        self._record_loss(reason, exc)
        if self._move(_Event.LOST) is not ConnState.CLOSED:
            return
        if self._budget is not None:
            self._budget.release(self)
        self._decoder.clear()
        self._fail_pending()
        self._wake_drainers()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        lost = self._lost
        assert lost is not None
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            try:
                callback(self, lost)
            except Exception:
                log.exception("close callback %r of %s failed", callback, self.remote_address)
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._pause_reads and self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drainers()
        if (
            self._pause_reads
            and not self._reading_stopped
            and self.state is _OPEN
            and self._transport is not None
        ):
            self._transport.resume_reading()

    # ------------------------------------------------------------------ internals

    def _move(self, event: _Event) -> ConnState | None:
        """Apply ``event`` per the table; the new state, or ``None`` if it changed nothing."""
        new = _TRANSITIONS.get((self.state, event))
        if new is None:
            return None
        self.state = new
        return new

    def _write(self, parts: Sequence[Buffer]) -> None:
        """Queue ``parts``; everything queued in one loop iteration goes out in one call.

        What is written while a read's frames are handled goes out at the end of that
        read, before the receive callback returns: not in a callback of its own, which
        would wait for the GIL if the store's dispatch thread -- woken by the appends of
        those very frames -- took it as the receive callback let it go."""
        out = self._out
        if not out and not self._receiving:
            self._loop.call_soon(self._flush)
        out.extend(parts)

    def _flush(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.writelines(out)
            if self._check_flow is not None:
                self._check_flow()

    def _on_response(self, cmd: RemotingCommand) -> None:
        self._tls_unanswered = False
        pending = self._pending.pop(cmd.opaque, None)
        if pending is None:
            log.debug("%s: response for unknown opaque %d (timed out?)", self, cmd.opaque)
        elif not pending.future.done():
            pending.future.set_result(cmd)

    def _arm_sweep(self, at: float) -> None:
        """Run the sweep at loop time ``at`` (instead of when it was armed for)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._sweep_at = at
        self._sweeper = self._loop.call_at(at, self._sweep)

    def _sweep(self) -> None:
        """Fail the requests whose deadline passed; armed again for the earliest deadline
        left, but no sooner than :data:`_SWEEP_SECONDS` from now."""
        self._sweeper = None
        pending = self._pending
        now = self._loop.time()
        overdue = [opaque for opaque, entry in pending.items() if entry.deadline <= now]
        for opaque in overdue:
            future, _deadline, code, timeout = pending.pop(opaque)
            if not future.done():
                error = RequestTimeout(self.remote_address, code, opaque, timeout * 1e3)
                future.set_exception(error)
        if pending and self.state is _OPEN:
            earliest = min(entry.deadline for entry in pending.values())
            self._arm_sweep(max(earliest, now + _SWEEP_SECONDS))

    async def _drain_while(self, future: asyncio.Future[RemotingCommand]) -> None:
        """Wait for the transport to drain or for ``future`` to settle, whichever is first.

        A close fails ``future`` before it fails the drain, so the caller awaiting
        ``future`` afterwards sees the right error either way.
        """
        drain = asyncio.ensure_future(self.drain())
        try:
            await asyncio.wait((drain, future), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if drain.done():
                if not drain.cancelled():
                    drain.exception()  # retrieved; ``future`` carries the error
            else:
                drain.cancel()

    def _check_idle(self) -> None:
        self._idle_timer = None
        if self.state is not _OPEN or self._idle_seconds is None:
            return
        idle = self._loop.time() - self._last_received
        if idle >= self._idle_seconds:
            log.info("closing %s: nothing received for %.1f s", self.remote_address, idle)
            self.close(f"idle for {idle:.1f} s")
        else:
            remaining = self._idle_seconds - idle
            self._idle_timer = self._loop.call_later(remaining, self._check_idle)

    def _record_loss(self, reason: str, cause: BaseException | None) -> None:
        if self._lost is None:
            self._lost = ConnectionLost(self.remote_address, reason)
            self._lost.__cause__ = cause

    def _lost_error(self) -> ConnectionLost:
        """A fresh error per waiter (one exception object must not be raised twice)."""
        lost = self._lost
        if lost is None:
            return ConnectionLost(self.remote_address, "not connected")
        error = ConnectionLost(lost.address, lost.reason)
        error.__cause__ = lost.__cause__
        return error

    def _fail_pending(self) -> None:
        pending, self._pending = self._pending, {}
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for entry in pending.values():
            if not entry.future.done():
                entry.future.set_exception(self._lost_error())

    def _wake_drainers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if waiter.done():
                continue
            if self.state is _OPEN:
                waiter.set_result(None)
            else:
                waiter.set_exception(self._lost_error())
