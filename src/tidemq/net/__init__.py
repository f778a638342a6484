"""tidemq.net: the asyncio and socket code shared by broker, name server and client.

* :class:`RemotingServer` -- accept connections, route requests to processors by code.
* :class:`RemotingClient` -- one multiplexed connection per server address.
* :class:`Connection` -- one socket: frames, opaque -> future, timeouts, idle close.
* :class:`BlockingClient` -- the same protocol over plain sockets, without asyncio.
* :func:`map_exceptions` / :func:`network_errors` -- socket errors become TideMQ errors.
"""

from tidemq.lazy import stub_exports

__all__, __getattr__ = stub_exports(__name__, __file__)
