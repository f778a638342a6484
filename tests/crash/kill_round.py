"""One life of a broker process under send load, for the kill -9 tests: senders on every
queue until enough was acknowledged, then SIGKILL at a random moment; what each queue had
acknowledged (offset, body id) is kept for the checks after the restart."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

from tidemq.client import ClientConfig, Producer
from tidemq.types import SendResult

from .broker_process import BrokerProcess


class KillRound:
    """Subclasses send in :meth:`sender` and call :meth:`acknowledged` for what the
    broker acknowledged."""

    producer_group = "crash-producer"

    def __init__(self, config: ClientConfig, ids: Iterator[int], rng: random.Random,
                 kill_after: int, queues: int) -> None:
        self.config = config
        self.ids = ids
        self.rng = rng
        self.kill_after = kill_after
        self.queues = queues
        self.acked: dict[int, list[tuple[int, int]]] = {q: [] for q in range(queues)}
        self.count = 0
        self.enough = asyncio.Event()
        self.killed = False

    async def sender(self, producer: Producer, queue_id: int) -> None:
        raise NotImplementedError

    def acknowledged(self, queue_id: int, result: SendResult, batch: list[int]) -> None:
        self.acked[queue_id] += zip(result.queue_offsets, batch, strict=True)
        self.count += len(batch)
        if self.count >= self.kill_after:
            self.enough.set()

    async def run(self, broker: BrokerProcess) -> None:
        async with Producer(self.producer_group, config=self.config) as producer:
            senders = [asyncio.create_task(self.sender(producer, q))
                       for q in range(self.queues)]
            waiting = asyncio.create_task(self.enough.wait())
            await asyncio.wait([waiting, *senders], return_when=asyncio.FIRST_COMPLETED)
            for task in senders:
                if task.done():  # a sender failed before the kill
                    waiting.cancel()
                    await task
            await asyncio.sleep(self.rng.uniform(0, 0.05))  # the crash moment
            self.killed = True
            await asyncio.to_thread(broker.kill9)
            await asyncio.gather(*senders)
