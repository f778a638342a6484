"""The replica's side of the HA transfer: connect, report, receive, append.

:class:`HaClient` connects to its master's HA port, reports where its commit log ends
(:func:`~tidemq.codec.ha.encode_report`), and appends every transfer frame
(:class:`~tidemq.codec.ha.TransferDecoder`) to its store at the frame's offset
(:meth:`MessageStore.append_replicated
<tidemq.store.message_store.MessageStore.append_replicated>`), reporting its new end after
each read -- the acknowledgement a SYNC_MASTER waits for, sent before the records are
dispatched into the replica's queues, as upstream's slave does -- and every
``haSendHeartbeatInterval`` when nothing arrives. A frame that does not continue its log,
a lost connection or a master that says nothing for ``haHousekeepingInterval`` closes the
connection; the client connects again after :data:`RECONNECT_DELAY` seconds and reports
again, so the master resumes from what the replica really holds. With a ``tls`` context it
connects with TLS, checking the master's certificate against the host it dials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time

from tidemq.codec.ha import TransferDecoder, encode_report
from tidemq.errors import ProtocolError, StoreError
from tidemq.net.tls import describe_tls_failure
from tidemq.store.message_store import MessageStore

__all__ = ["RECONNECT_DELAY", "HaClient"]

log = logging.getLogger(__name__)

#: Seconds between two connection attempts to the master.
RECONNECT_DELAY = 0.5
_READ = 1 << 20


class HaClient:
    """Copies the log of the master at ``master_address`` (``host:haListenPort``)."""

    def __init__(self, store: MessageStore, master_address: str, *, max_frame: int,
                 heartbeat_ms: int, housekeeping_ms: int,
                 tls: ssl.SSLContext | None = None) -> None:
        self.store = store
        self.tls = tls
        self.master_address = master_address
        self.max_frame = max_frame
        self.heartbeat = heartbeat_ms / 1000
        self.housekeeping = housekeeping_ms / 1000
        self.connected = asyncio.Event()
        #: time.monotonic() of the last frame from the master (0: none yet).
        self.last_frame = 0.0
        self.frames = 0
        self.last_error = ""
        #: This end of the connection to the master (the master lists the replica so).
        self.local_address = ""
        self._task: asyncio.Task[None] | None = None
        self._progress = asyncio.Event()

    async def reached(self, offset: int) -> None:
        """Return once this replica's log reaches ``offset``."""
        while self.store.commitlog.max_offset < offset:
            self._progress.clear()
            await self._progress.wait()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"ha-client-{self.master_address}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        host, _, port = self.master_address.rpartition(":")
        while True:
            try:
                reader, writer = await asyncio.open_connection(
                    host, int(port), ssl=self.tls,
                    server_hostname=host if self.tls is not None else None)
            except OSError as exc:
                why = describe_tls_failure(exc) if isinstance(exc, ssl.SSLError) else exc
                self.last_error = f"connecting to {self.master_address}: {why}"
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            sock = writer.get_extra_info("sockname")
            self.local_address = f"{sock[0]}:{sock[1]}" if sock else ""
            try:
                await self._copy(reader, writer)
            except (ConnectionError, ProtocolError, StoreError, TimeoutError) as exc:
                self.last_error = f"{self.master_address}: {exc}"
                log.warning("replication from %s stopped: %s; reconnecting",
                            self.master_address, exc)
            finally:
                self.connected.clear()
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            await asyncio.sleep(RECONNECT_DELAY)

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        store = self.store
        decoder = TransferDecoder(self.max_frame)
        writer.write(encode_report(store.commitlog.max_offset))
        await writer.drain()
        self.connected.set()
        log.info("replicating from %s at offset %d", self.master_address,
                 store.commitlog.max_offset)
        last_heard = time.monotonic()
        while True:
            try:
                # Not wait_for: on Python 3.11 it returns the data, and drops the
                # cancellation, when stop() lands in the step the bytes arrive.
                async with asyncio.timeout(self.heartbeat):
                    data = await reader.read(_READ)
            except TimeoutError:
                if time.monotonic() - last_heard > self.housekeeping:
                    raise TimeoutError(f"master silent for {self.housekeeping:.0f} s") from None
                writer.write(encode_report(store.commitlog.max_offset))
                await writer.drain()
                continue
            if not data:
                raise ConnectionError("the master closed the connection")
            last_heard = time.monotonic()
            decoder.receive(data)
            got = False
            while (frame := decoder.next_frame()) is not None:
                offset, body = frame
                if body:
                    store.append_replicated(offset, body, dispatch=False)
                    got = True
                self.frames += 1
            self.last_frame = last_heard
            if got:
                # The log holds the bytes: confirm them, then build the queues (a
                # SYNC_MASTER's sends wait for the report, not for the dispatch).
                writer.write(encode_report(store.commitlog.max_offset))
                store.dispatch_replicated()
                self._progress.set()
                await writer.drain()
