"""The controllers' replicated log, on PySyncObj (Raft): no consensus code of our own.

:class:`RaftLog` runs one PySyncObj node on its own thread. :meth:`RaftLog.submit`
appends an event (on a follower PySyncObj forwards it to the leader) and resolves, on the
caller's event loop, once the event is committed and applied -- with what
:meth:`ControllerState.apply` returned, or with :class:`NotCommitted` when it could not be
committed (no leader, leadership lost meanwhile, no quorum).

The state is read from the event loop under :attr:`RaftLog.lock` (the apply runs on the
PySyncObj thread). :attr:`RaftLog.is_leader` holds only once a new leader has applied
the first entry of its own term, so a leader never answers from a state that lacks
entries committed before it took over.

With ``journal_dir`` set, the log is kept in files there and the state survives a
restart; without it a restarted controller catches up from its peers, having forgotten
what it acknowledged and whom it voted for -- a change that only it and another
controller that is down had received is then lost.
"""

from __future__ import annotations

import _socket
import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

from tidemq.errors import ConnectFailed
from tidemq.namesrv.controller.events import Event, decode_event, encode_event
from tidemq.namesrv.controller.raft_terms import NotCommitted, RaftTiming
from tidemq.namesrv.controller.state import ControllerState
from tidemq.net.self_connect import refuse_self_connection

__all__ = ["NotCommitted", "RaftLog", "RaftTiming"]

# Importing PySyncObj replaces socket.inet_ntop with a Windows-only stand-in on every
# platform (pysyncobj/win_inet_pton.py); the process's own is put back.
socket.inet_ntop = _socket.inet_ntop


log = logging.getLogger(__name__)

_REASONS = {value: name for name, value in vars(FAIL_REASON).items() if name.isupper()}


class _Transport(TCPTransport):  # type: ignore[misc]
    """PySyncObj's TCP transport, closing a dial to a peer that met itself
    (:mod:`tidemq.net.self_connect`): with the peer down and its port in the ephemeral
    range, the dial can be given that port as its own end, and PySyncObj would keep the
    connection -- talking to itself as that peer, and holding the port the peer must
    listen on when it comes back. The dial is closed with a reset, as a refused one, and
    tried again after ``connectionRetryTime``."""

    def _onOutgoingConnected(self, conn: TcpConnection) -> None:  # noqa: N802 - PySyncObj's name
        fd = conn.fileno()
        if fd is not None:
            with socket.socket(fileno=os.dup(fd)) as sock:
                try:
                    refuse_self_connection(sock, "a Raft peer")
                except ConnectFailed:
                    log.info("controller: a dial to a Raft peer met itself (the peer is "
                             "down and its port is in the ephemeral range): closed")
                    conn.disconnect()
                    return
        super()._onOutgoingConnected(conn)


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
        self._sync = SyncObj(self_address, self.partners, conf, consumers=[self._consumer],
                             transportClass=_Transport)
        #: The term in which this node leads and has applied the first entry of its own
        #: term (see :meth:`_note_caught_up`); -1: none yet.
        self._caught_up_term = -1
        self._sync.addOnTickCallback(self._note_caught_up)

    def _note_caught_up(self) -> None:
        """On the PySyncObj thread, after each round of applies: note the term once this
        node leads and has applied the no-op PySyncObj appends on taking over.

        A new leader may hold entries that an earlier leader committed but that it has
        not applied yet (it had not heard their commit before the old leader went away);
        an entry of its own term is committed only once everything before it is, so until
        that no-op is applied its state can lack groups the controllers already agreed on.
        """
        sync = self._sync
        # The index of that no-op is not public; without it nobody counts as leading.
        no_op = getattr(sync, "_SyncObj__noopIDx", None)
        if sync._isLeader() and no_op is not None and sync.raftLastApplied >= no_op:
            self._caught_up_term = int(sync.raftCurrentTerm)

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
        """This node leads, hears from a quorum, and has applied every entry committed
        before it took over (Raft's condition before a new leader may serve reads)."""
        sync = self._sync
        term = sync.raftCurrentTerm
        return (self._caught_up_term == term and bool(sync._isLeader())
                and bool(sync.hasQuorum) and sync.raftCurrentTerm == term)

    @property
    def catching_up(self) -> bool:
        """This node won an election but has not yet applied everything committed before
        (it does not count as :attr:`is_leader` meanwhile)."""
        sync = self._sync
        return bool(sync._isLeader()) and self._caught_up_term != sync.raftCurrentTerm

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
