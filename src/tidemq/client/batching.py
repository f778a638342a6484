"""AutoBatchProducer: sends one message at a time, ships batches (Kafka's accumulator).

::

    async with Producer("pg", "127.0.0.1:9876") as producer:
        async with AutoBatchProducer(producer) as batcher:
            pending = [await batcher.send(Message("Metrics", body)) for body in bodies]
            results = await asyncio.gather(*pending)

:meth:`AutoBatchProducer.send` picks the message's queue at once (a fixed ``queue``,
its ``sharding_key``, else the topic's *sticky* queue) and appends it to that queue's
*lane*. Like Kafka's sticky partitioner, messages without a queue or key all go to one
queue, chosen round robin, until its open batch closes (full) or ships; the next one
picks the next queue -- so a few messages make one batch, not one batch per queue, and
under load the batches of several queues are in flight at once.

A lane has one open batch, the full batches waiting behind the one in flight, and at
most one batch in flight (Kafka's ``max.in.flight.requests.per.connection=1`` per
partition, which "mutes" a partition while its batch is out). A batch is shipped -- one
:meth:`Producer.send_prepared_batch` as its own request, so an inner batch on a BatchCQ
topic and an outer batch elsewhere; a batch of one message as a plain
:meth:`Producer.send`, which costs the broker less -- when its lane has nothing in flight
and

* it is full (``max_batch_bytes`` or ``max_batch_messages``), or
* its first message has waited ``linger_ms`` (``0``: at once), or
* :meth:`flush` / :meth:`close` asks for it.

While a lane's batch is in flight its open batch keeps filling, so under load batches
grow with the offered rate whatever the linger (Kafka's behaviour with ``linger.ms=0``),
and a lone message on an idle lane waits at most ``linger_ms``. The default, ``0``,
relies on that alone: in the benchmarks a positive linger made batches no cheaper per
message (the lanes are busy under load) and only added its wait to the latency; it pays
for a sender that trickles messages to idle queues and wants fewer, larger requests. An
open batch that became ready is shipped by a task whose first step, queued behind the
current loop iteration, takes it and sends it, so messages sent in the same iteration --
for instance by tasks woken by the previous batch's results -- travel together.

:meth:`AutoBatchProducer.produce` is the same queueing without a future or a coroutine
per message (Kafka's ``produce``): a delivery callback per message, or none at all; it
never waits, so it refuses a message the full buffer has no room for
(:class:`~tidemq.client.errors.BufferFullError`) and the caller yields with
:meth:`~AutoBatchProducer.drain`. A message whose topic's route is not cached yet waits in
produce order until the route arrives. A batch is parallel lists (bodies, waiters, and
the messages' entries once they differ); a message produced without properties is its
body alone, and a batch of bodies -- or of messages sent without properties or flag -- is
encoded as columns (:func:`~tidemq.codec.send_batch.encode_send_bodies`). A batch's
results are made a few hundred at a time, each holding the batch's answer and its index
(:mod:`~tidemq.client.batch_results`), and handed to its waiters in one loop (in C when
they are all callbacks). What a message costs follows the messages a request carries:
the more a caller produces between two yields, the larger the batches (up to the caps)
and the cheaper each message, whatever the linger.

``send`` returns the message's own future: its :class:`~tidemq.types.SendResult` has the
message's ``UNIQ_KEY`` as ``msg_id`` and its own ``queue_offset`` (the batch's first
offset plus its index); a failed batch fails the future of every message in it with the
same error.

Back-pressure: messages count toward ``total_buffer_bytes`` from ``send`` until their
batch is answered; ``send`` waits while the buffer is full (a message larger than the
whole buffer is admitted when the buffer is empty).

Ordering: messages of one queue are stored in ``send`` order. A round-robin batch whose
send fails with a retriable error is sent once more to a queue the producer picks (so it
may land after later batches); batches pinned by ``queue`` or ``sharding_key`` are never
moved. Messages whose ``WAIT`` values differ are not mixed in one batch.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import operator
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from itertools import repeat
from types import TracebackType
from typing import Any, cast, overload

from tidemq.client.batch_results import BatchAnswer, message_results, record_ids
from tidemq.client.errors import (
    BufferFullError,
    ClientClosedError,
    DeliveryError,
    InvalidMessageError,
    NoRouteError,
)
from tidemq.client.producer import Producer
from tidemq.client.selector import RoundRobin, is_retriable, select_by_key, select_round_robin
from tidemq.client.sending import (
    BatchCompression,
    PreparedBatch,
    prepare_send_batch,
    prepare_send_bodies,
    publish_queues,
)
from tidemq.client.stamps import now_ms
from tidemq.client.validation import check_message, check_properties
from tidemq.errors import TideMQError
from tidemq.formats.batch import ENTRY_OVERHEAD
from tidemq.formats.properties import PropertyKey
from tidemq.types import Message, MessageQueue, SendResult

__all__ = ["AutoBatchProducer"]

log = logging.getLogger(__name__)

#: What a message's properties grow by in the batch: ``UNIQ_KEY`` and ``WAIT``.
_KEY_OVERHEAD = 64
#: An inner batch counts its messages in a signed short (store.md §3.2).
MAX_INNER_BATCH = 0x7FFF
_NO_DELAY = ("", "0", "-1")

_Key = tuple[MessageQueue, bool]
#: ``on_delivery(error, result)``: exactly one of the two is ``None``.
DeliveryCallback = Callable[[BaseException | None, SendResult | None], None]
#: Who learns a message's outcome: its future (``send``), its callback (``produce``), or
#: no one (``produce`` without a callback: a failure is counted for :meth:`flush`).
_Waiter = asyncio.Future[SendResult] | DeliveryCallback | None
#: A message of a batch, beside its body: the message, its properties alone, or ``None``
#: (no properties): see :class:`_Batch`.
_Entry = Message | dict[str, str] | None
#: A produced message waiting for its topic's route: body, entry, waiter, size, queue,
#: sharding key.
_Parked = tuple[bytes, _Entry, _Waiter, int, MessageQueue | None, str | None]


class _Batch:
    """Messages of one lane shipped together, as parallel lists: each message's body, its
    entry, and who waits for it. :meth:`AutoBatchProducer.produce` makes no object per
    message: its entry is ``None`` for a body of the lane's topic without properties, or
    the properties dict it shares with the messages produced with the same tags and keys;
    :meth:`AutoBatchProducer.send`'s entry is the message itself. While every message
    shares the first one's entry (``alike``), that entry is kept once and ``entries`` is
    empty; the first message with another entry makes the list. ``bare``: every entry is
    a message without properties and with flag 0 (its lane's topic), so the batch is
    its bodies alone."""

    __slots__ = ("alike", "bare", "bodies", "entries", "entry", "futures", "nbytes", "wait",
                 "waiters")

    def __init__(self, wait: str, entry: _Entry) -> None:
        self.wait = wait
        self.bodies: list[bytes] = []
        self.waiters: list[_Waiter] = []
        self.nbytes = 0
        #: Whether a waiter is a future (a message of :meth:`AutoBatchProducer.send`).
        self.futures = False
        self.alike = not isinstance(entry, Message)
        self.entry: _Entry = entry if self.alike else None
        self.entries: list[_Entry] = []
        self.bare = _bare(entry)

    def add(self, body: bytes, entry: _Entry, waiter: _Waiter, size: int) -> None:
        if self.alike and entry is not self.entry:
            self.entries = [self.entry] * len(self.bodies)
            self.alike = False
        if not self.alike:
            self.entries.append(entry)
            if self.bare and not _bare(entry):
                self.bare = False
        self.bodies.append(body)
        self.waiters.append(waiter)
        self.nbytes += size
        if isinstance(waiter, asyncio.Future):
            self.futures = True

    def entry_list(self) -> list[_Entry]:
        """Each message's entry."""
        return [self.entry] * len(self.bodies) if self.alike else self.entries


def _bare(entry: _Entry) -> bool:
    """Whether ``entry`` is a message without properties and with flag 0."""
    return type(entry) is Message and not entry.properties and not entry.flag


class _Lane:
    """One queue's batches (and whether they are pinned to it): the open one, the full
    ones waiting, whether one is in flight."""

    __slots__ = ("busy", "kick_pending", "open", "pinned", "queue", "ready", "timer",
                 "waiting")

    def __init__(self, queue: MessageQueue, pinned: bool) -> None:
        self.queue = queue
        self.pinned = pinned
        self.open: _Batch | None = None
        #: The open batch's linger is over (or there is none).
        self.ready = False
        self.timer: asyncio.TimerHandle | None = None
        self.waiting: collections.deque[_Batch] = collections.deque()
        self.busy = False
        self.kick_pending = False

    def close_open(self) -> None:
        """The open batch takes no more messages: it waits its turn."""
        if self.open is not None:
            self.waiting.append(self.open)
            self.open = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.ready = False

    def take(self) -> _Batch | None:
        """The batch to ship now, if any (decided without I/O)."""
        if self.busy:
            return None
        if self.waiting:
            return self.waiting.popleft()
        if self.open is not None and self.ready:
            batch, self.open, self.ready = self.open, None, False
            return batch
        return None


#: :func:`_size` of a message without properties, less its body.
_BARE_SIZE = ENTRY_OVERHEAD + _KEY_OVERHEAD


def _size(msg: Message) -> int:
    props = msg.properties
    extra = sum(len(k) + len(v) + 2 for k, v in props.items()) if props else 0
    return ENTRY_OVERHEAD + len(msg.body) + extra + _KEY_OVERHEAD


class AutoBatchProducer:
    """Accumulates :meth:`send`\\ s per queue into batches; see the module docstring.

    It sends through ``producer`` (which must be started, and stays open after
    :meth:`close`). ``compression`` overrides the producer's ``batch_compression``.
    """

    def __init__(
        self,
        producer: Producer,
        *,
        linger_ms: float = 0.0,
        max_batch_bytes: int = 32 * 1024,
        max_batch_messages: int = 1024,
        total_buffer_bytes: int = 32 * 1024 * 1024,
        compression: BatchCompression | None = None,
    ) -> None:
        if linger_ms < 0:
            raise ValueError(f"linger_ms must be >= 0, got {linger_ms}")
        if not 0 < max_batch_bytes <= total_buffer_bytes:
            raise ValueError("need 0 < max_batch_bytes <= total_buffer_bytes")
        if not 1 <= max_batch_messages <= MAX_INNER_BATCH:
            raise ValueError(f"max_batch_messages must be in 1..{MAX_INNER_BATCH}")
        max_body = producer.config.max_message_size
        self._max_body = max_body
        self.producer = producer
        self.linger = linger_ms / 1000.0
        self.max_batch_bytes = min(max_batch_bytes, max_body)
        self.max_batch_messages = max_batch_messages
        self.total_buffer_bytes = total_buffer_bytes
        self.compression = compression
        self._lanes: dict[_Key, _Lane] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        self._buffered = 0
        self._space = asyncio.Event()
        self._counter = RoundRobin()
        self._checked_topics: set[str] = set()
        #: The lane unpinned messages of a topic go to until its batch closes or ships.
        self._sticky: dict[str, _Lane] = {}
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Produced messages waiting for their topic's route, in produce order.
        self._parked: dict[str, list[_Parked]] = {}
        #: Messages produced without a callback that failed, and the last error.
        self._undelivered = 0
        self._last_error: BaseException | None = None
        #: Requests shipped (batches, and single messages sent alone) and the messages
        #: they carried, answered or not: ``shipped_messages / shipped_requests`` is the
        #: batch size the load and the linger made.
        self.shipped_requests = 0
        self.shipped_messages = 0
        #: produce()'s last tags and keys without other properties, checked, as the
        #: properties their messages share and the bytes they add to each message.
        self._shared_key: tuple[str | None, str | tuple[str, ...] | None] | None = None
        self._shared_props: dict[str, str] = {}
        self._shared_extra = 0

    def __repr__(self) -> str:
        return (f"<AutoBatchProducer group={self.producer.group!r} "
                f"buffered={self._buffered} inflight={len(self._inflight)}>")

    @property
    def buffered_bytes(self) -> int:
        """Bytes of messages sent to :meth:`send` and not answered yet."""
        return self._buffered

    # ------------------------------------------------------------------ sending

    async def send(self, msg: Message, *, queue: MessageQueue | None = None,
                   sharding_key: str | None = None) -> asyncio.Future[SendResult]:
        """Queue ``msg`` for its next batch and return its future; waits while the buffer
        is full. ``queue`` or ``sharding_key`` pins the queue (not both)."""
        if queue is None and sharding_key is None and not msg.properties:
            # The usual message -- no properties, a body within the limits -- joins its
            # topic's sticky lane's open batch of messages, which stays open and not full
            # while the buffer has room: what _check and _append would decide, with less
            # work. A sticky lane's topic was checked; an open batch's loop was kept; below
            # max_batch_bytes is below the largest body too.
            lane = self._sticky.get(msg.topic)
            if lane is not None:
                batch = lane.open
                body = msg.body
                size = _BARE_SIZE + len(body)
                buffered = self._buffered + size
                loop = self._loop
                if (batch is not None and not batch.alike and batch.wait == "true" and body
                        and batch.nbytes + size < self.max_batch_bytes
                        and len(batch.bodies) + 1 < self.max_batch_messages
                        and buffered <= self.total_buffer_bytes and loop is not None
                        and not self._closed):
                    future: asyncio.Future[SendResult] = loop.create_future()
                    self._buffered = buffered
                    batch.bodies.append(body)
                    batch.entries.append(msg)
                    batch.waiters.append(future)
                    batch.nbytes += size
                    batch.futures = True
                    if msg.flag:
                        batch.bare = False
                    if not lane.busy and not lane.kick_pending and (lane.ready
                                                                    or lane.waiting):
                        self._kick_soon(lane)
                    return future
        if self._closed:
            raise ClientClosedError(repr(self))
        if queue is not None and sharding_key is not None:
            raise ValueError("give at most one of queue and sharding_key")
        self._check(msg)
        size = _size(msg)
        while self._buffered and self._buffered + size > self.total_buffer_bytes:
            self._space.clear()
            await self._space.wait()
            if self._closed:
                raise ClientClosedError(repr(self))
        if queue is not None:
            lane = self._lane(queue, True)
        elif sharding_key is not None:
            lane = self._lane(await self._choose(msg, sharding_key), True)
        else:
            sticky = self._sticky.get(msg.topic)
            if sticky is None:
                sticky = self._sticky[msg.topic] = self._lane(await self._choose(msg, None),
                                                              False)
            lane = sticky
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[SendResult] = loop.create_future()
        self._buffered += size
        self._append(lane, msg.body, msg, fut, size)
        return fut

    def produce(self, topic: str, body: bytes, *, tags: str | None = None,
                keys: str | Sequence[str] | None = None,
                properties: dict[str, str] | None = None, queue: MessageQueue | None = None,
                sharding_key: str | None = None,
                on_delivery: DeliveryCallback | None = None) -> None:
        """Queue one message for its next batch, without waiting and without a future (in
        the spirit of Kafka's ``produce``): the cheapest way to send one message at a time.

        ``on_delivery(error, result)`` is called once the message's batch is answered;
        without it, nothing per message is made, and a failure is reported by the next
        :meth:`flush` (:class:`DeliveryError`). Raises :class:`BufferFullError` when the
        buffer has no room: ``await drain()`` and produce it again. This method never
        yields to the event loop, so batches ship only when the caller does (``await
        drain()`` every few hundred messages, or any other ``await``).
        """
        if properties is None and queue is None and sharding_key is None:
            # The usual message -- a body alone, or with the last tags and keys -- joins
            # its topic's sticky lane's open batch of its like, which stays open and not
            # full: nothing of the lane changes but the batch (what _append decides). A
            # sticky lane's topic was checked, and so were the shared tags and keys.
            lane = self._sticky.get(topic)
            if lane is not None:
                batch = lane.open
                if (batch is not None and batch.alike and body and not self._parked
                        and not self._closed):
                    if tags is None and keys is None:
                        alike = batch.entry is None
                        size = _BARE_SIZE + len(body)
                    else:
                        shared = self._shared_key
                        alike = (batch.entry is self._shared_props and shared is not None
                                 and shared[0] == tags and shared[1] == keys)
                        size = _BARE_SIZE + self._shared_extra + len(body)
                    nbytes = batch.nbytes + size
                    buffered = self._buffered + size
                    bodies = batch.bodies
                    # below max_batch_bytes is below the largest body too
                    if (alike and nbytes < self.max_batch_bytes
                            and len(bodies) + 1 < self.max_batch_messages
                            and buffered <= self.total_buffer_bytes):
                        bodies.append(body)
                        batch.waiters.append(on_delivery)
                        batch.nbytes = nbytes
                        self._buffered = buffered
                        return
        if self._closed:
            raise ClientClosedError(repr(self))
        if queue is not None and sharding_key is not None:
            raise ValueError("give at most one of queue and sharding_key")
        msg: _Entry = None  # a message without properties is its body alone
        if not properties and (tags or keys):  # the same tags and keys, checked once
            shared = (tags, keys if keys is None or isinstance(keys, str) else tuple(keys))
            if shared != self._shared_key:
                self._share(topic, body, tags, keys, shared)
            msg = self._shared_props
            size = _BARE_SIZE + self._shared_extra + len(body)
            if (topic not in self._checked_topics
                    or not 0 < len(body) <= self._max_body):
                self._check(Message(topic, body, dict(msg)))
        elif properties or tags or keys:
            props = dict(properties) if properties else {}
            if tags:
                props[PropertyKey.TAGS] = tags
            if keys:
                props[PropertyKey.KEYS] = keys if isinstance(keys, str) else " ".join(keys)
            msg = Message(topic, body, props)
            size = _size(msg)
            self._check(msg)
        else:
            size = _BARE_SIZE + len(body)
            if topic not in self._checked_topics or not 0 < size - _BARE_SIZE <= self._max_body:
                self._check(Message(topic, body, {}))
        if self._buffered and self._buffered + size > self.total_buffer_bytes:
            raise BufferFullError(buffered=self._buffered, size=size,
                                  limit=self.total_buffer_bytes)
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._buffered += size
        if queue is None and sharding_key is None and not self._parked:
            lane = self._sticky.get(topic)  # the usual message: its topic's sticky lane
            if lane is not None:
                batch = lane.open
                if (batch is not None and batch.alike and batch.entry is msg
                        and batch.nbytes + size < self.max_batch_bytes
                        and len(batch.bodies) + 1 < self.max_batch_messages):
                    # A body with the shared tags and keys joins the open batch of its
                    # like, which stays open and not full (what _append decides).
                    batch.bodies.append(body)
                    batch.waiters.append(on_delivery)
                    batch.nbytes += size
                    return
                self._append(lane, body, msg, on_delivery, size)
                return
        parked = self._parked.get(topic)
        lane = None if parked is not None else self._lane_now(topic, queue, sharding_key)
        if lane is not None:
            self._append(lane, body, msg, on_delivery, size)
            return
        if parked is None:  # the first of its topic to wait: fetch the route once
            parked = self._parked[topic] = []
            self._start(self._unpark(topic))
        parked.append((body, msg, on_delivery, size, queue, sharding_key))

    def _share(self, topic: str, body: bytes, tags: str | None,
               keys: str | Sequence[str] | None,
               shared: tuple[str | None, str | tuple[str, ...] | None]) -> None:
        """Check new tags and keys once and keep them as the properties the messages
        produced with them share (a new dict: batches hold on to the old one)."""
        props: dict[str, str] = {}
        if tags:
            props[PropertyKey.TAGS] = tags
        if keys:
            props[PropertyKey.KEYS] = keys if isinstance(keys, str) else " ".join(keys)
        self._check(Message(topic, body, props))
        self._shared_key = shared
        self._shared_props = props
        self._shared_extra = sum(len(k) + len(v) + 2 for k, v in props.items())

    async def drain(self, max_buffered: int | None = None) -> None:
        """Wait until at most ``max_buffered`` bytes (default: half the buffer) are
        waiting for their answers; yields to the event loop at least once."""
        limit = self.total_buffer_bytes // 2 if max_buffered is None else max_buffered
        await asyncio.sleep(0)
        while self._buffered > limit and not self._closed:
            self._space.clear()
            await self._space.wait()

    def _lane_now(self, topic: str, queue: MessageQueue | None,
                  sharding_key: str | None) -> _Lane | None:
        """The lane of a produced message, or ``None`` when choosing it needs a route the
        producer has not cached."""
        if queue is not None:
            return self._lane(queue, True)
        if sharding_key is None:
            sticky = self._sticky.get(topic)
            if sticky is not None:
                return sticky
        route = self.producer.instance.routes.ready(topic, allow_default=True)
        if route is None:
            return None
        queues = publish_queues(route, None)
        if sharding_key is not None:
            return self._lane(select_by_key(queues, sharding_key), True)
        sticky = self._sticky[topic] = self._lane(
            select_round_robin(queues, self._counter), False)
        return sticky

    async def _unpark(self, topic: str) -> None:
        """Fetch ``topic``'s route, then queue its parked messages in produce order."""
        try:
            await self.producer.instance.routes.get(topic, allow_default=True)
        except Exception as exc:
            self._drop(self._parked.pop(topic, []), exc)
            return
        parked = self._parked.pop(topic, [])
        for i, (body, msg, waiter, size, queue, sharding_key) in enumerate(parked):
            try:
                lane = self._lane_now(topic, queue, sharding_key)
                if lane is None:
                    raise NoRouteError(topic, "the route was dropped while messages waited "
                                              "for it")
            except TideMQError as exc:
                self._drop(parked[i:], exc)
                return
            self._append(lane, body, msg, waiter, size)

    def _drop(self, parked: Sequence[_Parked], exc: BaseException) -> None:
        """Parked messages that cannot be queued fail with ``exc``."""
        for _, _, waiter, size, _, _ in parked:
            self._buffered -= size
            self._fail([waiter], exc)
        self._space.set()

    def _lane(self, mq: MessageQueue, pinned: bool) -> _Lane:
        key = (mq, pinned)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(mq, pinned)
        return lane

    def _check(self, msg: Message) -> None:
        """What would fail the whole batch is refused for this message alone."""
        body = msg.body
        if msg.topic not in self._checked_topics:
            check_message(msg, self.producer.config.max_message_size)
            if msg.topic.startswith("%RETRY%"):
                raise InvalidMessageError("a batch cannot go to a retry topic",
                                          topic=msg.topic)
            self._checked_topics.add(msg.topic)
        elif not body or len(body) > self.producer.config.max_message_size:
            check_message(msg, self.producer.config.max_message_size)
        props = msg.properties
        if not props:
            return
        check_properties(msg)
        if props.get(PropertyKey.DELAY, "0") not in _NO_DELAY:
            raise InvalidMessageError("a batched message cannot have a delay level",
                                      topic=msg.topic)

    async def _choose(self, msg: Message, sharding_key: str | None) -> MessageQueue:
        route = await self.producer.instance.routes.get(msg.topic, allow_default=True)
        queues = publish_queues(route, None)
        if sharding_key is not None:
            return select_by_key(queues, sharding_key)
        return select_round_robin(queues, self._counter)

    def _append(self, lane: _Lane, body: bytes, msg: _Entry, waiter: _Waiter,
                size: int) -> None:
        """Decide without I/O: add to the lane's open batch, close it when it is full,
        ship what is due. ``msg`` is the batch entry (see :class:`_Batch`)."""
        props = msg.properties if isinstance(msg, Message) else msg
        wait = props.get(PropertyKey.WAIT, "true") if props else "true"
        batch = lane.open
        if batch is not None and (batch.wait != wait
                                  or batch.nbytes + size > self.max_batch_bytes):
            self._close(lane)
            batch = None
        if batch is None:
            batch = lane.open = _Batch(wait, msg)
            if self.linger > 0:
                assert self._loop is not None
                lane.timer = self._loop.call_later(self.linger, self._expire, lane)
            else:
                lane.ready = True
        batch.add(body, msg, waiter, size)
        if batch.nbytes >= self.max_batch_bytes or len(batch.bodies) >= self.max_batch_messages:
            self._close(lane)
        if not lane.busy and not lane.kick_pending and (lane.ready or lane.waiting):
            self._kick_soon(lane)

    def _close(self, lane: _Lane) -> None:
        """Close the lane's open batch; unpinned messages move on to another queue."""
        lane.close_open()
        if not lane.pinned and self._sticky.get(lane.queue.topic) is lane:
            del self._sticky[lane.queue.topic]

    def _expire(self, lane: _Lane) -> None:
        lane.timer = None
        lane.ready = True
        self._kick(lane)

    def _kick(self, lane: _Lane) -> None:
        """Ship the lane's next batch if it is due and nothing of the lane is in flight."""
        lane.kick_pending = False
        batch = self._take(lane)
        if batch is not None:
            self._start(self._send(lane, batch))

    def _kick_soon(self, lane: _Lane) -> None:
        """Ship the lane's next batch from a task that takes it in its first step, in a
        later loop iteration, so messages sent in this one still join it. (A callback
        that then started the sending task would cost every batch one more iteration.)"""
        lane.kick_pending = True
        self._start(self._ship(lane))

    async def _ship(self, lane: _Lane) -> None:
        lane.kick_pending = False
        batch = self._take(lane)  # None if a flush took it first
        if batch is not None:
            await self._send(lane, batch)

    def _take(self, lane: _Lane) -> _Batch | None:
        """The lane's batch to ship now, the lane marked busy; ``None`` if none."""
        batch = lane.take()
        if batch is None:
            return None
        if not lane.pinned and lane.open is None and self._sticky.get(
                lane.queue.topic) is lane:
            del self._sticky[lane.queue.topic]
        lane.busy = True
        return batch

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task of the producer's loop, tracked until it finishes (the
        loop kept since the first message: asking for the running one costs a ``getpid``
        system call a time on Python 3.11)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = loop.create_task(work)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _send(self, lane: _Lane, batch: _Batch) -> None:
        try:
            await self._send_batch(lane, batch)
        except BaseException as exc:  # cancelled: its messages are not left hanging
            self._fail(batch.waiters, exc)
            raise
        finally:
            self._buffered -= batch.nbytes
            self._space.set()
            lane.busy = False
        if lane.waiting:
            self._kick(lane)  # full or flushed batches: no reason to wait
        elif lane.ready and not lane.kick_pending:
            # behind the tasks this batch's results woke, which may send more
            self._kick_soon(lane)

    async def _send_batch(self, lane: _Lane, batch: _Batch) -> None:
        producer = self.producer
        topic, bodies = lane.queue.topic, batch.bodies
        self.shipped_requests += 1
        self.shipped_messages += len(bodies)
        try:
            if len(bodies) == 1:  # SEND_MESSAGE_V2 costs the broker less than a batch of one
                one = _message(topic, bodies[0], batch.entry_list()[0])
                result = await self._attempt(lane, lambda q: producer.send(one, queue=q))
                keys: Sequence[str] = (result.msg_id,)
            else:
                prepared, first, full = self._prepare(producer, topic, batch)
                result = await self._attempt(lane, lambda q: producer.send_prepared_batch(
                    prepared, first, queue=q, messages=full))
                keys = prepared.key_view
        except Exception as exc:  # every message of the batch learns why
            self._fail(batch.waiters, exc)
            return
        _resolve(batch, result, keys)

    def _prepare(self, producer: Producer, topic: str, batch: _Batch
                 ) -> tuple[PreparedBatch, Message, Sequence[Message] | None]:
        """The batch encoded once, its first message, and its messages when the producer
        traces them. Bodies that share their properties (or have none) go straight to the
        column encoder; any other batch is encoded from messages."""
        max_size, keys = producer.config.max_message_size, producer.instance.uniq_keys
        compression = self.compression or producer.batch_compression
        bodies = batch.bodies
        msgs = batch.entries
        first = batch.entry if batch.alike else msgs[0]
        if not isinstance(first, Message) and (batch.alike
                                               or msgs.count(first) == len(msgs)):
            prepared = prepare_send_bodies(topic, bodies, max_size=max_size, keys=keys,
                                           now_ms=now_ms(), compression=compression,
                                           properties=first)
            shared = None if producer.tracer is None else _SharedMessages(topic, bodies,
                                                                          first)
            return prepared, _message(topic, bodies[0], first), shared
        if batch.bare:  # send()'s messages without properties: their bodies, as columns
            prepared = prepare_send_bodies(topic, bodies, max_size=max_size, keys=keys,
                                           now_ms=now_ms(), compression=compression)
            messages = cast("list[Message]", msgs)
            return prepared, messages[0], None if producer.tracer is None else messages
        full = [_message(topic, b, m) for m, b in zip(msgs, bodies, strict=True)]
        prepared = prepare_send_batch(full, max_size=max_size, keys=keys, now_ms=now_ms(),
                                      compression=compression, checked=True)
        return prepared, full[0], full

    def _fail(self, waiters: Sequence[_Waiter], exc: BaseException) -> None:
        for waiter in waiters:
            if waiter is None:
                self._undelivered += 1
                self._last_error = exc
            elif isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    if isinstance(exc, asyncio.CancelledError):
                        waiter.cancel()
                    else:
                        waiter.set_exception(exc)
            else:
                _call(waiter, exc, None)

    async def _attempt(self, lane: _Lane,
                       send: Callable[[MessageQueue | None], Awaitable[SendResult]]
                       ) -> SendResult:
        """``send`` to the lane's queue; a round-robin lane's retriable failure is sent
        once more where the producer chooses (``None``)."""
        try:
            return await send(lane.queue)
        except TideMQError as exc:
            if lane.pinned or not is_retriable(exc):
                raise
            log.info("batch to %s failed (%s); letting the producer choose", lane.queue, exc)
            return await send(None)

    # ------------------------------------------------------------------ lifecycle

    async def flush(self) -> None:
        """Ship every batch now and wait until all of them are answered. Raises
        :class:`DeliveryError` if messages produced without a callback failed since the
        last flush."""
        while True:
            # Again after each wait: messages parked for a route join lanes meanwhile.
            for lane in list(self._lanes.values()):
                self._close(lane)
                self._kick(lane)
            if not self._inflight:
                break
            # each batch's outcome is its messages' business: a cancelled flush cancels
            # no send
            await asyncio.wait(set(self._inflight))
        if self._undelivered:
            count, cause = self._undelivered, self._last_error
            self._undelivered, self._last_error = 0, None
            assert cause is not None
            raise DeliveryError(count, cause)

    async def close(self) -> None:
        """Flush, then refuse further sends (the producer stays open)."""
        if self._closed:
            return
        try:
            await self.flush()
        finally:
            self._closed = True
            self._space.set()

    async def __aenter__(self) -> AutoBatchProducer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


def _message(topic: str, body: bytes, entry: _Entry) -> Message:
    """The message a batch entry stands for."""
    if isinstance(entry, Message):
        return entry
    return Message(topic, body, dict(entry) if entry else {})


class _SharedMessages(Sequence[Message]):
    """The messages of a batch whose entries are all ``entry`` (produced without
    properties, or with the same ones), made when read: a traced batch hands them to its
    trace records, which read only the first when the batch's messages are alike."""

    __slots__ = ("bodies", "entry", "topic")

    def __init__(self, topic: str, bodies: Sequence[bytes], entry: _Entry) -> None:
        self.topic, self.bodies, self.entry = topic, bodies, entry

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, i: int) -> Message: ...

    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...

    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        if isinstance(i, slice):
            return [_message(self.topic, b, self.entry) for b in self.bodies[i]]
        return _message(self.topic, self.bodies[i], self.entry)

    def __iter__(self) -> Iterator[Message]:
        topic, entry = self.topic, self.entry
        return (_message(topic, b, entry) for b in self.bodies)


def _resolve(batch: _Batch, result: SendResult, keys: Sequence[str]) -> None:
    """Each message's own result from its batch's -- its key, its offset, its record id
    (:mod:`~tidemq.client.batch_results`) -- for those who wait for it (a batch produced
    without callbacks makes none), handed out in one loop; a batch of callbacks alone is
    called in a loop in C, and a batch of send()'s futures alone (none cancelled) set in
    one. The results are made :data:`_RESULTS_AT_ONCE` at a time, so
    those nobody keeps are gone before the next ones are made: the garbage collector,
    which runs after so many more objects were made than freed, is not woken by them."""
    waiters = batch.waiters
    n = len(waiters)
    silent = waiters.count(None)
    if silent == n:
        return
    answer = BatchAnswer(result.status, result.queue, result.queue_offset,
                         result.transaction_id, keys, record_ids(result.offset_msg_id, n))
    callbacks_alone = not silent and not batch.futures
    future = asyncio.Future
    futures = cast("list[asyncio.Future[SendResult]]", waiters)
    futures_alone = (batch.futures and not silent
                     and all(map(operator.is_, map(type, waiters), repeat(future)))
                     and not any(map(_done, futures)))
    for start in range(0, n, _RESULTS_AT_ONCE):
        stop = min(start + _RESULTS_AT_ONCE, n)
        results = message_results(answer, start, stop)
        if callbacks_alone:
            _call_all(waiters[start:stop], results)  # type: ignore[arg-type]
            continue
        if futures_alone:
            _SINK.extend(map(_set_result, futures[start:stop], results))
            continue
        for waiter, one in zip(waiters[start:stop], results, strict=True):
            if waiter is None:
                continue
            if isinstance(waiter, future):  # send()'s own future
                if not waiter.done():
                    waiter.set_result(one)
                continue
            _call(waiter, None, one)


#: Results made at once: under the garbage collector's first threshold (700 by default).
_RESULTS_AT_ONCE = 256
#: What runs a ``map`` to its end, keeping nothing.
_SINK: collections.deque[None] = collections.deque(maxlen=0)
_done = asyncio.Future.done
_set_result = asyncio.Future.set_result


def _call_all(callbacks: list[DeliveryCallback], results: list[SendResult]) -> None:
    """``callbacks[i](None, results[i])`` for every ``i``, in order; a callback's own
    failure is logged and the ones after it still run."""
    left = iter(results)
    calls = map(operator.call, callbacks, repeat(None), left)
    sink: collections.deque[None] = collections.deque(maxlen=0)
    while True:
        try:
            sink.extend(calls)
            return
        except Exception:  # the map goes on with the next message
            failed = len(results) - operator.length_hint(left) - 1
            log.exception("delivery callback %r failed", callbacks[failed])


def _call(callback: DeliveryCallback, error: BaseException | None,
          result: SendResult | None) -> None:
    """A delivery callback's own failure is logged, never the batch's business."""
    try:
        callback(error, result)
    except Exception:
        log.exception("delivery callback %r failed", callback)
