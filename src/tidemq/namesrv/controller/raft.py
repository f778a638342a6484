"""The controllers' replicated log, on PySyncObj (Raft): no consensus code of our own.

:class:`RaftLog` runs one PySyncObj node on its own thread. :meth:`RaftLog.submit`
appends an event (on a follower PySyncObj forwards it to the leader) and resolves, on the
caller's event loop, once the event is committed and applied -- with what
:meth:`ControllerState.apply` returned, or with :class:`NotCommitted` when it could not be
committed (no leader, leadership lost meanwhile, no quorum).

The state is read from the event loop under :attr:`RaftLog.lock` (the apply runs on the
PySyncObj thread). With ``journal_dir`` set, the log is kept in files there and the
state survives a restart; without it a restarted controller catches up from its peers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from tidemq.errors import TideMQError
from tidemq.namesrv.controller.events import Event, decode_event, encode_event
from tidemq.namesrv.controller.state import ControllerState

__all__ = ["NotCommitted", "RaftLog", "RaftTiming"]


class NotCommitted(TideMQError):
    """An event could not be committed; ``reason`` is PySyncObj's ``FAIL_REASON`` name."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the controllers did not commit the change: {reason}")
        self.reason = reason


_REASONS = {value: name for name, value in vars(FAIL_REASON).items() if name.isupper()}


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


class _Consumer(SyncObjConsumer):  # type: ignore[misc]
    """The replicated part: :attr:`state`, written only by :meth:`append`."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock  # set before the base init: not part of the replicated state
        super().__init__()
        self.state = ControllerState()

    @replicated  # type: ignore[untyped-decorator]
    def append(self, data: bytes) -> bool:
        event = decode_event(data)
        with self._lock:
            return self.state.apply(event)


class RaftLog:
    def __init__(self, self_address: str, partners: list[str], *,
                 journal_dir: str | Path | None = None,
                 timing: RaftTiming | None = None, password: str = "") -> None:
        """``password``: encrypt and authenticate the traffic with peers with a key derived
        from it (PySyncObj's own; every peer needs the same, a peer without it cannot
        join); empty: plain."""
        timing = timing or RaftTiming()
        self.self_address = self_address
        self.partners = list(partners)
        self.lock = threading.Lock()
        self._consumer = _Consumer(self.lock)
        files: dict[str, Any] = {}
        if journal_dir is not None:
            path = Path(journal_dir)
            path.mkdir(parents=True, exist_ok=True)
            files = {"journalFile": str(path / "raft.journal"),
                     "fullDumpFile": str(path / "raft.dump")}
        conf = SyncObjConf(
            dynamicMembershipChange=False, commandsWaitLeader=False,
            raftMinTimeout=timing.min_timeout, raftMaxTimeout=timing.max_timeout,
            appendEntriesPeriod=timing.heartbeat, leaderFallbackTimeout=timing.leader_fallback,
            connectionRetryTime=timing.reconnect, password=password or None, **files)
        self._sync = SyncObj(self_address, self.partners, conf, consumers=[self._consumer])

    @contextlib.contextmanager
    def reading(self) -> Iterator[ControllerState]:
        """The state, held still while the caller reads it."""
        with self.lock:
            yield self._consumer.state

    def submit(self, event: Event) -> asyncio.Future[bool]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()

        def settle(result: Any, error: int) -> None:
            if future.done():
                return
            if error == FAIL_REASON.SUCCESS:
                future.set_result(bool(result))
            else:
                future.set_exception(NotCommitted(_REASONS.get(error, str(error))))

        def callback(result: Any, error: int) -> None:  # on the PySyncObj thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, result, error)

        self._consumer.append(encode_event(event), callback=callback)
        return future

    @property
    def is_leader(self) -> bool:
        """This node leads and hears from a quorum."""
        return bool(self._sync._isLeader()) and bool(self._sync.hasQuorum)

    @property
    def has_quorum(self) -> bool:
        return bool(self._sync.hasQuorum)

    @property
    def leader(self) -> str | None:
        """The Raft endpoint of the last known leader."""
        node = self._sync._getLeader()
        return None if node is None else str(node.address)

    @property
    def term(self) -> int:
        return int(self._sync.raftCurrentTerm)

    def close(self) -> None:
        """Stop the node and wait for its thread."""
        self._sync.destroy_synchronous()
