"""AutoBatchProducer: sends one message at a time, ships batches (Kafka's accumulator).

::

    async with Producer("pg", "127.0.0.1:9876") as producer:
        async with AutoBatchProducer(producer, linger_ms=5) as batcher:
            pending = [await batcher.send(Message("Metrics", body)) for body in bodies]
            results = await asyncio.gather(*pending)

:meth:`AutoBatchProducer.send` picks the message's queue at once (round robin, its
``sharding_key`` or a fixed ``queue``) and appends it to that queue's *accumulator*. An
accumulator is shipped -- one :meth:`Producer.send_batch`, so an inner batch on a
BatchCQ topic and an outer batch elsewhere -- when it reaches ``max_batch_bytes`` or
``max_batch_messages``, when its first message has waited ``linger_ms``, or on
:meth:`flush` / :meth:`close`. ``send`` returns the message's own future: its
:class:`~tidemq.types.SendResult` has the message's ``UNIQ_KEY`` as ``msg_id`` and its
own ``queue_offset`` (the batch's first offset plus its index); a failed batch fails the
future of every message in it with the same error.

Back-pressure: messages count toward ``total_buffer_bytes`` from ``send`` until their
batch is answered; ``send`` waits while the buffer is full (a message larger than the
whole buffer is admitted when the buffer is empty).

Ordering: each queue has one batch in flight at a time (Kafka's
``max.in.flight.requests.per.connection=1`` per partition), so messages of one queue are
stored in ``send`` order; batches of different queues go out concurrently. A round-robin
batch whose send fails with a retriable error is sent once more to a queue the producer
picks (so it may land after later batches); batches pinned by ``queue`` or
``sharding_key`` are never moved. Messages whose ``WAIT`` values differ are not mixed in
one batch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from types import TracebackType

from tidemq.client.errors import ClientClosedError, InvalidMessageError
from tidemq.client.producer import Producer
from tidemq.client.selector import RoundRobin, is_retriable, select_by_key, select_round_robin
from tidemq.client.sending import BatchCompression, prepare_send_batch, publish_queues
from tidemq.client.stamps import now_ms
from tidemq.client.validation import check_message
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


@dataclasses.dataclass(slots=True)
class _Accumulator:
    """Messages of one queue waiting to be shipped together."""

    queue: MessageQueue
    pinned: bool
    wait: str
    msgs: list[Message] = dataclasses.field(default_factory=list)
    futures: list[asyncio.Future[SendResult]] = dataclasses.field(default_factory=list)
    nbytes: int = 0
    timer: asyncio.TimerHandle | None = None


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
        linger_ms: float = 5.0,
        max_batch_bytes: int = 256 * 1024,
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
        self.producer = producer
        self.linger = linger_ms / 1000.0
        self.max_batch_bytes = min(max_batch_bytes, max_body)
        self.max_batch_messages = max_batch_messages
        self.total_buffer_bytes = total_buffer_bytes
        self.compression = compression
        self._accumulators: dict[tuple[MessageQueue, bool], _Accumulator] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        #: The last batch shipped per accumulator key: the next one waits for it.
        self._lanes: dict[tuple[MessageQueue, bool], asyncio.Task[None]] = {}
        self._buffered = 0
        self._space = asyncio.Event()
        self._counter = RoundRobin()
        self._checked_topics: set[str] = set()
        self._closed = False

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
        mq = queue or await self._choose(msg, sharding_key)
        fut: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        self._buffered += size
        self._append(mq, queue is not None or sharding_key is not None, msg, fut, size)
        return fut

    def _check(self, msg: Message) -> None:
        """What would fail the whole batch is refused for this message alone."""
        if msg.topic not in self._checked_topics:
            check_message(msg, self.producer.config.max_message_size)
            self._checked_topics.add(msg.topic)
        elif not msg.body or len(msg.body) > self.producer.config.max_message_size:
            check_message(msg, self.producer.config.max_message_size)
        if msg.properties.get(PropertyKey.DELAY, "0") not in ("", "0", "-1"):
            raise InvalidMessageError("a batched message cannot have a delay level",
                                      topic=msg.topic)
        if msg.topic.startswith("%RETRY%"):
            raise InvalidMessageError("a batch cannot go to a retry topic", topic=msg.topic)

    async def _choose(self, msg: Message, sharding_key: str | None) -> MessageQueue:
        route = await self.producer.instance.routes.get(msg.topic, allow_default=True)
        queues = publish_queues(route, None)
        if sharding_key is not None:
            return select_by_key(queues, sharding_key)
        return select_round_robin(queues, self._counter)

    def _append(self, mq: MessageQueue, pinned: bool, msg: Message,
                fut: asyncio.Future[SendResult], size: int) -> None:
        """Decide without I/O: add to the accumulator, ship it when it is full."""
        wait = msg.properties.get(PropertyKey.WAIT, "true")
        key = (mq, pinned)
        acc = self._accumulators.get(key)
        if acc is not None and (acc.wait != wait
                                or acc.nbytes + size > self.max_batch_bytes):
            self._ship(key)
            acc = None
        if acc is None:
            acc = self._accumulators[key] = _Accumulator(mq, pinned, wait)
            if self.linger > 0:
                acc.timer = asyncio.get_running_loop().call_later(self.linger, self._ship, key)
        acc.msgs.append(msg)
        acc.futures.append(fut)
        acc.nbytes += size
        if (self.linger == 0 or acc.nbytes >= self.max_batch_bytes
                or len(acc.msgs) >= self.max_batch_messages):
            self._ship(key)

    def _ship(self, key: tuple[MessageQueue, bool]) -> None:
        acc = self._accumulators.pop(key, None)
        if acc is None or not acc.msgs:
            return
        if acc.timer is not None:
            acc.timer.cancel()
        task = asyncio.ensure_future(self._send(acc, self._lanes.get(key)))
        self._lanes[key] = task
        self._inflight.add(task)
        task.add_done_callback(lambda t: self._landed(key, t))

    def _landed(self, key: tuple[MessageQueue, bool], task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if self._lanes.get(key) is task:
            del self._lanes[key]

    async def _send(self, acc: _Accumulator, before: asyncio.Task[None] | None) -> None:
        try:
            if before is not None:
                await asyncio.wait([before])  # its outcome is its messages' business
            await self._send_batch(acc)
        finally:
            self._buffered -= acc.nbytes
            self._space.set()

    async def _send_batch(self, acc: _Accumulator) -> None:
        producer = self.producer
        try:
            prepared = prepare_send_batch(
                acc.msgs, max_size=producer.config.max_message_size,
                keys=producer.instance.uniq_keys, now_ms=now_ms(),
                compression=self.compression or producer.batch_compression)
            try:
                result = await producer.send_prepared_batch(prepared, acc.msgs[0],
                                                            queue=acc.queue)
            except TideMQError as exc:
                if acc.pinned or not is_retriable(exc):
                    raise
                log.info("batch to %s failed (%s); letting the producer choose", acc.queue, exc)
                result = await producer.send_prepared_batch(prepared, acc.msgs[0])
        except Exception as exc:  # every message of the batch learns why
            for fut in acc.futures:
                if not fut.done():
                    fut.set_exception(exc)
            return
        _resolve(acc.futures, result, prepared.keys)

    # ------------------------------------------------------------------ lifecycle

    async def flush(self) -> None:
        """Ship every accumulator now and wait until all batches are answered."""
        for key in list(self._accumulators):
            self._ship(key)
        while self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)

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


def _resolve(futures: Sequence[asyncio.Future[SendResult]], result: SendResult,
             keys: Sequence[str]) -> None:
    """Each message's own result from its batch's: its key, its offset, its record id."""
    record_ids = result.offset_msg_id.split(",")
    per_record = len(record_ids) == len(futures)
    for i, fut in enumerate(futures):
        if fut.done():
            continue
        fut.set_result(SendResult(
            status=result.status, msg_id=keys[i],
            offset_msg_id=record_ids[i] if per_record else result.offset_msg_id,
            queue=result.queue, queue_offset=result.queue_offset + i,
            transaction_id=result.transaction_id,
        ))
