"""Translate foreign exceptions into TideMQ errors at the socket seam.

Socket and asyncio code raises ``ConnectionResetError``, ``BrokenPipeError``, other
``OSError``\\s, ``asyncio.IncompleteReadError`` and ``TimeoutError``. None of those reach
users of :mod:`tidemq.net`: the code that touches sockets runs inside
:func:`map_exceptions`, which re-raises them as :class:`~tidemq.errors.ConnectionLost` or
:class:`~tidemq.errors.RequestTimeout` with fields filled in, chained with ``from`` so the
original stays visible in tracebacks::

    with map_exceptions(network_errors(address, code=cmd.code, timeout_ms=3000)):
        sock.sendall(frame)

The mapping is ordered and the first matching entry wins. That matters because
``TimeoutError`` and ``ConnectionResetError`` are both subclasses of ``OSError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable, Iterator, Mapping

from tidemq.errors import BindFailed, ConnectFailed, ConnectionLost, RequestTimeout, TideMQError

__all__ = ["ExceptionMapping", "bind_errors", "dial_errors", "map_exceptions",
           "network_errors"]

#: Foreign exception type -> factory building the TideMQ error from the caught exception.
ExceptionMapping = Mapping[type[BaseException], Callable[[BaseException], TideMQError]]


@contextlib.contextmanager
def map_exceptions(mapping: ExceptionMapping) -> Iterator[None]:
    """Re-raise exceptions matching ``mapping`` as the TideMQ error its factory builds.

    TideMQ errors and exceptions that match no entry pass through unchanged.
    """
    try:
        yield
    except TideMQError:
        raise
    except Exception as exc:
        for foreign, factory in mapping.items():
            if isinstance(exc, foreign):
                raise factory(exc) from exc
        raise


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def network_errors(
    address: str, *, code: int = 0, opaque: int = 0, timeout_ms: float = 0.0
) -> ExceptionMapping:
    """The standard mapping for socket work towards ``address``.

    Timeouts become :class:`RequestTimeout` (for request ``code``/``opaque``); resets,
    broken pipes, truncated reads and any other ``OSError`` become :class:`ConnectionLost`.
    """

    def timed_out(_exc: BaseException) -> TideMQError:
        return RequestTimeout(address, code, opaque, timeout_ms)

    def lost(exc: BaseException) -> TideMQError:
        return ConnectionLost(address, _reason(exc))

    return {
        TimeoutError: timed_out,
        ConnectionResetError: lost,
        BrokenPipeError: lost,
        asyncio.IncompleteReadError: lost,
        OSError: lost,
    }


def dial_errors(address: str, connect_timeout: float) -> ExceptionMapping:
    """The mapping for opening a connection to ``address``: every failure is a
    :class:`ConnectFailed` that says what an operator checks first."""

    def refused(_exc: BaseException) -> TideMQError:
        return ConnectFailed(address, "connection refused (nothing listens there: is the "
                                      "server running, and is this its port?)")

    def unknown_host(exc: BaseException) -> TideMQError:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return ConnectFailed(address, f"unknown host ({why})")

    def timed_out(_exc: BaseException) -> TideMQError:
        return ConnectFailed(address, f"no answer within {connect_timeout} s")

    def failed(exc: BaseException) -> TideMQError:
        return ConnectFailed(address, _reason(exc))

    return {
        TimeoutError: timed_out,
        ConnectionRefusedError: refused,
        socket.gaierror: unknown_host,
        OSError: failed,
    }


#: What an operator does about a bind's usual failures.
_BIND_ADVICE = {
    errno.EADDRINUSE: "address already in use: another process listens on this port (stop "
                      "it, or give this server another port)",
    errno.EADDRNOTAVAIL: "no interface of this machine has this address (check --host or "
                         "bindAddress)",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
}


def bind_errors(address: str) -> ExceptionMapping:
    """The mapping for listening on ``address``: an ``OSError`` becomes a
    :class:`BindFailed` naming the address and what to do."""

    def failed(exc: BaseException) -> TideMQError:
        code = exc.errno if isinstance(exc, OSError) else None
        why = _BIND_ADVICE.get(code or 0) or (
            exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
        return BindFailed(address, code, why)

    return {OSError: failed}
