"""A bench's load tasks: one that died of an error it did not count fails the bench."""

from __future__ import annotations

import asyncio

import pytest

from tidemq.bench.broker import _stop
from tidemq.bench.load import join_load
from tidemq.bench.meter import Meter
from tidemq.bench.pacer import Pacer
from tidemq.bench.process import BenchError
from tidemq.types import Message, MessageQueue


async def test_a_task_that_died_fails_the_bench_with_its_error() -> None:
    async def dies() -> None:
        raise RuntimeError("buffer full")

    async def ends() -> None:
        return None

    tasks = [asyncio.ensure_future(ends()), asyncio.ensure_future(dies())]
    with pytest.raises(BenchError, match=r"1 of 2 load tasks died.*buffer full"):
        await join_load(tasks)


async def test_stopped_and_cancelled_tasks_end_quietly() -> None:
    stop = asyncio.Event()

    async def waits() -> None:
        await stop.wait()

    cancelled = asyncio.ensure_future(asyncio.Event().wait())
    waiting = asyncio.ensure_future(waits())
    await asyncio.sleep(0)
    cancelled.cancel()
    stop.set()
    await join_load([cancelled, waiting])
    assert waiting.done() and cancelled.cancelled()


async def test_the_produce_and_consume_benches_stop_through_it() -> None:
    async def dies() -> None:
        raise RuntimeError("sender broke")

    running = [True]
    with pytest.raises(BenchError, match="sender broke"):
        await _stop([asyncio.ensure_future(dies())], running)
    assert running == [False]


async def test_the_latency_pacer_ends_through_it() -> None:
    class Broken:
        async def send(self, msg: Message, queue: MessageQueue) -> None:
            raise RuntimeError("send broke")

    running = [True]
    pacer = Pacer(Broken(), None, [MessageQueue("T", "b", 0)], Meter(),  # type: ignore[arg-type]
                  topic="T", size=128, rate=100_000, in_flight=256)
    stop = asyncio.get_running_loop().call_later(0.05, running.__setitem__, 0, False)
    with pytest.raises(BenchError, match="send broke"):
        await pacer.run(running)
    stop.cancel()
