"""The store dispatcher's linger while pulls are held (``skipDispatchLingerWhenHeld``).

:class:`DispatchLinger` turns the store dispatcher's linger (``dispatchLingerMs``) off
while pulls are held (:mod:`tidemq.broker.holds`): a held pull waits for exactly the round
the linger delays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

__all__ = ["DispatchLinger", "SupportsLinger"]

class SupportsLinger(Protocol):
    """The store dispatcher's knob: seconds it waits before taking a small round."""

    linger: float


class DispatchLinger:
    """The dispatcher's linger is 0 while consumers long-poll, the configured one otherwise.

    The dispatcher waits ``linger`` before a round of a few puts so that more of them
    share it; a held pull waits for exactly that round, so the linger is latency it adds.
    :meth:`held` (called for every hold, on the loop) switches the linger off; a check
    every ``grace`` seconds switches it back on once no pull was held since the last
    check and ``waiting()`` says none is held now -- a consumer between two of its pulls
    still counts as waiting.
    """

    def __init__(self, dispatcher: SupportsLinger, waiting: Callable[[], bool], *,
                 grace: float = 1.0) -> None:
        self._dispatcher = dispatcher
        self._waiting = waiting
        self._linger = dispatcher.linger
        self._grace = grace
        self._recent = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def active(self) -> bool:
        """Whether the linger is switched off now."""
        return self._timer is not None

    def held(self) -> None:
        self._recent = True
        if self._timer is None and self._linger:
            self._dispatcher.linger = 0.0
            self._timer = asyncio.get_running_loop().call_later(self._grace, self._check)

    def _check(self) -> None:
        if self._recent or self._waiting():
            self._recent = False
            self._timer = asyncio.get_running_loop().call_later(self._grace, self._check)
            return
        self._timer = None
        self._dispatcher.linger = self._linger

    def close(self) -> None:
        """Restore the configured linger and stop checking."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._dispatcher.linger = self._linger
