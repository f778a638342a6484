"""CPU a message of ``tidemq bench latency``'s ticks, one tick at a time.

``tidemq bench latency --rate 5000`` hands the auto-batcher five messages a millisecond;
on a quiet machine each tick then travels alone: one send request and its answer, one
held pull woken and answered, the next pull sent. On a busy machine the ticks stretch
and requests carry more messages, so its CPU a message moves with the load. This script
keeps the shape fixed: it sends ``--tick`` messages through an
:class:`~tidemq.client.AutoBatchProducer` (linger 0, a future each, as the bench's
pacer), waits for their acknowledgements and for the long-polling
:class:`~tidemq.client.PullConsumer` to receive them, and only then sends the next tick.
Every request therefore carries one tick, whatever the load, and the CPU each process
spends a message (user and system time, all threads; the broker is a ``tidemq
standalone`` process as the bench's) is the per-tick work divided by the tick. Also
printed: the broker's context switches a tick (voluntary, all threads), which counts the
thread hand-offs.

    .venv/bin/python benchmarks/latency_ticks.py --ticks 4000 --tick 5

``--callgrind client`` or ``--callgrind broker`` counts instructions instead, which do
not move with the load: that process runs under ``valgrind --tool=callgrind
--instr-atstart=no --separate-threads=yes`` (the client: start the script so), and the
script turns its instrumentation on for the measured ticks only (``callgrind_control``).
Each thread's total is then in its own file under ``--callgrind-dir``, to be divided by
``--ticks``::

    valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes \
        --callgrind-out-file=/tmp/lt/client.%p .venv/bin/python \
        benchmarks/latency_ticks.py --ticks 300 --warmup 100 --callgrind client
    .venv/bin/python benchmarks/latency_ticks.py --ticks 300 --warmup 100 \
        --callgrind broker --callgrind-dir /tmp/lt
    grep -H totals /tmp/lt/*
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

from tidemq.bench.process import BrokerProcess, thread_cpu_seconds
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

_TOPIC = "LatencyTicks"


async def _queues(namesrv: str) -> list[MessageQueue]:
    async with AdminClient(namesrv) as admin:
        return list((await create_routed_topic(admin, _TOPIC, 8)).publish_queues)


class _CallgrindBroker(BrokerProcess):
    """The bench's broker under callgrind, its instrumentation off until turned on."""

    def __init__(self, out_dir: str, settings: tuple[str, ...] = ()) -> None:
        super().__init__(settings=settings)
        self.out_dir = out_dir

    def command(self, namesrv_port: int, broker_port: int) -> list[str]:
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                f"--callgrind-out-file={self.out_dir}/broker.%p",
                *super().command(namesrv_port, broker_port)]


def _callgrind(pid: int, on: bool) -> None:
    """Turn callgrind's instrumentation of ``pid`` on or off."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                   check=True, stdout=subprocess.DEVNULL)


def _switches(pid: int) -> dict[str, int]:
    """Voluntary context switches of every thread of ``pid``, by thread name (the
    main thread, the event loop's, as ``main``)."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
            name = "main" if tid == str(pid) else status[0].split(None, 1)[-1]
            for line in status:
                if line.startswith("voluntary_ctxt_switches:"):
                    out[name] = out.get(name, 0) + int(line.split()[1])
    return out


def _broker_cpu(pid: int) -> dict[str, tuple[float, float]]:
    return thread_cpu_seconds(pid)


def _per_tick(before: dict[str, int], after: dict[str, int], ticks: int) -> dict[str, float]:
    """What each thread added between two readings, a tick; threads that added nothing
    left out."""
    return {name: (n - before.get(name, 0)) / ticks for name, n in after.items()
            if n > before.get(name, 0)}


async def _ticks(batcher: AutoBatchProducer, consumer: PullConsumer, count: int,
                 tick: int) -> None:
    msg = Message(_TOPIC, b"x" * 128)
    for _ in range(count):
        futures = [await batcher.send(msg) for _ in range(tick)]
        for future in futures:
            await future
        got = 0
        while got < tick:
            got += len(await consumer.poll(timeout=5.0, max_messages=1 << 16))


async def _run(ticks: int, tick: int, warmup: int, callgrind: str | None = None,
               callgrind_dir: str = ".", settings: tuple[str, ...] = ()) -> dict[str, Any]:
    broker = (BrokerProcess(settings=settings) if callgrind != "broker"
              else _CallgrindBroker(callgrind_dir, settings))
    namesrv = await broker.start(timeout=600.0)
    try:
        await _queues(namesrv)
        config = ClientConfig(namesrv_addr=(namesrv,), long_polling_timeout=5.0,
                              request_timeout=30.0, send_msg_timeout=30.0)
        producer = Producer("latency_ticks", config=config)
        await producer.start()
        consumer = PullConsumer("latency_ticks", config=ClientConfig(
            namesrv_addr=(namesrv,), instance_name="latency_ticks_c",
            long_polling_timeout=5.0, request_timeout=30.0))
        await consumer.start()
        try:
            async with AutoBatchProducer(producer, linger_ms=0) as batcher:
                route = await _queues(namesrv)
                consumer.assign(route)
                await consumer.seek_to_end()
                await consumer.poll(timeout=0.2)  # its pulls are now held
                await _ticks(batcher, consumer, warmup, tick)
                counted = {"client": os.getpid(), "broker": broker.pid}.get(callgrind or "")
                if counted is not None:
                    _callgrind(counted, True)
                c0, b0, s0 = resource.getrusage(resource.RUSAGE_SELF), _broker_cpu(
                    broker.pid), _switches(broker.pid)
                t0 = time.perf_counter()
                await _ticks(batcher, consumer, ticks, tick)
                wall = time.perf_counter() - t0
                if counted is not None:
                    _callgrind(counted, False)
                c1, b1, s1 = resource.getrusage(resource.RUSAGE_SELF), _broker_cpu(
                    broker.pid), _switches(broker.pid)
        finally:
            await consumer.close(commit=False)
            await producer.close()
    finally:
        await broker.stop()
    n = ticks * tick
    cpu = {name: ((u - b0.get(name, (0.0, 0.0))[0]) / ticks * 1e6,
                  (st - b0.get(name, (0.0, 0.0))[1]) / ticks * 1e6)
           for name, (u, st) in b1.items()}
    return {"client_user": (c1.ru_utime - c0.ru_utime) / n * 1e6,
            "client_sys": (c1.ru_stime - c0.ru_stime) / n * 1e6,
            "broker_user": sum(u for u, _ in cpu.values()) / tick,
            "broker_sys": sum(st for _, st in cpu.values()) / tick,
            "broker_switches_a_tick": sum(_per_tick(s0, s1, ticks).values()),
            "switches_by_thread": _per_tick(s0, s1, ticks),
            "cpu_by_thread": {name: u + st for name, (u, st) in cpu.items() if u + st >= 1.0},
            "ticks_per_s": ticks / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=4000)
    parser.add_argument("--tick", type=int, default=5, help="messages a tick")
    parser.add_argument("--warmup", type=int, default=500, help="ticks before measuring")
    parser.add_argument("--callgrind", choices=("client", "broker"),
                        help="count this process's instructions (see the docstring)")
    parser.add_argument("--callgrind-dir", default=".",
                        help="where the broker's callgrind files go")
    parser.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable): dispatchOnAppendRecords=0")
    ns = parser.parse_args()
    import uvloop

    uvloop.install()
    r = asyncio.run(_run(ns.ticks, ns.tick, ns.warmup, ns.callgrind, ns.callgrind_dir,
                         tuple(ns.broker_set)))
    print(f"ticks of {ns.tick}: CPU µs a message client {r['client_user'] + r['client_sys']:.1f}"
          f" (user {r['client_user']:.1f} sys {r['client_sys']:.1f}), broker "
          f"{r['broker_user'] + r['broker_sys']:.1f} (user {r['broker_user']:.1f} sys "
          f"{r['broker_sys']:.1f}); broker context switches a tick "
          f"{r['broker_switches_a_tick']:.1f}; {r['ticks_per_s']:,.0f} ticks/s")
    print("broker a tick, by thread: context switches " + ", ".join(
        f"{name} {v:.2f}" for name, v in sorted(r["switches_by_thread"].items()))
        + "; CPU µs " + ", ".join(
        f"{name} {v:.1f}" for name, v in sorted(r["cpu_by_thread"].items())))


if __name__ == "__main__":
    main()
