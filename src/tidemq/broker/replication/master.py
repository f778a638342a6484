"""The master's side of the HA transfer: replicas connect, report, and are streamed to.

Each replica connection (:class:`ReplicaLink`) has a reader, which takes the replica's
offset reports (:class:`~tidemq.codec.ha.ReportDecoder`), and a sender, which streams
the commit log from the first offset reported, in order, in frames of at most
``haTransferBatchSize`` bytes read from the mapped segments
(:meth:`MessageStore.read_log <tidemq.store.message_store.MessageStore.read_log>`). A
replica that is far behind is served the same way as one that is current: nothing is
buffered for it. The store's append hook only records that the log grew and wakes
senders that wait for data (:meth:`HaServer.appended`, under the append lock: it never
touches the network). A sender with nothing to send writes an empty frame every
``haSendHeartbeatInterval``; a replica silent for ``haHousekeepingInterval`` is dropped.

With ``tls`` settings that have a certificate, the port follows ``tls.server.mode`` as the
remoting port does (:class:`~tidemq.net.tls_listener.TlsListener`): replicas speak first,
so TLS and plain replicas are told apart by their first byte; a plain replica refused by
``enforcing`` is closed (and logged).

Connections take a slot of the process's
:func:`~tidemq.net.connection_slots.process_slots`, as the remoting port's do.

On a master whose broker checks ACLs a replica opens with a signed authentication frame
(:mod:`tidemq.codec.ha_auth`), checked by
:class:`~tidemq.broker.replication.replica_auth.ReplicaAuth` before its first report is
read: a replica refused is disconnected before a byte of the log is sent, with the
reason and the access key logged, and is never listed, so it counts for no SYNC_MASTER
send, no ``haStatus`` and no in-sync set. A master without ACL skips such a frame.

A replica that reports an offset this master does not hold -- beyond its end, or before
its first segment when not 0 -- is disconnected with the reason logged; so is one that
later reports more than it was sent (its report would count as a copy it does not hold).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from tidemq.broker.replication.append_times import AppendTimes
from tidemq.broker.replication.replica_auth import HaRefusal, ReplicaAuth
from tidemq.broker.replication.transfer_rate import TransferRate
from tidemq.codec.ha import ReportDecoder, encode_frame_header
from tidemq.codec.ha_auth import AuthFrame, OpeningDecoder
from tidemq.errors import RemoteProtocolError
from tidemq.formats.record import MAGIC_V1, MAGIC_V2, OFF_MAGIC, OFF_SYSFLAG, store_timestamp_offset
from tidemq.net.connection_slots import process_slots
from tidemq.net.rate_limited_log import RateLimitedLog
from tidemq.net.tls import ServerTlsContext, TlsServerSettings
from tidemq.net.tls_listener import TlsListener
from tidemq.store.message_store import MessageStore

__all__ = ["HaServer", "ReplicaLink"]

log = logging.getLogger(__name__)
#: Refused connections: a scan of the port must not flood the log.
_refusals = RateLimitedLog(log, burst=20, period=60.0)

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclasses.dataclass(eq=False, slots=True)
class ReplicaLink:
    """One connected replica."""

    address: str
    #: The replica's commit log ends here, as it last reported.
    acked: int = -1
    #: The next offset to send it.
    sending: int = -1
    #: The offset its transfer started from (upstream's ``transferFromWhere``).
    transfer_from: int = -1
    #: The bytes sent to it a second.
    rate: TransferRate = dataclasses.field(default_factory=TransferRate)
    last_report: float = dataclasses.field(default_factory=time.monotonic)
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    waiting: bool = False
    #: Whether it proved who it is (:mod:`tidemq.codec.ha_auth`), and as whom.
    authenticated: bool = False
    access_key: str = ""
    #: The broker (name, id) its frame named, once authenticated.
    broker: tuple[str, int] | None = None


class HaServer:
    """Accepts replicas on ``host:port`` and streams them the store's commit log."""

    def __init__(self, store: MessageStore, host: str, port: int, *, batch_size: int,
                 heartbeat_ms: int, housekeeping_ms: int, max_gap_not_in_sync: int,
                 tls: TlsServerSettings | None = None,
                 auth: ReplicaAuth | None = None) -> None:
        self.store = store
        #: Who may copy the log (by default: anyone, as a master without ACL).
        self.auth = auth if auth is not None else ReplicaAuth(
            None, own=None, allow_unauthenticated=True)
        self.tls = tls if tls is not None and tls.active else None
        self.host = host
        self.port = port
        self.batch_size = batch_size
        self.heartbeat = heartbeat_ms / 1000
        self.housekeeping = housekeeping_ms / 1000
        self.max_gap = max_gap_not_in_sync
        self.links: list[ReplicaLink] = []
        #: Called on the loop after every offset report.
        self.on_report: list[Callable[[], None]] = []
        self._server: asyncio.Server | None = None
        self._listener: TlsListener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._hooked = False
        #: The store time of what this master appends, by offset: a replica's report
        #: may fall inside a record.
        self.times = AppendTimes(self._time_of_record_at)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if not self._hooked:
            self.store.add_append_hook(self.appended)
            self._hooked = True
        if self.tls is not None:
            self._listener = TlsListener(
                self.host, self.port, mode=self.tls.mode, contexts=ServerTlsContext(self.tls),
                accepted=self._stream_protocol, refused=_Closing)
            self.port = self._listener.bind()
            self._listener.serve()
        else:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
            self.port = self._server.sockets[0].getsockname()[1]
        log.info("HA server listening on %s:%d%s", self.host, self.port,
                 f" (TLS {self.tls.mode.value})" if self.tls is not None else "")

    def _stream_protocol(self) -> asyncio.StreamReaderProtocol:
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._serve)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.links.clear()

    # ------------------------------------------------------------------ figures

    def acked_offsets(self) -> list[int]:
        return [link.acked for link in self.links if link.acked >= 0]

    def in_sync(self) -> int:
        """Replicas within ``haMaxGapNotInSync`` bytes of the log's end."""
        end = self.store.commitlog.max_offset
        return sum(1 for link in self.links if link.acked >= 0 and end - link.acked <= self.max_gap)

    def authenticated_brokers(self) -> set[tuple[str, int]]:
        """The brokers (name, id) that authenticated and reported."""
        return {link.broker for link in self.links
                if link.broker is not None and link.acked >= 0}

    def replica_status(self, now_ms: int) -> list[dict[str, Any]]:
        """Per connected replica: its HA address (the replica's end of the connection),
        the offset it reported, the bytes it lacks, whether it is in sync, and how far
        behind it is in time -- the age of the oldest record it lacks (0 when it lacks
        none, -1 when that record's store time is not known)."""
        end = self.store.commitlog.max_offset
        out = []
        for link in self.links:
            if link.acked < 0:
                continue
            lag = max(0, end - link.acked)
            out.append({"address": link.address, "ackedOffset": link.acked, "lagBytes": lag,
                        "lagMs": self._lag_ms(link.acked, now_ms) if lag else 0,
                        "inSync": lag <= self.max_gap, "authenticated": link.authenticated,
                        "accessKey": link.access_key})
        return out

    def _lag_ms(self, offset: int, now_ms: int) -> int:
        """``now_ms`` less the store time of the record holding ``offset`` (or of the next
        record, when ``offset`` is in a BLANK marker or a segment's unused tail); -1 when
        it is not known."""
        stored = self.times.time_at(offset)
        if stored is None:  # appended before this server started: a record starting there
            stored = self._time_of_record_at(offset)
        return -1 if stored is None else max(0, now_ms - stored)

    def _time_of_record_at(self, offset: int) -> int | None:
        """The store time of the record that starts at ``offset`` (or at the start of the
        next segment, when ``offset`` is a segment's unused tail); ``None`` when no record
        starts there."""
        store = self.store
        view = store.read_record(offset)
        if view is None:
            size = store.config.mapped_file_size_commit_log
            view = store.read_record((offset // size + 1) * size)
        if view is None or len(view) < OFF_SYSFLAG + 4:
            return None
        if _I32.unpack_from(view, OFF_MAGIC)[0] not in (MAGIC_V1, MAGIC_V2):
            return None  # inside a record, not at its start
        at = store_timestamp_offset(_I32.unpack_from(view, OFF_SYSFLAG)[0])
        if len(view) < at + 8:
            return None
        stored: int = _I64.unpack_from(view, at)[0]
        return stored

    def lag_bytes(self) -> dict[str, int]:
        """Per replica address: bytes of the log it does not hold yet."""
        end = self.store.commitlog.max_offset
        return {link.address: max(0, end - link.acked) for link in self.links if link.acked >= 0}

    # ------------------------------------------------------------------ the append hook

    def appended(self, start: int, view: memoryview) -> None:
        """The log grew (under the append lock): note the run's store time, and wake the
        senders that wait."""
        self.times.note(start, view)
        for link in self.links:
            if link.waiting:
                link.waiting = False
                if threading.get_ident() == self._loop_thread:
                    link.wake.set()
                elif self._loop is not None:
                    with contextlib.suppress(RuntimeError):
                        self._loop.call_soon_threadsafe(link.wake.set)

    # ------------------------------------------------------------------ one replica

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        slots = process_slots()
        if not slots.take(f"HA server {self.host}:{self.port}"):
            writer.close()
            return
        try:
            await self._serve_replica(reader, writer)
        finally:
            slots.give()

    async def _serve_replica(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        link = ReplicaLink(f"{peer[0]}:{peer[1]}" if peer else "?")
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        decoder = ReportDecoder()
        opening: OpeningDecoder | None = OpeningDecoder()
        sender: asyncio.Task[None] | None = None
        try:
            while True:
                try:
                    # Not wait_for: on Python 3.11 it returns the data, and drops the
                    # cancellation, when close() lands in the step a report arrives.
                    async with asyncio.timeout(self.housekeeping):
                        data = await reader.read(4096)
                except TimeoutError:
                    log.warning("replica %s silent for %.0f s: disconnected", link.address,
                                self.housekeeping)
                    return
                if not data:
                    return
                if opening is not None:  # the first bytes: a frame, or a plain report
                    try:
                        opened = opening.receive(data)
                    except RemoteProtocolError as exc:
                        self._malformed(link, exc)
                        return
                    if opened is None:
                        continue
                    if not self._admit(link, opened.frame):
                        return
                    opening = None
                    data = opened.rest
                offset = decoder.receive(data)
                if offset is None:
                    continue
                link.last_report = time.monotonic()
                if sender is None:
                    refusal = self._refusal(offset)
                    if refusal:
                        log.error("replica %s: %s; disconnected", link.address, refusal)
                        return
                    link.sending = max(offset, self.store.commitlog.min_offset)
                    link.transfer_from = link.sending
                    link.acked = offset
                    self.links.append(link)
                    log.info("replica %s connected at offset %d", link.address, offset)
                    sender = asyncio.get_running_loop().create_task(self._send(link, writer))
                    self._tasks.add(sender)
                    sender.add_done_callback(self._tasks.discard)
                elif offset > link.sending:
                    # an honest replica holds only what it was sent: a SYNC_MASTER
                    # must not count this report as a copy
                    log.error("replica %s: it reports offset %d, beyond the %d sent to it; "
                              "disconnected", link.address, offset, link.sending)
                    return
                link.acked = offset
                for listener in self.on_report:
                    listener()
                if sender.done():
                    return
        except (ConnectionError, RemoteProtocolError) as exc:
            log.warning("replica %s: %s", link.address, exc)
        except asyncio.CancelledError:
            pass  # the server closes: the connection ends with it
        finally:
            if link in self.links:
                self.links.remove(link)
                log.info("replica %s disconnected", link.address)
            if sender is not None:
                sender.cancel()
            writer.close()
            self._tasks.discard(task)
            for listener in self.on_report:
                listener()

    def _malformed(self, link: ReplicaLink, exc: RemoteProtocolError) -> None:
        if self.auth.required:
            self.auth.malformed()
        _refusals.warning("HA connection from %s refused: %s; disconnected", link.address, exc)

    def _admit(self, link: ReplicaLink, frame: AuthFrame | None) -> bool:
        """Whether the replica that opened with ``frame`` may copy the log (its link
        marked as it was let in); a refusal is logged (and counted by the check)."""
        try:
            admitted = self.auth.admit(frame, link.address)
        except HaRefusal as refusal:
            _refusals.warning("HA connection from %s refused (%s): %s; access key %s; "
                              "disconnected", link.address, refusal.reason, refusal.detail,
                              refusal.access_key or "(none)")
            return False
        link.authenticated = admitted.authenticated
        link.access_key = admitted.access_key
        if admitted.authenticated:
            link.broker = (admitted.broker_name, admitted.broker_id)
        if admitted.authenticated:
            log.info("replica %s authenticated as %s", link.address, admitted.access_key)
        return True

    def _refusal(self, offset: int) -> str:
        cl = self.store.commitlog
        if offset > cl.max_offset:
            return (f"it reports offset {offset}, beyond this master's end {cl.max_offset}: "
                    "its log has diverged")
        if offset and offset < cl.min_offset:
            return (f"it reports offset {offset}, before this master's first segment "
                    f"{cl.min_offset}: start it with an empty store")
        return ""

    async def _send(self, link: ReplicaLink, writer: asyncio.StreamWriter) -> None:
        store = self.store
        try:
            while True:
                view = store.read_log(link.sending, self.batch_size)
                if view is None:
                    log.error("replica %s: offset %d is no longer stored", link.address,
                              link.sending)
                    return
                if len(view):
                    # a copy, not a view: a transport may hold what it has not sent yet
                    # past a cut of this log's tail
                    writer.write(encode_frame_header(link.sending, len(view)) + view)
                    link.sending += len(view)
                    link.rate.add(len(view), time.monotonic())
                    await writer.drain()
                    continue
                link.waiting = True
                link.wake.clear()
                if store.commitlog.max_offset > link.sending:  # grew meanwhile
                    link.waiting = False
                    continue
                try:
                    async with asyncio.timeout(self.heartbeat):  # (see _serve)
                        await link.wake.wait()
                except TimeoutError:
                    link.waiting = False
                    writer.write(encode_frame_header(link.sending, 0))
                    await writer.drain()
        except ConnectionError as exc:
            log.warning("replica %s: %s", link.address, exc)
        finally:
            writer.close()


class _Closing(asyncio.Protocol):
    """A plain replica refused by ``tls.server.mode=enforcing``: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
