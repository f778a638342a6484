"""Python work per message on the small-request path, counted exactly.

Starts an in-process cluster (one name server, one broker) on this event loop, so the
client and the broker run in one thread and every Python bytecode either side executes
for a message can be counted (``sys.settrace`` with opcode events; the store's dispatch
thread, started before tracing, is left out). Counts do not move with the machine's
load, which makes them the figure to compare when the cores are shared. Shapes:

==========  ==========================================================================
``send``    ``Producer.send`` to one queue, one message at a time (``tidemq bench
            produce --in-flight 1``)
``auto``    ``AutoBatchProducer.send`` at linger 0, ``--senders`` loops each awaiting
            its message's future (``tidemq bench produce --linger-ms 0`` has 256)
``latency`` auto-batched sends, then the long-polling ``PullConsumer.poll`` that
            receives them: ``--tick`` messages handed over together, as the pacer of
            ``tidemq bench latency`` releases a millisecond's messages (five at its
            5,000 msgs/s), each awaited through its own future
==========  ==========================================================================

Printed per shape: opcodes and Python calls per message, split by package, and the
functions that execute the most; then, apart, the opcodes the store's dispatch thread
runs per message (traced from its start, counted only while the messages are sent). That
last figure moves with how many puts each dispatch round happens to take;
``benchmarks/dispatch_round.py`` counts a round of one put exactly.

    .venv/bin/python benchmarks/request_work.py send auto latency
    .venv/bin/python benchmarks/request_work.py auto --senders 16 --messages 1600
    .venv/bin/python benchmarks/request_work.py latency --tick 5 --messages 1000
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import threading
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tidemq.bench.topics import create_routed_topic
from tidemq.client import (
    AdminClient,
    AutoBatchProducer,
    ClientConfig,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
)
from tidemq.testing import Cluster

_TOPIC = "RequestWork"


class _Counter:
    """Opcodes and calls by package (``client``, ``broker``, ``codec`` ... ``other``)."""

    def __init__(self) -> None:
        self.opcodes: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.functions: collections.Counter[str] = collections.Counter()

    @staticmethod
    def _where(code: types.CodeType) -> tuple[str, str]:
        path = code.co_filename
        if "/tidemq/" in path:
            rel = path.split("/tidemq/", 1)[1]
            return rel.split("/", 1)[0].removesuffix(".py"), f"{rel}:{code.co_name}"
        return ("asyncio" if "/asyncio/" in path else "other"), f"{path}:{code.co_name}"

    def trace(self, frame: types.FrameType, event: str, _arg: Any) -> Any:
        frame.f_trace_opcodes = True
        area, name = self._where(frame.f_code)
        self.calls[area] += 1
        opcodes, functions = self.opcodes, self.functions

        def local(_frame: types.FrameType, event: str, _arg: Any) -> Any:
            if event == "opcode":
                opcodes[area] += 1
                functions[name] += 1
            return local

        return local


class _DispatchCounter:
    """Opcodes of the store's dispatch thread while :attr:`on` (installed with
    ``threading.settrace`` before the store starts its thread)."""

    def __init__(self) -> None:
        self.on = False
        self.opcodes = 0

    def trace(self, frame: types.FrameType, event: str, _arg: Any) -> Any:
        if not self.on or threading.current_thread().name != "tidemq-dispatch":
            return None
        frame.f_trace_opcodes = True

        def local(_frame: types.FrameType, event: str, _arg: Any) -> Any:
            if event == "opcode" and self.on:
                self.opcodes += 1
            return local

        return local


async def _create_topic(namesrv: str) -> list[MessageQueue]:
    async with AdminClient(namesrv) as admin:
        return list((await create_routed_topic(admin, _TOPIC, 8)).publish_queues)


async def _measure(shape: str, messages: int, senders: int, top: int, tick: int = 1
                   ) -> None:
    dispatch = _DispatchCounter()
    threading.settrace(dispatch.trace)  # the dispatch thread starts with the store
    with tempfile.TemporaryDirectory() as root:
        async with Cluster(Path(root)) as cluster:
            threading.settrace(None)  # type: ignore[arg-type,unused-ignore]
            queues = await _create_topic(cluster.namesrv_addr)
            config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=5.0)
            producer = Producer("request_work", config=config)
            await producer.start()
            batcher = AutoBatchProducer(producer, linger_ms=0) if shape != "send" else None
            consumer = None
            if shape == "latency":
                consumer = PullConsumer("request_work", config=ClientConfig(
                    namesrv_addr=(cluster.namesrv_addr,), instance_name="request_work_c",
                    long_polling_timeout=5.0))
                await consumer.start()
                consumer.assign(queues)
                await consumer.seek_to_end()
                await consumer.poll(timeout=0.2)  # its pulls are now held
            msg = Message(_TOPIC, b"x" * 128)

            async def one() -> None:
                if batcher is None:
                    await producer.send(msg, queue=queues[0])
                elif consumer is None:
                    await (await batcher.send(msg))
                else:  # a tick's messages, each with its own future, then their receipt
                    futures = [await batcher.send(msg) for _ in range(tick)]
                    for future in futures:
                        await future
                    got = 0
                    while got < tick:
                        got += len(await consumer.poll(timeout=5.0))

            async def run(count: int) -> None:
                loops = 1 if shape != "auto" else senders
                each = max(1, count // loops)

                async def loop() -> None:
                    for _ in range(each):
                        await one()

                await asyncio.gather(*(loop() for _ in range(loops)))

            try:
                each_call = tick if shape == "latency" else 1  # messages a call of one()
                await run(max(300, 4 * senders))  # connections, routes, caches
                messages = messages // each_call * each_call
                counter = _Counter()
                dispatch.on = True
                await _traced(counter.trace, lambda: run(messages // each_call))
                dispatch.on = False
            finally:
                if batcher is not None:
                    await batcher.close()
                if consumer is not None:
                    await consumer.close(commit=False)
                await producer.close()
    _report(shape, senders, messages, counter, top, tick)
    print(f"  the store's dispatch thread besides: {dispatch.opcodes / messages:,.0f} opcodes")


async def _traced(tracer: Callable[..., Any], body: Callable[[], Awaitable[None]]) -> None:
    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        await body()
        await asyncio.sleep(0.05)  # the last answers' callbacks
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type,unused-ignore]


def _report(shape: str, senders: int, n: int, counter: _Counter, top: int,
            tick: int = 1) -> None:
    label = (f"{shape} ({senders} senders)" if shape == "auto"
             else f"{shape} (ticks of {tick})" if shape == "latency" and tick > 1 else shape)
    print(f"{label}: {sum(counter.opcodes.values()) / n:,.0f} opcodes and "
          f"{sum(counter.calls.values()) / n:,.0f} calls a message")
    for area, count in counter.opcodes.most_common():
        print(f"  {area:10s} {count / n:8,.0f} opcodes  {counter.calls[area] / n:6,.1f} calls")
    for name, count in counter.functions.most_common(top):
        print(f"    {count / n:8,.1f}  {name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="+", choices=("send", "auto", "latency"))
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--senders", type=int, default=1, help="auto: concurrent senders")
    parser.add_argument("--tick", type=int, default=1,
                        help="latency: messages handed over together (counts are per message)")
    parser.add_argument("--top", type=int, default=10, help="functions listed per shape")
    ns = parser.parse_args()
    import uvloop

    uvloop.install()
    for name in ns.shapes:
        asyncio.run(_measure(name, ns.messages, ns.senders, ns.top, ns.tick))
