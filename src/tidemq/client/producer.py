"""Producer: sends messages to the master brokers of a topic's route.

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

Batches (:meth:`Producer.send_batch`) are checked and encoded once; each attempt asks
which queue type the topic has on the chosen broker (:mod:`tidemq.client.queue_types`)
and sends an inner batch (RIP-26: one record, compressed end to end) to a BatchCQ topic,
an outer batch to any other.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal, overload

from tidemq.client.batch_rpc import batch_requester
from tidemq.client.config import ClientConfig
from tidemq.client.instance import ClientInstance
from tidemq.client.queue_types import QueueType, QueueTypeCache
from tidemq.client.role import InstanceRole
from tidemq.client.selector import QueueSelector, RoundRobin, SendPlan
from tidemq.client.send_attempts import SendAttempts
from tidemq.client.sending import (
    BatchCompression,
    PreparedBatch,
    build_send,
    prepare_message,
    prepare_send_batch,
    publish_queues,
    read_send_response,
    send_options,
)
from tidemq.client.shared_send import send_many
from tidemq.client.stamps import now_ms
from tidemq.client.topic_route import TopicRoute
from tidemq.client.tracer import Tracer, alike_pub_records, pub_records, trace_send_options
from tidemq.client.validation import validate_group
from tidemq.codec.command import RemotingCommand
from tidemq.codec.trace import TRACE_PRODUCER_GROUP
from tidemq.errors import BrokerResponseError, ResponseCode, TideMQError
from tidemq.formats.properties import PropertyKey
from tidemq.types import Message, MessageQueue, SendResult

__all__ = ["Producer", "start_tracer"]

log = logging.getLogger(__name__)

#: Builds an attempt's request for a queue (given its route and broker address), with the
#: ``msg_id`` its result gets: at once, or by a coroutine (a batch may first ask the
#: broker its topic's queue type).
_Built = tuple[RemotingCommand, str]
_Build = Callable[[TopicRoute, MessageQueue, str], _Built | Awaitable[_Built]]
#: Sends an attempt's request: ``(address, command, timeout) -> response``.
_Request = Callable[[str, RemotingCommand, float | None], Awaitable[RemotingCommand]]
_tracer_numbers = itertools.count(1)


async def start_tracer(inst: ClientInstance, owner: str, kind: str) -> Tracer:
    """A started :class:`~tidemq.client.tracer.Tracer` for the role ``owner`` (a group) of
    ``kind`` (``pub``, ``sub``), sending with a producer of its own on ``inst`` (upstream's
    ``_INNER_TRACE_PRODUCER-<group>-<kind>-<n>`` group)."""
    cfg = inst.config
    producer = Producer(f"{TRACE_PRODUCER_GROUP}-{owner}-{kind}-{next(_tracer_numbers)}",
                        instance=inst)
    producer._opts = trace_send_options(producer._opts, cfg.trace_compression)
    await producer.start()

    async def send(msgs: Sequence[Message]) -> SendResult:
        # one message a request (BATCH_MESSAGES): alone, its body is compressed
        (msg,) = msgs
        return await producer.send(msg)

    tracer = Tracer(send, topic=cfg.trace_topic, capacity=cfg.trace_queue_size,
                    on_close=producer.close)
    tracer.start()
    return tracer


class Producer(InstanceRole):
    """An asyncio producer for one producer group; see the module docstring.

    ``batch_compression`` sets how inner batches are compressed; ``queue_types`` maps
    topics to ``"BatchCQ"`` / ``"SimpleCQ"`` so their brokers are not asked.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        batch_compression: BatchCompression | None = None,
        queue_types: Mapping[str, str | QueueType] | None = None,
    ) -> None:
        validate_group(group)
        super().__init__(namesrv, config, instance)
        self.group = group
        self._opts = send_options(self.config, group)
        self._counter = RoundRobin()
        #: How inner batches are compressed (default: zstd when it saves 5 %).
        self.batch_compression = batch_compression or BatchCompression()
        #: Queue types of topics per broker; ``queue_types`` are hints never asked about.
        self.queue_types = QueueTypeCache(self._request)
        for topic, queue_type in (queue_types or {}).items():
            self.queue_types.hint(topic, queue_type)
        #: Records this producer's sends (``enable_msg_trace``), else ``None``.
        self.tracer: Tracer | None = None
        self._requester: tuple[ClientInstance, _Request] | None = None

    def __repr__(self) -> str:
        return f"<Producer group={self.group!r}>"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join the client instance (shared per name-server set) and announce the group."""
        await super().start()

    def _register(self, inst: ClientInstance) -> None:
        inst.register_producer(self.group)

    async def _unregister(self, inst: ClientInstance) -> None:
        await inst.unregister_producer(self.group)

    async def _started(self, inst: ClientInstance) -> None:
        await inst.send_heartbeat()
        if self.config.enable_msg_trace and not self.group.startswith(TRACE_PRODUCER_GROUP):
            self.tracer = await start_tracer(inst, self.group, "pub")

    async def close(self) -> None:
        """Send the queued trace records, unregister the group from the brokers and leave
        the instance."""
        if self._instance is not None:
            if self.tracer is not None:
                await self.tracer.close(self.config.send_msg_timeout)
                self.tracer = None
            await self._withdraw(self._instance)

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
        keys = inst.uniq_keys
        prepared = prepare_message(msg, max_size=self.config.max_message_size,
                                   keys=keys, now_ms=born, sharding_key=sharding_key)
        plan = self._plan(prepared, queue, sharding_key, selector)
        uniq = prepared.properties[PropertyKey.UNIQ_KEY]
        opts = self._opts

        def build(_route: TopicRoute, mq: MessageQueue,
                  _addr: str) -> tuple[RemotingCommand, str]:
            return build_send(prepared, opts, mq, now_ms=born, keys=keys), uniq

        result = await self._deliver(prepared.topic, plan, build, timeout)
        if self.tracer is not None:  # the records are made by the tracer's task
            self.tracer.record(functools.partial(pub_records, self.group, (prepared,),
                                                 (uniq,), result, born, now_ms() - born),
                               len(prepared.body))
        return result

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        timeout: float | None = None,
        queue_type: str | QueueType | None = None,
        compression: BatchCompression | None = None,
    ) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE, stored on one queue with
        consecutive offsets: the result's ``queue_offsets`` (``message_count`` of them).

        To a BatchCQ topic the batch goes as one inner batch (RIP-26: one record and one
        index entry, compressed per ``compression``, default :attr:`batch_compression`)
        and ``msg_id`` is the batch's own key; to any other topic as an outer batch (the
        broker stores a record per message) and ``msg_id`` is the messages' ``UNIQ_KEY``s
        joined by commas. The queue type is ``queue_type``, else the producer's hint, else
        what the broker says (cached with the route). Each message's ``UNIQ_KEY`` is its
        own, or one given here; the keys are the same in every attempt.
        """
        inst = self.instance
        prepared = prepare_send_batch(msgs, max_size=self.config.max_message_size,
                                      keys=inst.uniq_keys, now_ms=now_ms(),
                                      compression=compression or self.batch_compression)
        return await self.send_prepared_batch(prepared, msgs[0], queue=queue,
                                              sharding_key=sharding_key, selector=selector,
                                              timeout=timeout, queue_type=queue_type,
                                              messages=msgs)

    async def send_prepared_batch(
        self,
        prepared: PreparedBatch,
        first: Message,
        *,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        timeout: float | None = None,
        queue_type: str | QueueType | None = None,
        coalesce: bool = False,
        messages: Sequence[Message] | None = None,
    ) -> SendResult:
        """:meth:`send_batch` of a batch already checked and encoded
        (:func:`~tidemq.client.sending.prepare_send_batch`), whose first message is
        ``first`` (what a ``selector`` sees); its :attr:`~PreparedBatch.keys` are the ids
        of its messages (the auto-batching producer sends through here).

        A batch goes out as a request of its own unless ``coalesce``: as a child of a
        batch-protocol parent, its answer would wait for every child of the parent, so
        concurrent senders take turns with the broker instead of overlapping with it.
        Concurrent ``send_batch`` calls therefore go faster alone, at every batch size
        measured (``tidemq bench produce --in-flight 32``). ``messages`` are the batch's
        messages, for the trace records of a producer with ``enable_msg_trace``."""
        born = now_ms()
        fixed = QueueType.parse(queue_type) if queue_type is not None else None
        used: list[QueueType] = []

        async def build(route: TopicRoute, mq: MessageQueue,
                        addr: str) -> tuple[RemotingCommand, str]:
            kind = fixed or self.queue_types.cached(mq.topic, mq.broker_name, route) or (
                await self.queue_types.get(mq.topic, mq.broker_name, addr, route))
            used.append(kind)
            return prepared.request(self._opts, mq, kind, now_ms=born), prepared.msg_id(kind)

        try:
            result = await self._deliver(prepared.topic, self._plan(first, queue,
                                                                    sharding_key, selector),
                                         build, timeout, prepared.count, coalesce)
        except BrokerResponseError as exc:
            if fixed is not None or not await self._no_longer_batch(exc, prepared, used):
                raise
            log.info("%s is no longer a BatchCQ topic; sending the batch as an outer batch",
                     prepared.topic)
            result = await self._deliver(prepared.topic, self._plan(first, queue,
                                                                    sharding_key, selector),
                                         build, timeout, prepared.count, coalesce)
        if self.tracer is not None and messages is not None:
            self._trace_batch(self.tracer, prepared, first, messages, result, born)
        return result

    def _trace_batch(self, tracer: Tracer, prepared: PreparedBatch, first: Message,
                     messages: Sequence[Message], result: SendResult, born: int) -> None:
        """Record the trace event of a batch sent: of alike messages, what their records
        are made of (the first message, the ids, the result), so the batch is not kept
        until the tracer makes them; of any other, the messages and the batch."""
        cost = now_ms() - born
        n = prepared.count
        if n > 1 and prepared.alike:
            joined = result.msg_id
            if "," not in joined:  # an inner batch's own key: the messages' are needed
                joined = prepared.msg_id(QueueType.SIMPLE)
            tracer.record(functools.partial(alike_pub_records, self.group, first, joined,
                                            result, born, cost, n),
                          len(first.body) + len(joined) + len(result.offset_msg_id))
            return
        tracer.record(functools.partial(pub_records, self.group, messages, prepared, result,
                                        born, cost), len(prepared.encoded.entries))

    async def _no_longer_batch(self, exc: BrokerResponseError, prepared: PreparedBatch,
                               used: list[QueueType]) -> bool:
        """Whether an inner batch was refused because its topic stopped being BatchCQ
        after the type was cached; the cache is dropped, so a retry asks again."""
        if (exc.code != ResponseCode.MESSAGE_ILLEGAL or not used
                or used[-1] is not QueueType.BATCH):
            return False
        self.queue_types.forget(prepared.topic)
        route = await self.instance.routes.get(prepared.topic, allow_default=True)
        for mq in route.publish_queues:
            addr = await self._address(route, mq)
            if await self.queue_types.get(mq.topic, mq.broker_name, addr,
                                          route) is not QueueType.BATCH:
                return True
        return False

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

    @overload
    async def send_multi(self, items: Sequence[tuple[Message, MessageQueue]], *,
                         timeout: float | None = None,
                         return_exceptions: Literal[False] = False) -> list[SendResult]: ...

    @overload
    async def send_multi(self, items: Sequence[tuple[Message, MessageQueue]], *,
                         timeout: float | None = None, return_exceptions: Literal[True]
                         ) -> list[SendResult | TideMQError]: ...

    async def send_multi(
        self,
        items: Sequence[tuple[Message, MessageQueue]],
        *,
        timeout: float | None = None,
        return_exceptions: bool = False,
    ) -> list[SendResult] | list[SendResult | TideMQError]:
        """Send each message to its queue, concurrently: the messages for one broker go
        out as one batch-protocol RPC when it supports it (:mod:`tidemq.client.batch_rpc`;
        in the shared send form once negotiated, :mod:`tidemq.client.shared_send`),
        else one send each. Results are in ``items`` order. Every message is tried (as
        :meth:`send` with ``queue``, so without retries); the first failure is raised
        once all are done, or with ``return_exceptions`` left in its place."""
        results = await send_many(self, items, timeout)  # shared send parents, or send()
        out: list[SendResult | TideMQError] = []
        for result in results:
            if isinstance(result, BaseException) and (
                    not return_exceptions or not isinstance(result, TideMQError)):
                raise result
            out.append(result)
        return out

    # ------------------------------------------------------------------ internals

    def _plan(self, msg: Message, queue: MessageQueue | None, sharding_key: str | None,
              selector: QueueSelector | None) -> SendPlan:
        return SendPlan(msg, attempts=1 + self.config.retry_times_when_send_failed,
                        counter=self._counter, queue=queue, sharding_key=sharding_key,
                        selector=selector)

    async def _address(self, route: TopicRoute, mq: MessageQueue) -> str:
        addr = route.master_address(mq.broker_name)
        return addr if addr is not None else await self.instance.master_address(mq)

    async def _request(self, address: str, cmd: RemotingCommand) -> RemotingCommand:
        return await self.instance.request(address, cmd)

    async def _deliver(self, topic: str, plan: SendPlan, build: _Build,
                       timeout: float | None, count: int = 1,
                       coalesce: bool = True) -> SendResult:
        inst = self.instance
        kept = self._requester
        if not coalesce:
            request: _Request = inst.request
        elif kept is not None and kept[0] is inst:
            request = kept[1]
        else:  # the instance's requester, kept: looking it up costs more than a send's step
            request = batch_requester(inst).request
            self._requester = (inst, request)
        clock = time.monotonic  # no get_running_loop(): it costs a getpid system call
        budget = self.config.send_msg_timeout if timeout is None else timeout
        routes = inst.routes
        route = routes.ready(topic, allow_default=True) or await routes.get(
            topic, allow_default=True)
        attempts = SendAttempts(plan, route, budget=budget, now=clock())
        while (mq := attempts.next(clock())) is not None:
            addr = ""
            try:
                addr = attempts.address(mq) or await inst.master_address(mq)
                built = build(attempts.route, mq, addr)
                cmd, msg_id = built if isinstance(built, tuple) else await built
                response = await request(addr, cmd, attempts.wait(clock()))
                return read_send_response(response, mq, address=addr, msg_id=msg_id,
                                          count=count)
            except TideMQError as exc:
                if not attempts.failed(mq, addr, exc):
                    if attempts.route_outdated:
                        inst.routes.mark_stale(topic)
                    raise
            attempts.rerouted(await self._refreshed(topic))
        if attempts.route_outdated:
            inst.routes.mark_stale(topic)
        raise attempts.exhausted()

    async def _refreshed(self, topic: str) -> TopicRoute | TideMQError:
        """The route fetched again after a failure, or why it could not be."""
        try:
            return await self.instance.routes.get(topic, allow_default=True, refresh=True)
        except TideMQError as exc:
            return exc
