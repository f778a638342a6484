"""The replica's side of the HA transfer: connect, report, receive, append.

:class:`HaClient` connects to its master's HA port, reports where its commit log ends
(:func:`~tidemq.codec.ha.encode_report`), and appends the bodies of the transfer frames
(:class:`~tidemq.codec.ha.TransferStream`) to its store at their offsets
(:meth:`MessageStore.append_replicated
<tidemq.store.message_store.MessageStore.append_replicated>`), reporting its new end after
each read -- the acknowledgement a SYNC_MASTER waits for, sent before the records are
dispatched into the replica's queues, as upstream's slave does -- and every
``haSendHeartbeatInterval`` when nothing arrives (the whole records of a frame that
stopped half-way dispatched first, as they are when the connection ends). A frame that
does not continue its log, a lost connection or a master that says nothing for
``haHousekeepingInterval`` closes the connection; the client connects again after
:data:`RECONNECT_DELAY` seconds and reports again, so the master resumes from what the
replica really holds. A master whose segments end elsewhere than this store's
(:class:`~tidemq.store.replica_log.SegmentSizeMismatch`: another
``mappedFileSizeCommitLog``) stops the copy for good, the log kept up to where they
part. With a ``tls`` context it connects with TLS, checking the master's
certificate against the host it dials. With ``credentials`` (the broker's own: ``accessKey``
and ``secretKey``, or ``innerClientAuthenticationCredentials``) each connection opens
with a signed authentication frame (:mod:`tidemq.codec.ha_auth`), which a master that
checks ACLs requires and one that does not skips.

The bytes are received into one buffer per connection (:class:`_Link`, a buffered
protocol) and written from there into the mapped segment, pieces of a frame as they
come: one copy between the socket and the commit log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import ssl
import time
from typing import cast

from tidemq.broker.replication.transfer_rate import TransferRate
from tidemq.codec.ha import TransferStream, encode_report
from tidemq.codec.ha_auth import NONCE_SIZE, encode_auth
from tidemq.codec.signature import SigningKey
from tidemq.errors import ConnectFailed, ProtocolError, StoreError
from tidemq.net.rate_limited_log import RateLimitedLog
from tidemq.net.self_connect import refuse_self_connection
from tidemq.net.tasks import cancel_and_wait
from tidemq.net.tls import describe_tls_failure
from tidemq.store.message_store import MessageStore
from tidemq.store.replica_log import SegmentSizeMismatch

__all__ = ["RECONNECT_DELAY", "HaClient", "ReplicaIdentity"]

log = logging.getLogger(__name__)

#: Seconds between two connection attempts to the master.
RECONNECT_DELAY = 0.5
_READ = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    """What a replica signs its authentication frame with, and the broker it names."""

    access_key: str
    key: SigningKey
    broker_name: str
    broker_id: int

    def frame(self) -> bytes:
        """A fresh frame: this moment's timestamp, a new nonce."""
        return encode_auth(self.access_key, self.key, timestamp_ms=int(time.time() * 1000),
                           nonce=os.urandom(NONCE_SIZE), broker_name=self.broker_name,
                           broker_id=self.broker_id)


class HaClient:
    """Copies the log of the master at ``master_address`` (``host:haListenPort``)."""

    def __init__(self, store: MessageStore, master_address: str, *, max_frame: int,
                 heartbeat_ms: int, housekeeping_ms: int,
                 tls: ssl.SSLContext | None = None,
                 identity: ReplicaIdentity | None = None) -> None:
        self.store = store
        self.tls = tls
        #: Signs the frame each connection opens with; ``None``: none is sent.
        self.identity = identity
        self.master_address = master_address
        self.max_frame = max_frame
        self.heartbeat = heartbeat_ms / 1000
        self.housekeeping = housekeeping_ms / 1000
        self.connected = asyncio.Event()
        #: time.monotonic() of the last frame from the master (0: none yet).
        self.last_frame = 0.0
        self.frames = 0
        #: The bytes received from the master a second.
        self.rate = TransferRate()
        #: When this replica last reported its offset to the master (monotonic; 0: never).
        self.last_report = 0.0
        self.last_error = ""
        #: This end of the connection to the master (the master lists the replica so).
        self.local_address = ""
        self._task: asyncio.Task[None] | None = None
        #: Set once the copy has ended (stopped, or given up for good).
        self.ended = asyncio.Event()
        self._progress = asyncio.Event()
        #: A master that closes every connection (one that refuses this replica) is
        #: dialled again every RECONNECT_DELAY: its warnings must not flood the log.
        self._stops = RateLimitedLog(log, burst=20, period=60.0)

    async def reached(self, offset: int) -> None:
        """Return once this replica's log reaches ``offset``."""
        while self.store.commitlog.max_offset < offset:
            self._progress.clear()
            await self._progress.wait()

    def start(self) -> None:
        """Copy until :meth:`stop`; the store knows a copy may append until the copy's
        task has ended (:meth:`MessageStore.copy_started
        <tidemq.store.message_store.MessageStore.copy_started>`)."""
        self.store.copy_started()
        task = self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"ha-client-{self.master_address}")
        task.add_done_callback(self._ended)

    def _ended(self, _task: asyncio.Task[None]) -> None:
        # runs before the stop's own wake-up (callbacks run in the order they were added)
        self.store.copy_stopped()
        self.ended.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        host, _, port = self.master_address.rpartition(":")
        loop = asyncio.get_running_loop()
        while True:
            try:
                _, link = await loop.create_connection(
                    functools.partial(_Link, self), host, int(port), ssl=self.tls,
                    server_hostname=host if self.tls is not None else None)
            except OSError as exc:
                why = describe_tls_failure(exc) if isinstance(exc, ssl.SSLError) else exc
                self.last_error = f"connecting to {self.master_address}: {why}"
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            transport = link.transport
            try:  # it would read its own reports as frames, and keep the master's port
                refuse_self_connection(
                    None if transport is None else transport.get_extra_info("socket"),
                    self.master_address)
            except ConnectFailed as exc:
                link.close()
                self.last_error = f"connecting to {self.master_address}: {exc.reason}"
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            try:
                await self._copy(link)
            except SegmentSizeMismatch as exc:
                self.last_error = f"{self.master_address}: {exc}"
                log.error("replication from %s stopped: %s", self.master_address, exc)
                return
            except (ConnectionError, ProtocolError, StoreError, TimeoutError) as exc:
                self.last_error = f"{self.master_address}: {exc}"
                self._stops.warning("replication from %s stopped: %s; reconnecting",
                                    self.master_address, exc)
            finally:
                self.connected.clear()
                link.close()
                self._dispatch_rest()
            await asyncio.sleep(RECONNECT_DELAY)

    def _dispatch_rest(self) -> None:
        """The whole records of the frame the connection ended in, dispatched now rather
        than with the next connection's first frame (which may never come)."""
        try:
            self.store.dispatch_replicated()
        except StoreError as exc:
            log.warning("dispatching the records received from %s: %s",
                        self.master_address, exc)

    async def _copy(self, link: _Link) -> None:
        """Report, then wait while :class:`_Link` appends what arrives: every heartbeat
        interval, report again if nothing came, and give up on a master silent for the
        housekeeping interval. Returns only by raising why the copy stopped."""
        sock = link.sockname
        self.local_address = f"{sock[0]}:{sock[1]}" if sock else ""
        if self.identity is not None:
            link.write(self.identity.frame())
        link.report()
        self.connected.set()
        log.info("replicating from %s at offset %d", self.master_address,
                 self.store.commitlog.max_offset)
        while True:
            due = self.last_report + self.heartbeat - time.monotonic()
            done, _ = await asyncio.wait([link.closed], timeout=max(due, 0.001))
            if done:
                link.closed.result()  # raises why
                raise link._closed_by_master()
            now = time.monotonic()
            if now - link.last_heard > self.housekeeping:
                raise TimeoutError(f"master silent for {self.housekeeping:.0f} s")
            # nothing reported for an interval: the master's empty frames, which an idle
            # master sends, are not reported on, and it drops a replica that stays silent
            if now - self.last_report >= self.heartbeat:
                # the whole records of a frame that stopped half-way are readable before
                # the report acknowledges them
                self.store.dispatch_replicated()
                link.report()

    def _received(self, data: memoryview, link: _Link) -> None:
        """One read: append its body bytes; once a read completes a frame, confirm what
        the log holds, then build the queues (a SYNC_MASTER's sends wait for the report,
        not for the dispatch). A read that only continues a frame is not reported on:
        each report and dispatch has a fixed cost, and a frame's reads follow closely."""
        store = self.store
        stream = link.stream
        before = stream.frames
        got = False
        for offset, piece in stream.feed(data):
            store.append_replicated(offset, piece, dispatch=False)
            got = True
        self.frames = link.frames_before + stream.frames
        self.last_frame = link.last_heard
        if got and stream.frames != before:
            link.report()
            store.dispatch_replicated()
            self._progress.set()


class _Link(asyncio.BufferedProtocol):
    """One connection to the master: reads land in :attr:`buffer` and go to
    :meth:`HaClient._received` at once, so the buffer is free again for the next read.
    :attr:`closed` completes, with the reason as its exception, when the connection ends.

    Reports are 8 bytes written after a read (or a silent interval), so what waits in the
    transport to be sent is bounded by what the master sends: no write flow control."""

    def __init__(self, client: HaClient) -> None:
        self.client = client
        self.buffer = memoryview(bytearray(_READ))
        self.stream = TransferStream(client.max_frame)
        self.frames_before = client.frames
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.sockname: tuple[str, int] | None = None
        self.last_heard = time.monotonic()
        #: Whether the master sent anything on this connection.
        self.heard = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio.Transport: no isinstance check
        self.transport = cast(asyncio.Transport, transport)
        self.sockname = transport.get_extra_info("sockname")

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.heard = True
        self.last_heard = time.monotonic()
        self.client.rate.add(nbytes, self.last_heard)
        try:
            self.client._received(self.buffer[:nbytes], self)
        except Exception as exc:  # handed to _copy, which decides
            self._finish(exc)
            self.close()

    def eof_received(self) -> bool:
        self._finish(self._closed_by_master())
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        refused = isinstance(exc, ConnectionResetError) and not self.heard
        self._finish(self._closed_by_master() if exc is None or refused else exc)

    def _closed_by_master(self) -> ConnectionError:
        if self.heard:
            return ConnectionError("the master closed the connection")
        why = ("a master with ACL on closes replicas it does not admit, and one with "
               "tls.server.mode=enforcing plain connections (tls.enable=true dials with TLS)"
               if self.client.tls is None else
               "a master with ACL on closes replicas it does not admit")
        return ConnectionError("the master closed the connection before sending anything "
                               f"({why}; its log says why)")

    def _finish(self, exc: BaseException) -> None:
        if not self.closed.done():
            self.closed.set_exception(exc)

    def report(self) -> None:
        """Tell the master where this replica's log ends."""
        if self.write(encode_report(self.client.store.commitlog.max_offset)):
            self.client.last_report = time.monotonic()

    def write(self, data: bytes) -> bool:
        """Write ``data`` unless the connection is closing; whether it was written."""
        if self.transport is None or self.transport.is_closing():
            return False
        self.transport.write(data)
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.closed.done():
            self.closed.set_exception(ConnectionError("closed by this replica"))
        self.closed.exception()  # retrieved: no "never retrieved" warning
