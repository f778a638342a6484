"""LmqConsumer: read light message queues (RIP-28) with long polling and group offsets.

::

    consumer = LmqConsumer("inbox-readers", broker_addr="127.0.0.1:10911")
    # or: LmqConsumer("inbox-readers", namesrv="127.0.0.1:9876", parent_topic="Devices")
    await consumer.start()
    consumer.subscribe("%LMQ%device-1", "%LMQ%device-2")
    for m in await consumer.poll(timeout=5):
        print(m.lmq, m.offset, m.body)
    await consumer.close()          # commits the positions reached

LMQs are not in any route. They live on the broker that stored the messages, so the
consumer reads each subscribed LMQ on every broker it knows: the one given as
``broker_addr``, or every broker group of ``parent_topic``'s route -- its master, or a
replica while the group's master is down (looked up at :meth:`~LmqConsumer.start`, again
by :meth:`~LmqConsumer.refresh_brokers`, and whenever a request's connection is lost, so
that reads and commits go on on a replica, or on a newly elected master, without a
restart). Each (LMQ, broker group) pair is one queue -- ``MessageQueue(lmq,
broker_name, 0)``; with ``broker_addr`` the broker name is that address. A commit a
replica took is sent again by the next :meth:`~LmqConsumer.commit`, to the master once
the route lists one (docs/replication.md).

Per queue the consumer keeps a *fetch offset*, a buffer and at most one pull in flight,
as :class:`~tidemq.client.PullConsumer` does, but positions are LMQ offsets: a
message's offset in the LMQ is read from its ``INNER_MULTI_DISPATCH`` /
``INNER_MULTI_QUEUE_OFFSET`` pair (the record's own ``queue_offset`` belongs to the
parent queue). Pulls set SUSPEND, so the broker holds one that finds nothing until a
message is dispatched into the LMQ or ``long_polling_timeout`` passes. A queue without a
position starts at the group's committed offset (QUERY_CONSUMER_OFFSET on the LMQ name,
queue id 0), else per ``consume_from`` -- by default the *first* offset, because an LMQ
usually comes into being with the first message addressed to it. :meth:`commit` stores
positions with UPDATE_CONSUMER_OFFSET; the broker keeps LMQ offsets in its LMQ store and
drops them when the LMQ is deleted. With ``enable_msg_trace`` a polled message is traced
as the pull consumer's are (:mod:`tidemq.client.poll_trace`): SubBefore when ``poll``
returns it, SubAfter when a commit of its LMQ moves past it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import NamedTuple

from tidemq.client import offsets as ofs
from tidemq.client.config import ClientConfig
from tidemq.client.consumer_role import ConsumerRole
from tidemq.client.errors import ClientClosedError, NoRouteError
from tidemq.client.instance import ClientInstance
from tidemq.client.lmq import LmqMessage, lmq_offsets, validate_lmq_name
from tidemq.client.poll_trace import PollTrace
from tidemq.client.pull import pull_request
from tidemq.client.queue_state import discard
from tidemq.client.subscription import SUB_ALL, Subscription
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.codec.command import RemotingCommand
from tidemq.codec.headers import PullMessageResponseHeader
from tidemq.codec.message import decode_messages
from tidemq.errors import ConnectionLost, ResponseCode, TideMQError, error_for_code
from tidemq.types import MessageQueue, PullStatus

__all__ = ["LmqConsumer", "LmqPullResult", "read_lmq_pull"]

log = logging.getLogger(__name__)

_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class LmqPullResult(NamedTuple):
    """One pull of one LMQ: ``(status, next_offset, min_offset, max_offset, messages)``."""

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[LmqMessage]


def read_lmq_pull(response: RemotingCommand, queue: MessageQueue, subscription: Subscription,
                  *, offset: int, address: str) -> LmqPullResult:
    """The result of a pull of LMQ ``queue`` from ``offset``.

    Each message's LMQ offset comes from its ``INNER_MULTI_*`` pair; a record that lacks
    it (it cannot come from an LMQ pull of a TideMQ broker) is numbered by its position
    after ``offset``. Messages below ``offset`` are dropped; tags are re-checked exactly.
    """
    status = _STATUS.get(response.code)
    if status is None:
        raise error_for_code(response.code, response.remark or "", address=address)
    header = PullMessageResponseHeader.from_ext(response.ext_fields)
    out: list[LmqMessage] = []
    if status is PullStatus.FOUND:
        for i, msg in enumerate(decode_messages(response.full_body())):
            lmq_offset = lmq_offsets(msg).get(queue.topic, offset + i)
            if lmq_offset < offset or not subscription.matches(msg.tags):
                continue
            msg.broker_name = queue.broker_name
            out.append(LmqMessage(queue, lmq_offset, msg))
    return LmqPullResult(status, header.next_begin_offset, header.min_offset,
                         header.max_offset, out)


@dataclasses.dataclass(frozen=True, slots=True)
class _Fetched:
    """A task's outcome: a start offset (``result`` None) or a pull's result."""

    offset: int
    from_group: bool
    result: LmqPullResult | None


@dataclasses.dataclass(slots=True)
class _QueueState:
    fetch_offset: int | None = None
    buffer: collections.deque[LmqMessage] = dataclasses.field(
        default_factory=collections.deque)
    task: asyncio.Task[_Fetched] | None = None
    backoff: float = 0.0
    committed: int | None = None
    #: Grows on every :meth:`reset` (a seek): a commit answered after one no longer says
    #: what is committed.
    generation: int = 0

    @property
    def position(self) -> int | None:
        return self.buffer[0].offset if self.buffer else self.fetch_offset

    def reset(self, offset: int | None) -> None:
        self.generation += 1
        self.buffer.clear()
        self.backoff = 0.0
        self.fetch_offset = offset
        if self.task is not None:
            discard(self.task)
            self.task = None


class LmqConsumer(ConsumerRole):
    """Reads LMQs for one consumer group; see the module docstring.

    One task at a time may call :meth:`poll` (or iterate the consumer).
    """

    def __init__(
        self,
        group: str,
        *,
        broker_addr: str | None = None,
        namesrv: str | Sequence[str] | None = None,
        parent_topic: str | None = None,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        consume_timestamp: int | None = None,
    ) -> None:
        if (broker_addr is None) == (parent_topic is None):
            raise ValueError("give exactly one of broker_addr and parent_topic")
        super().__init__(group, namesrv, config, instance, consume_from=consume_from,
                         consume_timestamp=consume_timestamp)
        self.parent_topic = parent_topic
        self._brokers: dict[str, str] = {broker_addr: broker_addr} if broker_addr else {}
        self._states: dict[MessageQueue, _QueueState] = {}
        self._turn = 0
        #: The trace of polled messages until a commit covers them (``enable_msg_trace``).
        self._poll_trace: PollTrace | None = None

    def __repr__(self) -> str:
        return f"<LmqConsumer group={self.group!r} queues={len(self._states)}>"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join the client instance and find the brokers (the parent topic's route)."""
        await super().start()

    async def _joined(self) -> None:
        if self.parent_topic is not None:
            await self.refresh_brokers()

    async def _started(self, inst: ClientInstance) -> None:
        await self._start_tracing(inst)
        if self.tracer is not None:
            self._poll_trace = PollTrace(self.tracer, self.group, self.config.trace_queue_size)

    def _schedule_rebalance(self) -> None:
        self._reconcile()

    async def close(self, *, commit: bool = True) -> None:
        """Commit the positions reached (unless ``commit=False``), stop pulling, leave."""
        await self._close_reading(self.commit if commit else None, self._stop_pulls)

    async def _stop_pulls(self) -> None:
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for state in self._states.values():
            state.reset(state.position)
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ brokers and queues

    @property
    def brokers(self) -> dict[str, str]:
        """Broker name -> address of the brokers whose LMQs are read."""
        return dict(self._brokers)

    async def refresh_brokers(self) -> dict[str, str]:
        """Look up the parent topic's route again: each broker group's master, or a
        replica while it has none (new groups get every subscribed LMQ; queues of
        vanished groups are dropped)."""
        if self.parent_topic is None:
            return self.brokers
        route = await self.instance.routes.get(self.parent_topic, refresh=True)
        members = {name: addr for name in sorted(route.brokers)
                   if (addr := route.read_address(name)) is not None}
        if not members:
            raise NoRouteError(self.parent_topic, "no broker hosts the parent topic")
        self._brokers = members
        self._reconcile()
        return self.brokers

    async def _request(self, queue: MessageQueue, cmd: RemotingCommand,
                       timeout: float | None = None) -> tuple[RemotingCommand, str]:
        """``cmd`` to the broker serving ``queue``; once more, after looking the parent
        topic's route up again, when the connection is lost and the route now names
        another member of the group."""
        addr = self._address(queue)
        try:
            return await self.instance.request(addr, cmd, timeout), addr
        except ConnectionLost:
            if self.parent_topic is None:
                raise
            await self.refresh_brokers()
            fresh = self._address(queue)
            if fresh == addr:
                raise
            return await self.instance.request(fresh, cmd, timeout), fresh

    def subscribe(self, *lmqs: str, expression: str = SUB_ALL) -> None:
        """Read ``lmqs`` (added to earlier subscriptions), filtered by the tag
        ``expression``."""
        for name in lmqs:
            validate_lmq_name(name)
        for name in lmqs:
            self._subscriptions[name] = Subscription.parse(name, expression)
        self._reconcile()

    def unsubscribe(self, *lmqs: str) -> None:
        """Stop reading ``lmqs`` (all of them when none are named)."""
        for name in lmqs or list(self._subscriptions):
            self._subscriptions.pop(name, None)
        self._reconcile()

    def assignment(self) -> list[MessageQueue]:
        return sorted(self._states)

    def queue(self, lmq: str, broker_name: str | None = None) -> MessageQueue:
        """The queue of ``lmq`` on ``broker_name`` (may be omitted with one broker)."""
        if broker_name is None:
            if len(self._brokers) != 1:
                raise ValueError(f"{lmq} is read on {len(self._brokers)} brokers; name one of "
                                 f"{sorted(self._brokers)}")
            broker_name = next(iter(self._brokers))
        return MessageQueue(lmq, broker_name, 0)

    def _reconcile(self) -> None:
        wanted = {MessageQueue(name, b, 0) for name in self._subscriptions for b in self._brokers}
        for mq in [q for q in self._states if q not in wanted]:
            self._states.pop(mq).reset(None)
        for mq in wanted:
            self._states.setdefault(mq, _QueueState())

    def _address(self, queue: MessageQueue) -> str:
        addr = self._brokers.get(queue.broker_name)
        if addr is None:
            raise NoRouteError(queue.topic, f"broker {queue.broker_name!r} is not known",
                               queue=queue)
        return addr

    def _state(self, queue: MessageQueue | str) -> _QueueState:
        mq = self.queue(queue) if isinstance(queue, str) else queue
        state = self._states.get(mq)
        if state is None:
            raise ValueError(f"{mq} is not subscribed by this consumer")
        return state

    # ------------------------------------------------------------------ positions

    def position(self, queue: MessageQueue | str) -> int | None:
        """The LMQ offset of the next message :meth:`poll` returns from ``queue``."""
        return self._state(queue).position

    def seek(self, queue: MessageQueue | str, offset: int) -> None:
        """Continue ``queue`` at LMQ offset ``offset``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._state(queue).reset(offset)

    async def min_offset(self, queue: MessageQueue | str) -> int:
        mq = self.queue(queue) if isinstance(queue, str) else queue
        return await self._ask(mq, ofs.min_offset_request(mq))

    async def max_offset(self, queue: MessageQueue | str) -> int:
        """Where the next message dispatched into ``queue`` will be."""
        mq = self.queue(queue) if isinstance(queue, str) else queue
        return await self._ask(mq, ofs.max_offset_request(mq))

    async def _ask(self, queue: MessageQueue, cmd: RemotingCommand) -> int:
        response, addr = await self._request(queue, cmd)
        return ofs.read_offset(response, address=addr)

    async def committed(self, queue: MessageQueue | str) -> int | None:
        """The group's stored offset for ``queue`` (``None`` if it has none)."""
        mq = self.queue(queue) if isinstance(queue, str) else queue
        response, addr = await self._request(mq, ofs.query_offset_request(self.group, mq))
        return ofs.read_committed(response, address=addr)

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Store ``offsets`` (default: every position that changed since it was last
        committed) as the group's consumed LMQ offsets."""
        if offsets is None:
            offsets = {mq: s.position for mq, s in self._states.items()
                       if s.position is not None and s.position != s.committed}
        await asyncio.gather(*(self._commit_one(mq, off) for mq, off in offsets.items()))

    async def _commit_one(self, queue: MessageQueue, offset: int) -> None:
        # A seek meanwhile (or the queue dropped, which resets it) makes the answer
        # stale: a commit sent after it may have been answered first.
        state = self._states.get(queue)
        generation = -1 if state is None else state.generation
        cmd = ofs.update_offset_request(self.group, queue, offset)
        response, addr = await self._request(queue, cmd)
        ofs.check_success(response, address=addr)
        on_replica = (self.parent_topic is not None
                      and addr != self.instance.routes.master_address(queue.broker_name))
        if (state is not None and not on_replica  # a replica's: sent again next time
                and state.generation == generation):
            state.committed = offset
        if self._poll_trace is not None:
            self._poll_trace.committed(queue, offset)

    async def _initial_offset(self, queue: MessageQueue) -> tuple[int, bool]:
        committed = await self.committed(queue)
        if committed is not None and committed >= 0:
            return committed, True
        if self.consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            assert self.consume_timestamp is not None
            cmd = ofs.search_offset_request(queue, self.consume_timestamp)
        elif self.consume_from is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
            cmd = ofs.max_offset_request(queue)
        else:
            cmd = ofs.min_offset_request(queue)
        return await self._ask(queue, cmd), False

    # ------------------------------------------------------------------ pulling

    async def pull(self, queue: MessageQueue | str, offset: int, max_nums: int = 32, *,
                   expression: str = SUB_ALL, suspend: float = 0.0) -> LmqPullResult:
        """One pull of up to ``max_nums`` messages from LMQ offset ``offset``, outside the
        subscriptions; ``suspend > 0`` lets the broker hold it that many seconds."""
        mq = self.queue(queue) if isinstance(queue, str) else queue
        return await self._pull_once(mq, offset, Subscription.parse(mq.topic, expression),
                                     max_nums, suspend)

    async def _pull_once(self, queue: MessageQueue, offset: int, sub: Subscription,
                         max_nums: int, suspend: float) -> LmqPullResult:
        suspend_ms = int(suspend * 1000)
        cmd = pull_request(self.group, queue, offset, max_nums=max_nums, subscription=sub,
                           suspend_ms=suspend_ms)
        timeout = suspend + max(self.config.request_timeout, 5.0)
        response, addr = await self._request(queue, cmd, timeout)
        return read_lmq_pull(response, queue, sub, offset=offset, address=addr)

    async def poll(self, timeout: float = 1.0,
                   max_messages: int | None = None) -> list[LmqMessage]:
        """Up to ``max_messages`` (default ``pull_batch_size``) messages from the subscribed
        LMQs, waiting at most ``timeout`` seconds for some; ``[]`` if none came."""
        msgs = await self._poll(timeout, max_messages)
        if self._poll_trace is not None:
            self._poll_trace.polled_lmq(msgs)
        return msgs

    async def _poll(self, timeout: float, max_messages: int | None) -> list[LmqMessage]:
        if self._instance is None:
            raise ClientClosedError(repr(self))
        limit = max_messages or self.config.pull_batch_size
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            out = self._drain(limit)
            if out:
                return out
            self._start_pulls()
            remaining = deadline - loop.time()
            running = {s.task: s for s in self._states.values() if s.task is not None}
            if remaining <= 0 or not running:
                if remaining > 0:
                    await asyncio.sleep(remaining)  # nothing subscribed
                return []
            done, _ = await asyncio.wait(running, timeout=remaining,
                                         return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                self._apply(running[task], task)

    async def __aiter__(self) -> AsyncIterator[LmqMessage]:
        """Messages as they come, until the consumer is closed."""
        while self._instance is not None:
            try:
                batch = await self.poll(timeout=self.config.long_polling_timeout)
            except ClientClosedError:
                return
            for msg in batch:
                yield msg

    def _drain(self, limit: int) -> list[LmqMessage]:
        """Buffered messages, queue by queue, starting one queue later each time."""
        out: list[LmqMessage] = []
        states = [self._states[mq] for mq in sorted(self._states)]
        if not states:
            return out
        self._turn = (self._turn + 1) % len(states)
        for state in states[self._turn:] + states[:self._turn]:
            while state.buffer and len(out) < limit:
                out.append(state.buffer.popleft())
        return out

    def _start_pulls(self) -> None:
        """Decide, then start: a task for each queue with an empty buffer and nothing in
        flight -- a pull, or finding the start of a queue without a position."""
        for mq, state in self._states.items():
            if state.task is None and not state.buffer:
                state.task = asyncio.ensure_future(
                    self._fetch(mq, state.fetch_offset, self._subscriptions[mq.topic],
                                state.backoff))

    async def _fetch(self, queue: MessageQueue, offset: int | None, sub: Subscription,
                     delay: float) -> _Fetched:
        if delay > 0:
            await asyncio.sleep(delay)
        if offset is None:
            start, from_group = await self._initial_offset(queue)
            return _Fetched(start, from_group, None)
        cfg = self.config
        result = await self._pull_once(queue, offset, sub, cfg.pull_batch_size,
                                       cfg.long_polling_timeout)
        return _Fetched(offset, False, result)

    def _apply(self, state: _QueueState, task: asyncio.Task[_Fetched]) -> None:
        if state.task is not task:  # dropped by a seek meanwhile
            discard(task)
            return
        state.task = None
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            if not isinstance(exc, TideMQError):
                raise exc
            state.backoff = self.config.pull_error_backoff
            log.warning("%r: pull failed, retrying in %.1f s: %s", self, state.backoff, exc)
            return
        fetched = task.result()
        state.backoff = 0.0
        result = fetched.result
        if result is None:
            state.fetch_offset = fetched.offset
            state.committed = fetched.offset if fetched.from_group else None
            return
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("%r: LMQ offset %d moved; continuing at %d", self, fetched.offset,
                        result.next_offset)
        state.buffer.extend(result.messages)
        state.fetch_offset = result.next_offset
