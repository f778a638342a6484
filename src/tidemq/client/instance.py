"""ClientInstance: what the producers, consumers and admin clients of a process share.

One instance per (event loop, name-server set, instance name), as Java's
``MQClientInstance``: :meth:`ClientInstance.acquire` hands out the shared one and counts
users; :meth:`release` closes it when the last one leaves. It owns

* the :class:`~tidemq.net.RemotingClient` (one connection per broker or name server);
* the :class:`~tidemq.client.routes.RouteCache`, refreshed every
  ``poll_name_server_interval``;
* the client id ``ip@instanceName@pid`` and the ``UNIQ_KEY`` generator;
* the registered producer groups and consumers, announced to every broker of the cached
  routes -- masters and replicas, as Java's client: a replica answers a consumer's
  rebalance while its master is down -- with HEART_BEAT (34) every
  ``heartbeat_broker_interval`` and withdrawn with UNREGISTER_CLIENT (35)
  (remoting.md §2.6);
* the handlers for requests brokers send to us: NOTIFY_CONSUMER_IDS_CHANGED (40) and
  RESET_CONSUMER_CLIENT_OFFSET (220) go to the consumer of the group they name;
  GET_CONSUMER_RUNNING_INFO (307) is answered for it (:mod:`tidemq.client.running_info`),
  CONSUME_MESSAGE_DIRECTLY (309) by it (:mod:`tidemq.client.direct_consume`);
  CHECK_TRANSACTION_STATE (39) goes to the transaction checker of the producer group its
  message names (``PGROUP``; :meth:`register_transaction_checker`); :meth:`handle` adds
  others.

:meth:`close` unregisters every group first; :meth:`abort` drops the connections without
a word, as a crashed process would (brokers notice the closed connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import ClassVar, Protocol

from tidemq.client import request_deadline
from tidemq.client.config import ClientConfig
from tidemq.client.direct_consume import answer_consume_directly
from tidemq.client.errors import ClientClosedError, NoRouteError
from tidemq.client.offsets import check_success, read_reset_offsets
from tidemq.client.routes import RouteCache
from tidemq.client.running_info import encode_running_info
from tidemq.client.stamps import new_uniq_keys
from tidemq.client.suggestions import PullSuggestions
from tidemq.client.topic_route import MASTER_ID
from tidemq.codec.bodies import ConsumerData, HeartbeatData, ProducerData, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    NotifyConsumerIdsChangedRequestHeader,
    ResetOffsetRequestHeader,
    UnregisterClientRequestHeader,
)
from tidemq.codec.schema import HeaderFieldError
from tidemq.codec.transaction import transaction_group
from tidemq.errors import ConnectionLost, RequestTimeout, ResponseCode, TideMQError
from tidemq.net.client import RemotingClient
from tidemq.net.connection import Connection
from tidemq.net.dispatcher import Processor
from tidemq.net.tls import TlsClientSettings
from tidemq.types import MessageQueue

__all__ = ["ClientInstance", "ConsumerMember"]

log = logging.getLogger(__name__)


class ConsumerMember(Protocol):
    """What the instance needs from a consumer it announces."""

    @property
    def group(self) -> str: ...

    def consumer_data(self) -> ConsumerData: ...

    def on_consumer_ids_changed(self) -> None: ...

    def on_reset_offset(self, offsets: Mapping[MessageQueue, int]) -> None: ...


_Key = tuple[asyncio.AbstractEventLoop, tuple[str, ...], str, TlsClientSettings,
             tuple[str, str]]


class ClientInstance:
    """See the module docstring."""

    _shared: ClassVar[dict[_Key, ClientInstance]] = {}

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.client_id = config.client_id
        self.remoting = RemotingClient(request_timeout=config.request_timeout,
                                       credentials=config.credentials, tls=config.tls,
                                       max_frame_size=config.frame_limit)
        self.routes = RouteCache(
            self.remoting, config.namesrv_addr, timeout=config.request_timeout,
            refresh_interval=config.poll_name_server_interval,
            default_topic=config.default_topic,
            default_queue_nums=config.default_topic_queue_nums,
        )
        self.uniq_keys = new_uniq_keys(config.client_ip)
        #: The member each queue is pulled from next, as the brokers suggest.
        self.suggestions = PullSuggestions()
        self._producers: set[str] = set()
        self._consumers: dict[str, ConsumerMember] = {}
        self._announced: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._refs = 0
        self._key: _Key | None = None
        self._started = False
        self._closed = False
        self.remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        self.remoting.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)
        self.remoting.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info)
        self.remoting.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._on_consume_directly)
        self._checkers: dict[str, Processor] = {}
        self.remoting.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check_transaction)
        self._started_ms = int(time.time() * 1000)

    def __repr__(self) -> str:
        return f"<ClientInstance {self.client_id} namesrv={list(self.config.namesrv_addr)}>"

    # ------------------------------------------------------------------ sharing

    @classmethod
    def acquire(cls, config: ClientConfig) -> ClientInstance:
        """The instance shared by clients with ``config``'s name servers, instance name, TLS
        settings and credentials on the running loop (created if needed; a client never
        signs with another's account); pair with :meth:`release`."""
        key: _Key = (asyncio.get_running_loop(), config.namesrv_addr, config.instance_name,
                     config.tls, (config.access_key, config.secret_key))
        inst = cls._shared.get(key)
        if inst is None or inst._closed:
            inst = cls._shared[key] = cls(config)
            inst._key = key
        inst._refs += 1
        return inst

    async def release(self) -> None:
        """One user of :meth:`acquire` is done; the last one closes the instance."""
        self._refs -= 1
        if self._refs <= 0:
            await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the periodic route refresh and heartbeat (idempotent)."""
        if self._closed:
            raise ClientClosedError(repr(self))
        if self._started:
            return
        self._started = True
        cfg = self.config
        self._tasks = [
            asyncio.ensure_future(self._every(cfg.poll_name_server_interval,
                                              self.routes.refresh_all)),
            asyncio.ensure_future(self._every(cfg.heartbeat_broker_interval,
                                              self._heartbeat_job)),
        ]

    async def close(self) -> None:
        """Stop the timers, unregister every group from the brokers, close connections."""
        if self._closed:
            return
        self._closed = True
        if self._key is not None and self._shared.get(self._key) is self:
            del self._shared[self._key]
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        groups = [(g, None) for g in self._producers] + [(None, g) for g in self._consumers]
        self._producers.clear()
        self._consumers.clear()
        await asyncio.gather(*(self._unregister(p, c) for p, c in groups))
        await self.remoting.close()

    async def abort(self) -> None:
        """Stop at once: no unregistering, connections aborted -- what a crash leaves
        behind (failure tests use it)."""
        if self._closed:
            return
        self._closed = True
        if self._key is not None and self._shared.get(self._key) is self:
            del self._shared[self._key]
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._producers.clear()
        self._consumers.clear()
        for conn in self.remoting.connections.values():
            conn.abort()
        await self.remoting.close()

    async def _every(self, interval: float, job: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except Exception:
                log.exception("%r: periodic %s failed", self, getattr(job, "__name__", job))

    # ------------------------------------------------------------------ groups

    def register_producer(self, group: str) -> None:
        if group in self._producers:
            raise ValueError(f"producer group {group!r} is already registered in {self!r}")
        self._producers.add(group)

    async def unregister_producer(self, group: str) -> None:
        if group in self._producers:
            self._producers.discard(group)
            await self._unregister(group, None)

    def register_transaction_checker(self, group: str, checker: Processor | None) -> None:
        """Route the brokers' CHECK_TRANSACTION_STATE for producer ``group`` to
        ``checker`` (``None``: no longer)."""
        if checker is None:
            self._checkers.pop(group, None)
        else:
            self._checkers[group] = checker

    def register_consumer(self, member: ConsumerMember) -> None:
        if member.group in self._consumers:
            raise ValueError(f"consumer group {member.group!r} is already registered in {self!r}")
        self._consumers[member.group] = member

    async def unregister_consumer(self, group: str) -> None:
        if self._consumers.pop(group, None) is not None:
            await self._unregister(None, group)

    def forget_consumer(self, group: str) -> None:
        """Stop announcing ``group`` without telling the brokers (they drop it when its
        heartbeats stop)."""
        self._consumers.pop(group, None)

    async def _unregister(self, producer: str | None, consumer: str | None) -> None:
        header = UnregisterClientRequestHeader(client_id=self.client_id,
                                               producer_group=producer,
                                               consumer_group=consumer)
        addrs = sorted(self.routes.member_addresses())

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, header.to_ext())
            try:
                check_success(await self.remoting.request(addr, cmd), address=addr)
            except TideMQError as exc:
                log.info("unregistering %s from %s failed: %s", producer or consumer, addr, exc)

        await asyncio.gather(*(one(a) for a in addrs))

    # ------------------------------------------------------------------ heartbeat

    def heartbeat_data(self) -> HeartbeatData | None:
        """What HEART_BEAT announces now, or ``None`` when no group is registered."""
        if not self._producers and not self._consumers:
            return None
        return HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[ProducerData(group_name=g) for g in sorted(self._producers)],
            consumer_data_set=[m.consumer_data() for _, m in sorted(self._consumers.items())],
        )

    async def send_heartbeat(self, addresses: Iterable[str] | None = None
                             ) -> dict[str, TideMQError]:
        """HEART_BEAT to ``addresses`` (default: every broker of the cached routes);
        returns the failures by address."""
        data = self.heartbeat_data()
        if data is None:
            return {}
        body = encode_body(data)
        targets = sorted(self.routes.member_addresses() if addresses is None else addresses)
        failures: dict[str, TideMQError] = {}

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
            try:
                check_success(await self.remoting.request(addr, cmd), address=addr)
                self._announced.add(addr)
            except TideMQError as exc:
                log.info("heartbeat to %s failed: %s", addr, exc)
                failures[addr] = exc

        await asyncio.gather(*(one(a) for a in targets))
        return failures

    def unannounced_brokers(self) -> set[str]:
        """Decide, without I/O: brokers of the cached routes not heartbeated yet."""
        return self.routes.member_addresses() - self._announced

    async def heartbeat_new_brokers(self) -> None:
        """Announce the groups to brokers that appeared since the last heartbeat."""
        new = self.unannounced_brokers()
        if new:
            self._announced |= new  # a failure is retried by the periodic heartbeat
            await self.send_heartbeat(new)

    async def _heartbeat_job(self) -> None:
        await self.send_heartbeat()

    # ------------------------------------------------------------------ requests

    async def master_address(self, queue: MessageQueue) -> str:
        """The master broker serving ``queue`` (fetching its topic's route if needed)."""
        addr = self.routes.master_address(queue.broker_name)
        if addr is None:
            route = await self.routes.get(queue.topic, refresh=True)
            addr = route.master_address(queue.broker_name)
        if addr is None and queue.broker_name != queue.topic:
            # A logical topic's route names the placeholder broker, not the physical
            # queue's: every broker routes a topic of its own name (as RocketMQ's do).
            with contextlib.suppress(TideMQError):
                own = await self.routes.get(queue.broker_name, refresh=True)
                addr = own.master_address(queue.broker_name)
        if addr is None:
            raise NoRouteError(queue.topic, f"broker {queue.broker_name!r} has no master",
                               queue=queue)
        return addr

    def cached_read_address(self, queue: MessageQueue, broker_id: int = MASTER_ID
                            ) -> str | None:
        """:meth:`read_address` from the cached routes only (``None``: none lists the
        group): the route of ``queue``'s topic first, as it is the one refreshed when a
        request to the group fails."""
        route = self.routes.cached(queue.topic)
        addr = None if route is None else route.read_address(queue.broker_name, broker_id)
        return addr or self.routes.read_address(queue.broker_name, broker_id)

    async def read_address(self, queue: MessageQueue, *, broker_id: int = MASTER_ID,
                           refresh: bool = False) -> str:
        """The member of ``queue``'s broker group to read it from, or to take its group's
        offsets: member ``broker_id`` if listed (a pull answer's suggestion,
        :attr:`suggestions`), else its master, or a replica while the name servers list
        no master (it is down). ``refresh`` asks the name servers first (a request to the
        address given before failed)."""
        name = queue.broker_name
        addr = None if refresh else self.cached_read_address(queue, broker_id)
        if addr is None:
            route = await self.routes.get(queue.topic, refresh=True)
            addr = route.read_address(name, broker_id)
        if addr is None:
            raise NoRouteError(queue.topic, f"broker {queue.broker_name!r} has no member",
                               queue=queue)
        return addr

    async def request(self, address: str, cmd: RemotingCommand,
                      timeout: float | None = None) -> RemotingCommand:
        if self._closed:
            raise ClientClosedError(repr(self))
        scope = request_deadline.current()
        if scope is None:
            return await self.remoting.request(address, cmd, timeout)
        bounded = scope.timeout(address, cmd.code, self.remoting.request_timeout
                                if timeout is None else timeout)
        try:
            return await self.remoting.request(address, cmd, bounded)
        except (RequestTimeout, ConnectionLost) as exc:
            scope.failed(address, exc)
            raise

    def start_request(self, address: str, cmd: RemotingCommand,
                      future: asyncio.Future[RemotingCommand], timeout: float | None = None
                      ) -> bool:
        """:meth:`request` without awaiting, when ``address``'s connection is open and
        accepts writes: sent now, its answer settles ``future``; ``False``: nothing sent
        (:meth:`~tidemq.net.client.RemotingClient.start_request`)."""
        if self._closed:
            raise ClientClosedError(repr(self))
        return self.remoting.start_request(address, cmd, future, timeout)

    def handle(self, code: int, processor: Processor) -> None:
        """Route requests with ``code`` that brokers send to this client to ``processor``."""
        self.remoting.register(code, processor)

    def _on_ids_changed(self, _conn: Connection, cmd: RemotingCommand) -> None:
        try:
            group = NotifyConsumerIdsChangedRequestHeader.from_ext(cmd.ext_fields).consumer_group
        except HeaderFieldError as exc:
            log.info("bad NOTIFY_CONSUMER_IDS_CHANGED: %s", exc)
            return
        member = self._consumers.get(group)
        if member is not None:
            member.on_consumer_ids_changed()

    def _on_running_info(self, _conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (307), passed on by a broker for an admin."""
        group = cmd.ext_fields.get("consumerGroup", "")
        member = self._consumers.get(group)
        if member is None:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"no consumer of group {group!r} in {self.client_id}")
        body = encode_running_info(
            member.consumer_data(), member, namesrv=self.config.namesrv_addr,
            started_ms=self._started_ms,
            jstack=cmd.ext_fields.get("jstackEnable", "").lower() == "true")
        return cmd.response(body=body)

    async def _on_consume_directly(self, _conn: Connection, cmd: RemotingCommand
                                   ) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (309), passed on by a broker for an admin."""
        return await answer_consume_directly(cmd, self._consumers, self.client_id)

    def _on_check_transaction(self, conn: Connection, cmd: RemotingCommand
                              ) -> Awaitable[RemotingCommand | None] | RemotingCommand | None:
        """CHECK_TRANSACTION_STATE (39, oneway): to the group's checker, by the ``PGROUP``
        of the message in its body."""
        group = transaction_group(cmd.body)
        checker = self._checkers.get(group or "")
        if checker is None:
            log.info("CHECK_TRANSACTION_STATE for producer group %r, which has no "
                     "transaction producer in %s", group, self.client_id)
            return None
        return checker(conn, cmd)

    def _on_reset_offset(self, _conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            group = ResetOffsetRequestHeader.from_ext(cmd.ext_fields).group
            offsets = read_reset_offsets(cmd)
        except (HeaderFieldError, TideMQError) as exc:
            group = cmd.ext_fields.get("group", "")
            log.info("bad RESET_CONSUMER_CLIENT_OFFSET for %r: %s", group, exc)
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad reset-offset request: {exc}")
        member = self._consumers.get(group)
        if member is None:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"no consumer of group {group!r} in {self.client_id}")
        member.on_reset_offset(offsets)
        return cmd.response()
