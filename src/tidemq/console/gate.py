"""The outermost layer of the console's application: a request whose ``Host`` is not on
the allow-list (:mod:`tidemq.console.hosts`) is answered 421 -- 400 when it has no
usable ``Host`` -- before routing, so no handler ever runs for it."""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tidemq.console.hosts import HostAllowList, host_name

__all__ = ["HostGate"]


class HostGate:
    def __init__(self, app: ASGIApp, hosts: HostAllowList,
                 refused: Callable[[str], None] = lambda reason: None) -> None:
        self.app = app
        self.hosts = hosts
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        values = [v for k, v in scope["headers"] if k == b"host"]
        header = values[0].decode("latin-1") if len(values) == 1 else None
        if header is None or host_name(header) is None:
            self.refused("host")
            response = PlainTextResponse("a request needs one valid Host header",
                                         status_code=400)
            await response(scope, receive, send)
        elif not self.hosts.allows(header):
            self.refused("host")
            response = PlainTextResponse(
                f"this console does not answer to the name {host_name(header)!r} (add it "
                "to consoleAllowedHosts if it is yours)", status_code=421)
            await response(scope, receive, send)
        else:
            await self.app(scope, receive, send)
