"""tidemq.net: the asyncio and socket code shared by broker, name server and client.

* :class:`RemotingServer` -- accept connections, route requests to processors by code.
* :class:`RemotingClient` -- one multiplexed connection per server address.
* :class:`Connection` -- one socket: frames, opaque -> future, timeouts, idle close.
* :class:`BlockingClient` -- the same protocol over plain sockets, without asyncio.
* :func:`map_exceptions` / :func:`network_errors` -- socket errors become TideMQ errors.
"""

from tidemq.lazy import exports

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

__getattr__ = exports(__name__, {
    "tidemq.net.address": ("format_address", "parse_address"),
    "tidemq.net.blocking": ("BlockingClient",),
    "tidemq.net.client": ("RemotingClient",),
    "tidemq.net.connection": (
        "DEFAULT_IDLE_SECONDS",
        "CloseCallback",
        "Connection",
        "ConnState",
        "RequestHandler",
    ),
    "tidemq.net.dispatcher": ("Dispatcher", "Processor"),
    "tidemq.net.errors": ("ExceptionMapping", "map_exceptions", "network_errors"),
    "tidemq.net.server": ("RemotingServer",),
})
