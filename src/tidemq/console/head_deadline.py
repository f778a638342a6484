"""uvicorn's HTTP/1.1 protocol with a deadline on each request head.

uvicorn waits for a request head as long as a client takes to send it: a client that
opens connections and sends a head a byte at a time (or not at all) holds each one open
for good, until the console has no file descriptors left. :class:`HeadDeadlineProtocol`
closes a connection whose request head has not arrived whole within
:data:`HEAD_SECONDS` of the connection opening or of the previous answer; what follows
the head (a body, the answer) is not limited by it.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEAD_SECONDS", "HeadDeadlineProtocol"]

log = logging.getLogger(__name__)

#: Seconds a client has to send a whole request head.
HEAD_SECONDS = 10.0


class HeadDeadlineProtocol(H11Protocol):
    """See the module docstring."""

    head_seconds = HEAD_SECONDS
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.head_seconds, self._head_due)

    def _head_due(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            peer = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info("console: closing %s: no whole request head within %.0f s", peer,
                     self.head_seconds)
            self.transport.close()
