"""tidemq.console: the web console (cluster, topics, consumer groups and their lag,
message lookup, logical queues, LMQ counts), served by uvicorn; it talks to the cluster
only through :mod:`tidemq.client`. Users log in when a users file is configured
(:mod:`tidemq.console.users`; admins change things, viewers look); every change needs
the session's CSRF token, and only the names of the Host allow-list are answered.

::

    async with ConsoleServer("127.0.0.1:9876", port=8080) as console:
        print(console.url)
"""

from tidemq.console.app import Console, create_app
from tidemq.console.server import ConsoleServer

__all__ = ["Console", "ConsoleServer", "create_app"]
