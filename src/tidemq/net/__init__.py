"""tidemq.net: the asyncio and socket code shared by broker, name server and client.

* :class:`RemotingServer` -- accept connections, route requests to processors by code.
* :class:`RemotingClient` -- one multiplexed connection per server address.
* :class:`Connection` -- one socket: frames, opaque -> future, timeouts, idle close.
* :class:`BlockingClient` -- the same protocol over plain sockets, without asyncio.
* :func:`map_exceptions` / :func:`network_errors` -- socket errors become TideMQ errors.
"""

from tidemq.net.address import format_address, parse_address
from tidemq.net.blocking import BlockingClient
from tidemq.net.client import RemotingClient
from tidemq.net.connection import (
    DEFAULT_IDLE_SECONDS,
    CloseCallback,
    Connection,
    ConnState,
    RequestHandler,
)
from tidemq.net.dispatcher import Dispatcher, Processor
from tidemq.net.errors import ExceptionMapping, map_exceptions, network_errors
from tidemq.net.server import RemotingServer

__all__ = [
    "DEFAULT_IDLE_SECONDS",
    "BlockingClient",
    "CloseCallback",
    "ConnState",
    "Connection",
    "Dispatcher",
    "ExceptionMapping",
    "Processor",
    "RemotingClient",
    "RemotingServer",
    "RequestHandler",
    "format_address",
    "map_exceptions",
    "network_errors",
    "parse_address",
]
