"""Registration with every name server: at start, every registerNameServerPeriod, soon
after any topic change (debounced), as REGISTER_BROKER with the topic config table -- and
again as soon as a name server can be reached after it was lost.

A name server that restarts has forgotten every broker; waiting for the periodic
registration would leave the topics of this broker out of its routes for up to a period.
So the connection a registration went over is watched: when it closes, or when a
registration fails, that name server is asked again after :data:`RETRY_FIRST` seconds,
doubling up to :data:`RETRY_MAX`, until it accepts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable

from tidemq.codec.bodies import RegisterBrokerBody, TopicConfigSerializeWrapper
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from tidemq.codec.topic_table import encode_topics
from tidemq.errors import TideMQError
from tidemq.net import Connection, RemotingClient
from tidemq.net.tasks import cancel_and_wait

__all__ = ["RETRY_FIRST", "RETRY_MAX", "Registrar"]

log = logging.getLogger(__name__)

#: Seconds before a lost or refusing name server is asked again; doubled each time.
RETRY_FIRST = 0.2
#: The longest wait between two registration attempts with such a name server.
RETRY_MAX = 1.0
#: Encodings of the topic table on a thread a registration tries while the table
#: changes under them, before it encodes on the loop.
BODY_TRIES = 3


def _encoded(topics: TopicConfigSerializeWrapper) -> tuple[bytes, int]:
    """The registration body of ``topics`` and its CRC32 as the header carries it."""
    body = encode_topics(RegisterBrokerBody(topic_config_serialize_wrapper=topics))
    return body, zlib.crc32(body) & 0x7FFFFFFF


class Registrar:
    def __init__(self, client: RemotingClient, namesrv_addrs: list[str], *, cluster: str,
                 broker_name: str, broker_id: int, broker_addr: Callable[[], str],
                 topics: Callable[[], TopicConfigSerializeWrapper], period_ms: int,
                 ha_addr: Callable[[], str] | None = None) -> None:
        """``ha_addr``: where replicas connect (``haServerAddr``); the broker's address
        when not given."""
        self.client = client
        self.namesrv_addrs = namesrv_addrs
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_id = broker_id
        self._addr = broker_addr
        #: The group master's address as the name servers answer it (a replica's
        #: registration learns it); listeners hear of every change.
        self.master_addr = ""
        self.on_master_addr: list[Callable[[str], None]] = []
        self._ha_addr = ha_addr or broker_addr
        self._topics = topics
        self.period = period_ms / 1000
        self._task: asyncio.Task[None] | None = None
        #: Set by :meth:`stop`: a connection closed from then on is the broker's own
        #: shutdown closing it, not a name server lost.
        self._stopped = False
        self._soon: asyncio.TimerHandle | None = None
        self._soon_done: asyncio.Future[None] | None = None  # what register_soon returns
        self.registrations = 0
        self._pending: set[asyncio.Task[int]] = set()
        self.last_error: str | None = None
        self._watched: dict[str, Connection] = {}  # name server -> the registering link
        self._due: set[str] = set()  # name servers to register with again soon
        self._wake = asyncio.Event()

    async def _body(self) -> tuple[bytes, int]:
        """The registration's body and its CRC32. The topic table is copied on the loop
        and encoded and summed on a thread, a slice at a time (thousands of topics take a
        while, and the loop serves on meanwhile); encoded again if the table changed
        meanwhile, so that a registration never carries an older table than one sent
        before it (on the loop when it keeps changing)."""
        for _ in range(BODY_TRIES):
            topics = self._topics()
            body = await asyncio.to_thread(_encoded, topics)
            if self._topics().data_version == topics.data_version:
                return body
        return _encoded(self._topics())

    def _request(self, body: tuple[bytes, int]) -> RemotingCommand:
        addr = self._addr()
        data, crc = body
        header = RegisterBrokerRequestHeader(
            broker_name=self.broker_name, broker_addr=addr, cluster_name=self.cluster,
            ha_server_addr=self._ha_addr(), broker_id=self.broker_id, compressed=False,
            body_crc32=crc)
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext(), data)

    async def register_all(self) -> int:
        """Register with every name server; returns how many accepted."""
        ok = 0
        body = await self._body()
        for ns in self.namesrv_addrs:
            ok += await self._register(ns, body)
        self.registrations += 1
        return ok

    async def _register(self, ns: str, body: tuple[bytes, int] | None = None) -> bool:
        """Register with ``ns`` (``body``: :meth:`_body`, made now if not given); on
        success watch the connection it went over, else have it asked again soon."""
        try:
            if body is None:
                body = await self._body()
            resp = await self.client.request(ns, self._request(body), timeout=6.0)
        except TideMQError as exc:
            self.last_error = f"{ns}: {exc}"
            log.warning("registering with name server %s failed: %s", ns, exc)
            self._retry(ns)
            return False
        if resp.code != 0:
            self.last_error = f"{ns}: code {resp.code} {resp.remark}"
            log.warning("name server %s refused registration: %s %s", ns, resp.code,
                        resp.remark)
            self._retry(ns)
            return False
        self._due.discard(ns)
        master = resp.ext_fields.get("masterAddr") or ""
        if master != self.master_addr:
            self.master_addr = master
            for listener in self.on_master_addr:
                listener(master)
        conn = self.client.connections.get(ns)
        if conn is not None and self._watched.get(ns) is not conn:
            self._watched[ns] = conn
            conn.on_close(lambda _conn, _error: self._lost(ns, conn))
        return True

    def _retry(self, ns: str) -> None:
        self._due.add(ns)
        self._wake.set()

    def _lost(self, ns: str, conn: Connection) -> None:
        if self._watched.get(ns) is conn and not self._stopped:
            del self._watched[ns]
            log.info("connection to name server %s lost: registering again", ns)
            self._retry(ns)

    async def unregister_all(self) -> None:
        header = UnRegisterBrokerRequestHeader(broker_name=self.broker_name,
                                               broker_addr=self._addr(),
                                               cluster_name=self.cluster,
                                               broker_id=self.broker_id)
        for ns in self.namesrv_addrs:
            try:
                await self.client.request(
                    ns, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext()),
                    timeout=3.0)
            except TideMQError as exc:
                log.info("unregistering from %s failed: %s", ns, exc)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="registrar")

    async def _run(self) -> None:
        """The periodic registration with every name server, and in between the retries
        of those lost or refusing, backing off while they stay so."""
        loop = asyncio.get_running_loop()
        if not self.registrations:
            await self.register_all()
        next_all = loop.time() + self.period
        backoff = RETRY_FIRST
        while True:
            now = loop.time()
            if self._due:
                await asyncio.sleep(max(0.0, min(backoff, next_all - now)))
            else:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, next_all - now)):
                        await self._wake.wait()
                if self._due:
                    continue  # a link was lost: ask again after the first backoff
            if loop.time() >= next_all:
                await self.register_all()
                next_all = loop.time() + self.period
            else:
                for ns in sorted(self._due):
                    await self._register(ns)
            backoff = min(backoff * 2, RETRY_MAX) if self._due else RETRY_FIRST

    def register_soon(self, delay: float = 0.05) -> asyncio.Future[None] | None:
        """Debounced re-registration after a topic change; the future is done once every
        name server has answered the registration that carries the change (accepted or
        not: one that refused or did not answer is asked again later), ``None`` without
        name servers."""
        if not self.namesrv_addrs:
            return None
        if self._soon_done is not None:
            return self._soon_done
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def fire() -> None:
            self._soon = self._soon_done = None
            task = loop.create_task(self.register_all())
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            task.add_done_callback(lambda _task: None if done.done() else done.set_result(None))

        self._soon = loop.call_later(delay, fire)
        self._soon_done = done
        return done

    async def stop(self) -> None:
        self._stopped = True
        if self._soon is not None:
            self._soon.cancel()
        if self._soon_done is not None and not self._soon_done.done():
            self._soon_done.set_result(None)  # nobody waits for a registration that is not made
        await cancel_and_wait(self._task)
