"""Requests per second through tidemq.net: one client connection, pipelined echo requests.

The server (a RemotingServer with one echo processor) runs in a child process, so client
and server each have a core; ``--same-process`` runs both on one event loop instead.
``--window`` requests are kept in flight on the single connection; each round of the
benchmark sends ``--requests`` requests and the median of ``--rounds`` is reported, with
the CPU time each side spent per request (the server's is asked for over the connection;
with ``--same-process`` both figures are the one process's total).

    .venv/bin/python benchmarks/net_echo.py --requests 100000 --window 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from tidemq.codec.command import RemotingCommand
from tidemq.net import Connection, RemotingClient, RemotingServer

ECHO = 20001  # answered by a plain function, inline
ECHO_ASYNC = 20002  # answered by a coroutine function, in a task
CPU = 20003  # answers with the server process's CPU seconds so far


def _echo(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(body=cmd.body)


async def _echo_async(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(body=cmd.body)


def _cpu(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ext_fields={"cpu": repr(time.process_time())})


def _register(server: RemotingServer) -> None:
    server.register(ECHO, _echo)
    server.register(ECHO_ASYNC, _echo_async)
    server.register(CPU, _cpu)


def _run(main: Callable[[], Coroutine[Any, Any, Any]], use_uvloop: bool) -> Any:
    if use_uvloop:
        import uvloop

        return uvloop.run(main())
    return asyncio.run(main())


def _serve(port_queue: Any, stop: Any, use_uvloop: bool) -> None:
    async def main() -> None:
        server = RemotingServer("127.0.0.1", 0)
        _register(server)
        await server.start()
        port_queue.put(server.port)
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        await server.close(drain_timeout=1.0)

    _run(main, use_uvloop)


class Round:
    def __init__(self, rps: float, client_us: float, server_us: float) -> None:
        self.rps = rps
        self.client_us = client_us  # client CPU microseconds per request
        self.server_us = server_us  # server CPU microseconds per request


async def _server_cpu(client: RemotingClient, address: str) -> float:
    response = await client.request(address, RemotingCommand.request(CPU))
    return float(response.ext_fields["cpu"])


async def _round(
    client: RemotingClient, address: str, args: argparse.Namespace, requests: int
) -> Round:
    window, body = args.window, b"x" * args.body
    code = ECHO_ASYNC if args.processor == "async" else ECHO
    per_worker, extra = divmod(requests, window)

    async def worker(count: int) -> None:
        for _ in range(count):
            request = RemotingCommand.request(code, {"k": "v"}, body)
            response = await client.request(address, request)
            if response.body != body:
                raise AssertionError("echo body mismatch")

    server_cpu = await _server_cpu(client, address)
    client_cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(worker(per_worker + (i < extra)) for i in range(window)))
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    server_cpu = await _server_cpu(client, address) - server_cpu
    return Round(requests / elapsed, client_cpu / requests * 1e6, server_cpu / requests * 1e6)


async def _client_main(args: argparse.Namespace, port: int) -> list[Round]:
    address = f"127.0.0.1:{port}"
    async with RemotingClient(request_timeout=30.0) as client:
        await _round(client, address, args, min(args.requests, 5000))  # warm-up
        return [await _round(client, address, args, args.requests) for _ in range(args.rounds)]


async def _same_process_main(args: argparse.Namespace) -> list[Round]:
    async with RemotingServer("127.0.0.1", 0) as server:
        _register(server)
        return await _client_main(args, server.port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=128, help="requests in flight")
    parser.add_argument("--body", type=int, default=16, help="body bytes per request")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument(
        "--processor", choices=["sync", "async"], default="sync",
        help="echo with a plain function (inline) or a coroutine function (task)",
    )
    parser.add_argument("--same-process", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    use_uvloop = args.loop == "uvloop"

    if args.same_process:
        rounds = _run(lambda: _same_process_main(args), use_uvloop)
    else:
        ctx = multiprocessing.get_context("spawn")
        port_queue, stop = ctx.Queue(), ctx.Event()
        proc = ctx.Process(target=_serve, args=(port_queue, stop, use_uvloop), daemon=True)
        proc.start()
        try:
            port = port_queue.get(timeout=30)
            rounds = _run(lambda: _client_main(args, port), use_uvloop)
        finally:
            stop.set()
            proc.join(10)

    result = {
        "benchmark": "net_echo",
        "loop": args.loop,
        "same_process": args.same_process,
        "processor": args.processor,
        "requests": args.requests,
        "window": args.window,
        "body": args.body,
        "rounds_rps": [round(r.rps) for r in rounds],
        "median_rps": round(statistics.median(r.rps for r in rounds)),
        "client_cpu_us_per_request": round(statistics.median(r.client_us for r in rounds), 1),
        "server_cpu_us_per_request": round(statistics.median(r.server_us for r in rounds), 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"net_echo loop={args.loop} processor={args.processor} "
            f"same_process={args.same_process} window={args.window} "
            f"body={args.body}B: median {result['median_rps']:,} req/s "
            f"(rounds {', '.join(f'{r:,}' for r in result['rounds_rps'])}); CPU per request: "
            f"client {result['client_cpu_us_per_request']} us, "
            f"server {result['server_cpu_us_per_request']} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
