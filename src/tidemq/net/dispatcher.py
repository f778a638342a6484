"""Inbound requests -> processors, by request code; shared by server and client.

A processor takes ``(conn, request)`` and returns the response, or ``None`` when it
answers later itself with ``conn.send_response`` (a long poll) or has nothing to say. It is
either a coroutine function -- ``async def processor(conn, request)`` -- or a plain
function that returns at once: plain functions run inline in the receive callback (no
task, so cheaper per request), so use them for handlers that never wait.

The dispatcher applies remoting.md §1.5:

* the response gets the request's opaque and the response flag;
* an unknown code is answered with ``REQUEST_CODE_NOT_SUPPORTED`` (3);
* a processor raising :class:`~tidemq.errors.BrokerResponseError` is answered with that
  error's code and remark; any other exception with ``SYSTEM_ERROR`` (1) and the
  exception's text -- the connection and everyone else keep being served;
* a oneway request (flag bit 1) never gets a response, not even an error.

A request whose body the connection lends (a view of its receive buffer,
:mod:`tidemq.codec.frame`) keeps that view only while a processor answers within the
call: one that answers later, or leaves the request to answer it itself, may read the
body after the connection has read on, so the request gets a copy of its body first.

Each coroutine processor runs in its own task, so a slow request does not hold up the next
one on the same connection. Where the running Python supports it (3.12+) the task starts
eagerly: a coroutine that finishes without suspending completes inside the receive
callback and is never scheduled. The tasks still running are tracked so a server can wait
for them when it shuts down (:meth:`Dispatcher.drain`).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable

from tidemq.codec.command import FLAG_ONEWAY, RemotingCommand
from tidemq.errors import BrokerResponseError, ResponseCode, TideMQError
from tidemq.net.connection import Connection
from tidemq.net.rate_limited_log import RateLimitedLog

__all__ = ["Dispatcher", "Processor"]

log = logging.getLogger(__name__)
#: Failures a peer causes at will (a bad header, an unknown topic ...).
request_log = RateLimitedLog(log)

Response = RemotingCommand | None
Processor = Callable[[Connection, RemotingCommand], Awaitable[Response] | Response]

_EAGER = sys.version_info >= (3, 12)  # asyncio.Task(..., eager_start=True)


class Dispatcher:
    """The request handler of a set of connections: a table of processors by code."""

    def __init__(self) -> None:
        self._processors: dict[int, Processor] = {}
        self._default: Processor | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def register(self, code: int, processor: Processor) -> None:
        """Route requests with ``code`` to ``processor`` (replacing any earlier one)."""
        self._processors[int(code)] = processor

    def register_default(self, processor: Processor) -> None:
        """Route requests whose code has no processor to ``processor``."""
        self._default = processor

    @property
    def codes(self) -> frozenset[int]:
        """The codes with a registered processor."""
        return frozenset(self._processors)

    def processor(self, code: int) -> Processor | None:
        """The processor registered for ``code`` (``None`` if none; the default is not
        consulted)."""
        return self._processors.get(int(code))

    @property
    def in_flight(self) -> int:
        """Processor tasks that have not finished yet."""
        return len(self._tasks)

    def __call__(self, conn: Connection, request: RemotingCommand) -> None:
        """Handle one inbound request (the :data:`~tidemq.net.connection.RequestHandler`)."""
        processor = self._processors.get(request.code, self._default)
        if processor is None:
            code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            remark = f" request type {request.code} not supported"
            _answer(conn, request, request.response(code, remark))
            return
        try:
            result = processor(conn, request)
        except Exception as exc:
            _answer(conn, request, _error_response(request, exc))
            return
        if isinstance(result, RemotingCommand):
            _answer(conn, request, result)
            return
        if type(request.body) is memoryview:  # lent: it may be read after the call ends
            request.body = bytes(request.body)
        if result is None:
            return
        coro = _finish(conn, request, result)
        if _EAGER:
            loop = asyncio.get_running_loop()  # 3.12.1 fails to look it up with eager_start
            task: asyncio.Task[None] = asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg]
            if task.done():
                return
        else:
            task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for running processors; ``True`` if none is left."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
        return not self._tasks

    def cancel(self) -> None:
        """Cancel every processor still running."""
        for task in list(self._tasks):
            task.cancel()


async def _finish(conn: Connection, request: RemotingCommand, pending: Awaitable[Response]) -> None:
    try:
        response = await pending
    except Exception as exc:
        response = _error_response(request, exc)
    _answer(conn, request, response)


def _answer(conn: Connection, request: RemotingCommand, response: Response) -> None:
    if response is None or request.flag & FLAG_ONEWAY:
        return
    response.opaque = request.opaque
    try:
        conn.send_response(response)  # sets the response flag
    except Exception as exc:  # the response itself cannot be encoded
        conn.send_response(_error_response(request, exc))


def _error_response(request: RemotingCommand, exc: Exception) -> RemotingCommand:
    if isinstance(exc, BrokerResponseError):
        return request.response(exc.code, exc.remark)
    if isinstance(exc, TideMQError):
        request_log.info("processor for code %d failed: %s", request.code, exc)
        return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
    log.error("processor for code %d raised", request.code, exc_info=exc)
    text = str(exc)
    remark = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return request.response(ResponseCode.SYSTEM_ERROR, remark)
