"""The connections a process's listeners hold open, within a share of its open files.

Each accepted connection is a file descriptor, and so is each segment, queue file and
configuration file a broker's store opens: a peer that opened connections until the
process ran out would leave the store unable to open its next file (a new queue's file, a
table rewritten), and writes and dispatch would fail for everyone. The listeners of one
process (remoting, HA, metrics) therefore take a slot from one :class:`ConnectionSlots`
for each connection they accept, and close a connection for which none is left as soon
as it is accepted. :func:`process_slots` is the process's: half of its soft limit on
open files (``ulimit -n``), the other half kept for its files; raise that limit to let
more clients in.
"""

from __future__ import annotations

import functools
import logging
import resource

from tidemq.net.rate_limited_log import RateLimitedLog

__all__ = ["ConnectionSlots", "process_slots"]

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log, burst=5, period=60.0)

#: The fewest slots a process has, whatever its limit on open files.
_MIN_SLOTS = 64


class ConnectionSlots:
    """At most ``limit`` connections open at once over the listeners that share it."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a connection limit must be positive, not {limit}")
        self.limit = limit
        #: Connections holding a slot now.
        self.open = 0
        #: Connections closed at accept since start, for want of a slot.
        self.refused = 0

    def take(self, where: str) -> bool:
        """A slot for a connection just accepted by the listener ``where``; ``False``
        (logged, rate-limited) when all are taken: the caller closes the connection."""
        if self.open >= self.limit:
            self.refused += 1
            _refusals.warning(
                "%s: a connection was closed at once: %d connections are open, all this "
                "process admits (half its limit on open files, the other half kept for "
                "its files; raise ulimit -n to admit more)", where, self.open)
            return False
        self.open += 1
        return True

    def give(self) -> None:
        """The slot of a connection that closed."""
        self.open = max(0, self.open - 1)


@functools.cache
def process_slots() -> ConnectionSlots:
    """The slots of this process's listeners (created at the first call)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft // 2 if soft != resource.RLIM_INFINITY else 1 << 20
    return ConnectionSlots(max(_MIN_SLOTS, limit))
