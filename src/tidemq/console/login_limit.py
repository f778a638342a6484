"""Failed console logins: at most ``attempts`` per client address in each ``window``
seconds; past that, the address is refused without a password check until its window
ends. At most ``max_addresses`` addresses are tracked (the oldest is forgotten first),
so a flood from many addresses cannot grow memory without bound.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["LoginLimiter"]


class LoginLimiter:
    def __init__(self, *, attempts: int = 5, window: float = 60.0,
                 max_addresses: int = 10_000, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        if attempts < 1 or window <= 0 or max_addresses < 1:
            raise ValueError("attempts and max_addresses must be >= 1, window positive")
        self.attempts = attempts
        self.window = window
        self.max_addresses = max_addresses
        self._clock = clock
        self._failures: OrderedDict[str, tuple[float, int]] = OrderedDict()  # start, count

    def blocked_for(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: it may now)."""
        entry = self._failures.get(address)
        if entry is None:
            return 0.0
        start, count = entry
        left = start + self.window - self._clock()
        if left <= 0:
            del self._failures[address]
            return 0.0
        return left if count >= self.attempts else 0.0

    def failed(self, address: str) -> None:
        now = self._clock()
        start, count = self._failures.pop(address, (now, 0))
        if now - start >= self.window:
            start, count = now, 0
        self._failures[address] = (start, count + 1)
        while len(self._failures) > self.max_addresses:
            self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
