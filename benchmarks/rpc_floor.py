"""What one request costs before the broker does any work for it: the RPC floor.

Starts ``tidemq standalone`` in its own process (:class:`~tidemq.bench.process.BrokerProcess`,
as every ``tidemq bench`` does) and sends it GET_MAX_OFFSET requests -- a dictionary
lookup on the broker -- over one connection, ``--in-flight`` at once, for ``--duration``
seconds after ``--warmup``. Three shapes, measured in one run:

=========  ==================================================================
``empty``  the request alone (no body)
``body``   the same request carrying ``--body-bytes`` the broker ignores: what
           moving an inner batch's bytes through loopback TCP and both
           processes' frame handling adds
=========  ==================================================================

Reported per shape: requests/s and the CPU microseconds per request of this (client)
process and of the broker process. Their sum is the floor under any batch send through
this stack: divided by the messages of a batch it is the per-message cost no encoding,
store or dispatch work has yet been added to. Also the latency of a request, p50 and
p99: with ``--in-flight 1 --uvloop`` the round trip under one synchronous send of
``tidemq bench produce --in-flight 1`` (which runs on uvloop), what of its tail is the
round trip itself.

    .venv/bin/python benchmarks/rpc_floor.py --duration 4 --in-flight 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from tidemq.bench.process import BrokerProcess, process_cpu_seconds
from tidemq.client import AdminClient
from tidemq.codec.command import RemotingCommand, RequestCode, ResponseCode
from tidemq.net import RemotingClient

_TOPIC = "RpcFloor"


async def _shape(client: RemotingClient, broker: BrokerProcess, body: bytes, in_flight: int,
                 warmup: float, duration: float) -> dict[str, float]:
    ext = {"topic": _TOPIC, "queueId": "0"}
    done = [0]
    running = [True]
    latencies: list[float] = []  # seconds, of the requests answered in the measured part
    measuring = [False]

    async def sender() -> None:
        while running[0]:
            cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, dict(ext), body)
            t0 = time.perf_counter()
            response = await client.request(broker.broker_addr, cmd)
            if measuring[0]:
                latencies.append(time.perf_counter() - t0)
            if response.code != ResponseCode.SUCCESS:
                raise SystemExit(f"GET_MAX_OFFSET failed: {response.code} {response.remark}")
            done[0] += 1

    tasks = [asyncio.ensure_future(sender()) for _ in range(in_flight)]
    try:
        await asyncio.sleep(warmup)
        n0, t0, c0 = done[0], time.perf_counter(), time.process_time()
        b0 = process_cpu_seconds(broker.pid) or 0.0
        measuring[0] = True
        await asyncio.sleep(duration)
        measuring[0] = False
        n, dt = done[0] - n0, time.perf_counter() - t0
        client_cpu = time.process_time() - c0
        broker_cpu = (process_cpu_seconds(broker.pid) or 0.0) - b0
    finally:
        running[0] = False
        await asyncio.gather(*tasks, return_exceptions=True)
    n = max(n, 1)
    latencies.sort()
    p50, p99 = (latencies[int(len(latencies) * q)] * 1e3 if latencies else 0.0
                for q in (0.5, 0.99))
    return {"requests_per_s": n / dt, "client_us": 1e6 * client_cpu / n,
            "broker_us": 1e6 * broker_cpu / n, "total_us": 1e6 * (client_cpu + broker_cpu) / n,
            "p50_ms": p50, "p99_ms": p99}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    broker = BrokerProcess()
    namesrv = await broker.start()
    try:
        async with AdminClient(namesrv) as admin:
            await admin.create_topic(_TOPIC, read_queue_nums=1, write_queue_nums=1)
        rows: dict[str, list[dict[str, float]]] = {"empty": [], "body": []}
        async with RemotingClient() as client:
            for _ in range(args.rounds):
                for shape, body in (("empty", b""), ("body", b"\x5a" * args.body_bytes)):
                    rows[shape].append(await _shape(client, broker, body, args.in_flight,
                                                    args.warmup, args.duration))
    finally:
        await broker.stop()
    return {shape: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            for shape, runs in rows.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed")
    parser.add_argument("--body-bytes", type=int, default=20_500,
                        help="the body of the 'body' shape (an inner batch of 100 x 128 B "
                             "messages is ~20.5 kB)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--uvloop", action="store_true",
                        help="run the client on uvloop, as tidemq bench does")
    ns = parser.parse_args()
    if ns.uvloop:
        import uvloop

        uvloop.install()
    result = asyncio.run(main(ns))
    if ns.json:
        print(json.dumps(result))
    else:
        print(f"RPC floor: GET_MAX_OFFSET, {ns.in_flight} in flight, median of {ns.rounds} "
              f"rounds of {ns.duration:g} s")
        for shape, r in result.items():
            print(f"  {shape:5s}: {r['requests_per_s']:>9,.0f} req/s  CPU per request: "
                  f"client {r['client_us']:5.1f} us, broker {r['broker_us']:5.1f} us, "
                  f"total {r['total_us']:5.1f} us; latency p50 {r['p50_ms']:.3f} ms, "
                  f"p99 {r['p99_ms']:.3f} ms")
