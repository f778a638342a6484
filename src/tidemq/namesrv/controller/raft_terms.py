"""What the controller and its Raft log (:mod:`.raft`) share, without PySyncObj: Raft's
clocks and the error of a change the controllers did not commit. A name server that
runs no controller loads neither PySyncObj nor its encryption."""

from __future__ import annotations

import dataclasses

from tidemq.errors import TideMQError

__all__ = ["NotCommitted", "RaftTiming"]


class NotCommitted(TideMQError):
    """An event could not be committed; ``reason`` is PySyncObj's ``FAIL_REASON`` name."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the controllers did not commit the change: {reason}")
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class RaftTiming:
    """Raft's clocks, in seconds: a leader that stops sending is replaced after a random
    election timeout in ``[min_timeout, max_timeout]``; a leader that has not heard from a
    quorum for ``leader_fallback`` steps down."""

    min_timeout: float = 0.4
    max_timeout: float = 1.0
    heartbeat: float = 0.05
    leader_fallback: float = 2.0
    reconnect: float = 0.5
