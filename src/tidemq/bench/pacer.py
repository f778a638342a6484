"""The sender of ``tidemq bench latency``: messages at a fixed rate, each stamped.

:class:`Pacer` releases the messages due every millisecond (libuv timers have millisecond
resolution: a shorter sleep would spin the loop), each stamped in the first 8 bytes of
its body with ``perf_counter_ns`` when it is handed to the client (:data:`STAMP`). More
than ``in_flight`` outstanding sends are skipped (and counted), not queued.

How a message is handed over:

* through an :class:`~tidemq.client.AutoBatchProducer`: its ``send`` for each message,
  each with a future of its own, called in the tick itself; the acknowledgements of that
  tick's messages are then recorded in order by a done callback on the first future not
  yet done (:class:`_TickAcks`): no task per tick, nor per message, whose creation and
  steps the client would be charged for;
* else a task per send: ``Producer.send`` of one message to the next queue, or with
  ``batch > 1`` a ``send_batch`` of that many messages stamped alike (``rate / batch``
  such sends are due a second).

``sent`` and ``skipped`` count messages, ``calls`` the send (or ``send_batch``) calls.
A stamp is the time a message is handed over, not the time it was due, so a pacer that
falls behind (a busy machine stretching its ticks) would not show in the latencies:
``late`` keeps, for every tick that released messages, how long after its first message
was due it did so (up to one tick is the tick itself).
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from tidemq.bench.load import acknowledged, join_load
from tidemq.bench.meter import Meter
from tidemq.bench.process import BenchError
from tidemq.client import AutoBatchProducer, Producer
from tidemq.errors import TideMQError
from tidemq.types import Message, MessageQueue, SendResult

__all__ = ["STAMP", "TICK", "Pacer"]

#: The send time at the head of every body: ``perf_counter_ns``, big-endian.
STAMP = struct.Struct(">q")
#: Seconds between two releases of the messages due.
TICK = 0.001


class Pacer:
    """Sends ``rate`` messages/s of ``size`` bytes to ``topic``; see the module docstring."""

    def __init__(self, producer: Producer, batcher: AutoBatchProducer | None,
                 queues: Sequence[MessageQueue], acks: Meter, *, topic: str, size: int,
                 rate: int, in_flight: int, batch: int = 1) -> None:
        if batcher is not None and batch > 1:
            raise ValueError("the auto-batcher sends single messages: not with batch > 1")
        self.producer = producer
        self.batcher = batcher
        self.queues = list(queues)
        self.acks = acks
        self.topic = topic
        self.rate = rate
        self.cap = in_flight
        self.batch = batch
        self.pad = b"x" * max(size - STAMP.size, 0)
        self.sent = self.skipped = self.in_flight = 0
        self.calls = 0  # send (or send_batch) calls made
        #: Seconds each releasing tick came after its first message was due.
        self.late: list[float] = []
        self.tasks: set[asyncio.Task[None]] = set()
        #: The first error a send task died of (one it did not count as a failed send).
        self.died: BaseException | None = None
        #: Set once nothing is in flight, when :meth:`run` waits for that.
        self._settled: asyncio.Future[None] | None = None

    async def run(self, running: list[bool]) -> None:
        """Send until ``running[0]`` is false, then wait for the sends in flight."""
        n, nq = self.batch, len(self.queues)
        per_second = self.rate / n  # sends due a second
        clock = time.perf_counter
        start = clock()
        due_sent = 0
        while running[0]:
            due = int((clock() - start) * per_second)
            if due > due_sent:
                now = min(due - due_sent, max(self.cap - self.in_flight, 0))
                self.skipped += (due - due_sent - now) * n
                first, due_sent = due_sent, due
                self.late.append(clock() - start - (first + 1) / per_second)
                if self.batcher is not None:
                    await self._hand_over(self.batcher, now)
                else:
                    self.sent += now * n
                    self.calls += now
                    self.in_flight += now
                    for k in range(1, now + 1):
                        self._spawn(self._one(self.queues[(first + k) % nq]))
            await asyncio.sleep(TICK)
        await join_load(self.tasks)
        if self.in_flight and self.batcher is not None:  # the last ticks' acknowledgements
            self._settled = asyncio.get_running_loop().create_future()
            await self._settled
        if self.died is not None:
            raise BenchError(f"a send task died: {self.died!r}") from self.died

    async def _hand_over(self, batcher: AutoBatchProducer, count: int) -> None:
        """``count`` messages to the auto-batcher now, each with its own future; one task
        records their acknowledgements."""
        send, topic, pad, clock = batcher.send, self.topic, self.pad, time.perf_counter_ns
        stamps: list[int] = []
        futures: list[asyncio.Future[SendResult]] = []
        self.sent += count
        self.calls += count
        for _ in range(count):
            t0 = clock()
            try:
                futures.append(await send(Message(topic, STAMP.pack(t0) + pad)))
            except TideMQError as exc:
                self.acks.fail(exc)
                continue
            stamps.append(t0)
        if futures:
            self.in_flight += len(futures)
            _TickAcks(self, stamps, futures).watch()

    def _acknowledged(self, count: int) -> None:
        """``count`` more messages are settled (acknowledged or failed)."""
        self.in_flight -= count
        if not self.in_flight and self._settled is not None and not self._settled.done():
            self._settled.set_result(None)

    async def _one(self, queue: MessageQueue) -> None:
        """One send of a message (or of ``batch`` messages) to ``queue``."""
        t0 = time.perf_counter_ns()
        msg = Message(self.topic, STAMP.pack(t0) + self.pad)
        n = self.batch
        try:
            if n > 1:  # one message object n times: the batch encoder writes each entry
                acknowledged(await self.producer.send_batch([msg] * n, queue=queue))
            else:
                await self.producer.send(msg, queue=queue)
        except TideMQError as exc:
            self.acks.fail(exc)
        else:
            self.acks.latencies.append((time.perf_counter_ns() - t0) / 1e9)
            self.acks.count += n
        finally:
            self.in_flight -= 1

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self.died is None:
            self.died = task.exception()


class _TickAcks:
    """One tick's acknowledgements, recorded in send order as its futures settle: a done
    callback on the first future not done yet records it and every later one already
    done (those of one batch settle together), then waits on the next one left. Each
    latency is taken when the callback runs, as an ``await`` of the future would."""

    __slots__ = ("futures", "next", "pacer", "stamps")

    def __init__(self, pacer: Pacer, stamps: list[int],
                 futures: list[asyncio.Future[SendResult]]) -> None:
        self.pacer = pacer
        self.stamps = stamps
        self.futures = futures
        self.next = 0

    def watch(self, _done: object = None) -> None:
        pacer, futures, stamps = self.pacer, self.futures, self.stamps
        acks, clock = pacer.acks, time.perf_counter_ns
        i, n = self.next, len(futures)
        while i < n and futures[i].done():
            future = futures[i]
            if future.cancelled():
                pass
            elif (exc := future.exception()) is None:
                acks.latencies.append((clock() - stamps[i]) / 1e9)
                acks.count += 1
            elif isinstance(exc, TideMQError):
                acks.fail(exc)
            elif pacer.died is None:
                pacer.died = exc
            i += 1
        settled, self.next = i - self.next, i
        if settled:
            pacer._acknowledged(settled)
        if i < n:
            futures[i].add_done_callback(self.watch)
