"""Registration with every name server: at start, every registerNameServerPeriod, and soon
after any topic change (debounced), as REGISTER_BROKER with the topic config table."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable

from tidemq.codec.bodies import RegisterBrokerBody, TopicConfigSerializeWrapper, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from tidemq.errors import TideMQError
from tidemq.net import RemotingClient

__all__ = ["Registrar"]

log = logging.getLogger(__name__)


class Registrar:
    def __init__(self, client: RemotingClient, namesrv_addrs: list[str], *, cluster: str,
                 broker_name: str, broker_id: int, broker_addr: Callable[[], str],
                 topics: Callable[[], TopicConfigSerializeWrapper], period_ms: int) -> None:
        self.client = client
        self.namesrv_addrs = namesrv_addrs
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_id = broker_id
        self._addr = broker_addr
        self._topics = topics
        self.period = period_ms / 1000
        self._task: asyncio.Task[None] | None = None
        self._soon: asyncio.TimerHandle | None = None
        self.registrations = 0
        self._pending: set[asyncio.Task[int]] = set()
        self.last_error: str | None = None

    def _request(self) -> RemotingCommand:
        body = encode_body(RegisterBrokerBody(topic_config_serialize_wrapper=self._topics()))
        addr = self._addr()
        header = RegisterBrokerRequestHeader(
            broker_name=self.broker_name, broker_addr=addr, cluster_name=self.cluster,
            ha_server_addr=addr, broker_id=self.broker_id, compressed=False,
            body_crc32=zlib.crc32(body) & 0x7FFFFFFF)
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext(), body)

    async def register_all(self) -> int:
        """Register with every name server; returns how many accepted."""
        ok = 0
        for ns in self.namesrv_addrs:
            try:
                resp = await self.client.request(ns, self._request(), timeout=6.0)
            except TideMQError as exc:
                self.last_error = f"{ns}: {exc}"
                log.warning("registering with name server %s failed: %s", ns, exc)
                continue
            if resp.code == 0:
                ok += 1
            else:
                self.last_error = f"{ns}: code {resp.code} {resp.remark}"
                log.warning("name server %s refused registration: %s %s", ns, resp.code,
                            resp.remark)
        self.registrations += 1
        return ok

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
        while True:
            await self.register_all()
            await asyncio.sleep(self.period)

    def register_soon(self, delay: float = 0.05) -> None:
        """Debounced re-registration after a topic change."""
        if not self.namesrv_addrs or self._soon is not None:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._soon = None
            task = loop.create_task(self.register_all())
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

        self._soon = loop.call_later(delay, fire)

    async def stop(self) -> None:
        if self._soon is not None:
            self._soon.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
