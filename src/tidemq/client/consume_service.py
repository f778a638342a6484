"""Running the listener over buffered messages: concurrently, or in order per queue
(Java ``ConsumeMessageConcurrentlyService`` / ``ConsumeMessageOrderlyService``).

:class:`ConcurrentService` -- ``consume_concurrency`` worker tasks take batches of up to
``consume_batch_max_size`` messages, from any queue, in the order the pulls brought them.
A batch of a queue that was revoked (or reset) before a worker reached it is skipped: it
is still buffered, so the committed offset stays below it and the queue's next owner gets
it. A batch that fails is sent back message by message (CONSUMER_SEND_MSG_BACK, falling
back to a send to the retry topic); a message that cannot be sent back either stays
buffered and is retried locally after ``consume_retry_delay``.

:class:`OrderlyService` -- one task per queue hands the oldest buffered messages to the
listener, one batch at a time and only while the queue's broker lock is fresh
(:mod:`tidemq.client.locks`); at most ``consume_concurrency`` queues run the listener at
once. A failed batch stays at the head: the queue pauses for
``suspend_current_queue_time`` and retries it, until ``max_reconsume_times`` (if set) sends
it to the dead-letter queue.

Both finish the batch in flight when a queue is revoked and take nothing more from it;
the consumer waits for that (``ProcessQueue.drained``) before committing and releasing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from tidemq.client.listener import ConsumeStatus
from tidemq.client.process_queue import ProcessQueue
from tidemq.client.push_options import PushOptions
from tidemq.types import MessageExt

__all__ = ["ConcurrentService", "ConsumeHost", "OrderlyService", "pause"]


class ConsumeHost(Protocol):
    """What the services need from their consumer."""

    @property
    def options(self) -> PushOptions: ...

    async def invoke(self, msgs: list[MessageExt]) -> ConsumeStatus:
        """Run the listener; any failure is ``RECONSUME_LATER``."""
        ...

    async def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        """Hand a failed message back to the broker; ``False`` if that failed."""
        ...


def _batches(msgs: Sequence[MessageExt], size: int) -> list[list[MessageExt]]:
    if isinstance(msgs, list):  # a list's slices are new lists already
        return [msgs[i:i + size] for i in range(0, len(msgs), size)]
    return [list(msgs[i:i + size]) for i in range(0, len(msgs), size)]


async def pause(pq: ProcessQueue, seconds: float) -> None:
    """Wait ``seconds``, or less if ``pq`` is revoked meanwhile (a back-off or a
    suspension that must not hold up a release)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await pq.revoked.wait()


_Item = tuple[ProcessQueue, int, list[MessageExt]]


class ConcurrentService:
    """See the module docstring."""

    def __init__(self, host: ConsumeHost) -> None:
        self._host = host
        self._ready: asyncio.Queue[_Item] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._later: set[asyncio.TimerHandle] = set()

    def start(self) -> None:
        if not self._workers:
            n = self._host.options.consume_concurrency
            self._workers = [asyncio.ensure_future(self._work()) for _ in range(n)]

    async def stop(self) -> None:
        """Stop the workers; a listener call in flight is cancelled."""
        for handle in self._later:
            handle.cancel()
        self._later.clear()
        workers, self._workers = self._workers, []
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    @property
    def queued(self) -> int:
        """Batches waiting for a worker."""
        return self._ready.qsize()

    def submit(self, pq: ProcessQueue, msgs: Sequence[MessageExt]) -> None:
        """Queue newly buffered messages of ``pq`` for the workers."""
        for batch in _batches(msgs, self._host.options.consume_batch_max_size):
            self._ready.put_nowait((pq, pq.generation, batch))

    async def _work(self) -> None:
        while True:
            pq, generation, batch = await self._ready.get()
            if not pq.active or pq.generation != generation:
                continue  # revoked or reset: the batch stays buffered (or is gone)
            pq.begin(batch)
            try:
                await self._consume(pq, generation, batch)
            finally:
                pq.end(batch)

    async def _consume(self, pq: ProcessQueue, generation: int,
                       batch: list[MessageExt]) -> None:
        host = self._host
        status = await host.invoke(batch)
        if pq.generation != generation:
            return
        if status is ConsumeStatus.CONSUME_SUCCESS:
            pq.done(batch)
            return
        delay = host.options.retry_delay_level
        kept: list[MessageExt] = []
        for msg in batch:
            if not await host.send_back(msg, delay):
                kept.append(msg)
        if pq.generation != generation:
            return
        kept_ids = {id(m) for m in kept}
        pq.done([m for m in batch if id(m) not in kept_ids])
        if kept:
            for msg in kept:
                msg.reconsume_times += 1
            self._retry_later(pq, generation, kept)

    def _retry_later(self, pq: ProcessQueue, generation: int,
                     msgs: list[MessageExt]) -> None:
        loop = asyncio.get_running_loop()

        def again() -> None:
            self._later.discard(handle)
            if pq.active and pq.generation == generation:
                self.submit(pq, [m for m in msgs if pq.has(m)])

        handle = loop.call_later(self._host.options.consume_retry_delay, again)
        self._later.add(handle)


class OrderlyService:
    """See the module docstring."""

    def __init__(self, host: ConsumeHost, *, max_reconsume_times: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._host = host
        self._max_reconsume = max_reconsume_times
        self._clock = clock
        self._slots = asyncio.Semaphore(host.options.consume_concurrency)
        self._tasks: dict[ProcessQueue, asyncio.Task[None]] = {}

    def start(self) -> None:
        """Nothing to start: queues get their task in :meth:`start_queue`."""

    def start_queue(self, pq: ProcessQueue) -> None:
        if pq not in self._tasks:
            task = asyncio.ensure_future(self._run(pq))
            self._tasks[pq] = task
            task.add_done_callback(lambda _t: self._tasks.pop(pq, None))

    def submit(self, pq: ProcessQueue, msgs: Sequence[MessageExt]) -> None:
        """Nothing to do: the queue's task takes messages from its buffer."""

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, pq: ProcessQueue) -> None:
        opts = self._host.options
        while pq.active:
            if not pq.buffered or not pq.lock_fresh(self._clock(), opts.lock_stale_after):
                pq.wakeup.clear()
                await pq.wakeup.wait()
                continue
            generation = pq.generation
            batch = pq.head(opts.consume_batch_max_size)
            async with self._slots:
                if not pq.active or pq.generation != generation:
                    continue
                pq.begin(batch)
                try:
                    status = await self._host.invoke(batch)
                finally:
                    pq.end(batch)
            if pq.generation != generation:
                continue
            if status is ConsumeStatus.CONSUME_SUCCESS or await self._give_up(batch):
                pq.done(batch)
                continue
            for msg in batch:
                msg.reconsume_times += 1
            await pause(pq, opts.suspend_current_queue_time)

    async def _give_up(self, batch: list[MessageExt]) -> bool:
        """Send a batch that failed ``max_reconsume_times`` times to the dead-letter
        queue; ``True`` when it is gone there."""
        limit = self._max_reconsume
        if limit < 0 or any(m.reconsume_times < limit for m in batch):
            return False
        for msg in batch:
            if not await self._host.send_back(msg, -1):
                return False
        return True
