"""Producer: sends messages to the master brokers of a topic's route (remoting.md §2.7).

::

    async with Producer("orders-producer", "127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"payload", {"TAGS": "new"}))

One send (:meth:`Producer.send`):

1. checks the message and gives it a ``UNIQ_KEY`` and ``WAIT=true``
   (:mod:`tidemq.client.sending`) -- a too-big body or bad topic fails here, before any I/O;
2. takes the topic's route; a topic the name server does not know uses the ``TBW102``
   route and the broker creates the topic (:mod:`tidemq.client.routes`);
3. picks a queue (round robin, ``sharding_key``, a ``selector`` or a fixed ``queue``;
   :mod:`tidemq.client.selector`) and sends SEND_MESSAGE_V2 to its broker's master;
4. on a retriable failure (SYSTEM_BUSY, SYSTEM_ERROR, a lost connection ...) refreshes
   the route and tries a queue on another broker, up to ``retry_times_when_send_failed``
   more times within the ``send_msg_timeout`` budget; ordered sends are not retried.

Durability doubts (codes 10/11/12) come back as a :class:`~tidemq.types.SendResult`
whose ``status`` says so; every other failure raises.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from types import TracebackType

from tidemq.client.config import ClientConfig
from tidemq.client.errors import ClientClosedError
from tidemq.client.instance import ClientInstance
from tidemq.client.routes import TopicRoute
from tidemq.client.selector import QueueSelector, RoundRobin, SendPlan
from tidemq.client.sending import (
    batch_msg_id,
    build_batch,
    build_send,
    exhausted,
    prepare_batch,
    prepare_message,
    publish_queues,
    read_send_response,
    send_options,
)
from tidemq.client.stamps import now_ms
from tidemq.client.validation import validate_group
from tidemq.codec.command import RemotingCommand
from tidemq.errors import TideMQError
from tidemq.formats.properties import PropertyKey
from tidemq.types import Message, MessageQueue, SendResult

__all__ = ["Producer"]

log = logging.getLogger(__name__)

_Build = Callable[[MessageQueue], RemotingCommand]


class Producer:
    """An asyncio producer for one producer group; see the module docstring."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
    ) -> None:
        validate_group(group)
        self.group = group
        self.config = instance.config if instance is not None else ClientConfig.for_namesrv(
            namesrv, config)
        self._given = instance
        self._instance: ClientInstance | None = None
        self._opts = send_options(self.config, group)
        self._counter = RoundRobin()

    def __repr__(self) -> str:
        return f"<Producer group={self.group!r}>"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join the client instance (shared per name-server set) and announce the group."""
        if self._instance is not None:
            return
        inst = self._given if self._given is not None else ClientInstance.acquire(self.config)
        try:
            inst.register_producer(self.group)
            await inst.start()
        except BaseException:
            if self._given is None:
                await inst.release()
            raise
        self._instance = inst
        await inst.send_heartbeat()

    async def close(self) -> None:
        """Unregister the group from the brokers and leave the instance."""
        inst, self._instance = self._instance, None
        if inst is None:
            return
        await inst.unregister_producer(self.group)
        if self._given is None:
            await inst.release()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    @property
    def instance(self) -> ClientInstance:
        """The running client instance (raises :class:`ClientClosedError` when not started)."""
        if self._instance is None:
            raise ClientClosedError(repr(self))
        return self._instance

    # ------------------------------------------------------------------ sending

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer (module docstring).

        At most one of ``queue`` (exactly that queue), ``sharding_key`` (the same key,
        the same queue) and ``selector`` (``(queues, msg) -> queue``) may be given.
        ``timeout`` (default ``send_msg_timeout``) bounds the whole send, retries included.
        """
        inst = self.instance
        born = now_ms()
        prepared = prepare_message(msg, max_size=self.config.max_message_size,
                                   keys=inst.uniq_keys, now_ms=born, sharding_key=sharding_key)
        plan = self._plan(prepared, queue, sharding_key, selector)

        def build(mq: MessageQueue) -> RemotingCommand:
            return build_send(prepared, self._opts, mq, now_ms=born, keys=inst.uniq_keys)

        return await self._deliver(prepared.topic, plan, build,
                                   prepared.properties[PropertyKey.UNIQ_KEY], timeout)

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE, stored on one queue with
        consecutive offsets. ``msg_id`` is the messages' UNIQ_KEYs joined by commas,
        ``queue_offset`` the first message's offset."""
        inst = self.instance
        born = now_ms()
        prepared = prepare_batch(msgs, max_size=self.config.max_message_size,
                                 keys=inst.uniq_keys, now_ms=born)
        plan = self._plan(prepared[0], queue, sharding_key, selector)

        def build(mq: MessageQueue) -> RemotingCommand:
            return build_batch(prepared, self._opts, mq, now_ms=born, keys=inst.uniq_keys)

        return await self._deliver(prepared[0].topic, plan, build, batch_msg_id(prepared),
                                   timeout)

    async def send_oneway(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
    ) -> None:
        """Send one message without waiting for (or getting) an answer; no retries."""
        inst = self.instance
        born = now_ms()
        prepared = prepare_message(msg, max_size=self.config.max_message_size,
                                   keys=inst.uniq_keys, now_ms=born, sharding_key=sharding_key)
        plan = self._plan(prepared, queue, sharding_key, selector)
        route = await inst.routes.get(prepared.topic, allow_default=True)
        mq = plan.next_queue(publish_queues(route, queue))
        assert mq is not None
        addr = await self._address(route, mq)
        await inst.remoting.oneway(
            addr, build_send(prepared, self._opts, mq, now_ms=born, keys=inst.uniq_keys)
        )

    # ------------------------------------------------------------------ internals

    def _plan(self, msg: Message, queue: MessageQueue | None, sharding_key: str | None,
              selector: QueueSelector | None) -> SendPlan:
        if queue is not None and queue.topic != msg.topic:
            raise ValueError(f"queue {queue} is not a queue of topic {msg.topic!r}")
        return SendPlan(msg, attempts=1 + self.config.retry_times_when_send_failed,
                        counter=self._counter, queue=queue, sharding_key=sharding_key,
                        selector=selector)

    async def _address(self, route: TopicRoute, mq: MessageQueue) -> str:
        addr = route.master_address(mq.broker_name)
        return addr if addr is not None else await self.instance.master_address(mq)

    async def _deliver(self, topic: str, plan: SendPlan, build: _Build, msg_id: str,
                       timeout: float | None) -> SendResult:
        inst = self.instance
        loop = asyncio.get_running_loop()
        budget = self.config.send_msg_timeout if timeout is None else timeout
        deadline = loop.time() + budget
        route = await inst.routes.get(topic, allow_default=True)
        while (mq := plan.next_queue(publish_queues(route, plan.fixed_queue))) is not None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            addr = ""
            try:
                addr = await self._address(route, mq)
                response = await inst.request(addr, build(mq), remaining)
                return read_send_response(response, mq, address=addr, msg_id=msg_id)
            except TideMQError as exc:
                if not plan.failed(mq, exc):
                    raise
                log.info("send to %s (%s) failed, trying again: %s", mq, addr, exc)
            route = await self._refreshed(route)
        raise exhausted(plan, topic, budget)

    async def _refreshed(self, route: TopicRoute) -> TopicRoute:
        """The route fetched again after a failure (the old one if that fails too)."""
        try:
            return await self.instance.routes.get(route.topic, allow_default=True,
                                                  refresh=True)
        except TideMQError as exc:
            log.info("route refresh of %s failed: %s", route.topic, exc)
            return route

