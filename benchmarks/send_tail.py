"""Where the time of one synchronous send goes, send by send, and what the slow ones wait on.

Starts a broker process (``tidemq standalone``, as ``tidemq bench produce`` does) and
sends 128-byte messages with ``Producer.send`` one at a time (``--in-flight 1``) for
``--duration`` seconds after ``--warmup``. Both processes stamp each step on the shared
monotonic clock (``time.perf_counter``), by wrapping a few methods of their connections:

=========  ==============================================================================
client     the request written (``Connection.send_request`` returned: written at once)
broker     the request's read callback starts; its answer handed to the transport
           (``Connection._flush``); the read callback ends
client     the answer's read callback starts; ``send`` returns
=========  ==============================================================================

so every send splits into five parts: *build* (client, before the write), *to broker*
(the request on the wire, the broker woken and its event loop reaching the read, which
includes any wait for the GIL), *broker* (the handling until the answer is written),
*to client* and *finish* (client, from the answer's read to the result). Also stamped:
each dispatch round of the broker's store (``Dispatcher.run_once``), every garbage
collection in either process (``gc.callbacks``), the full ones (generation 2) apart, and
the steps of the store's other threads, each of which takes the GIL from the event loop
while it runs (the page warmer, the housekeeper, the commit-log flusher).

Printed: the median and p99 of each part over all sends, then the sends slower than the
p99: which part made them slow (the part furthest above its own median), how many
overlapped a dispatch round, a collection or a step of each of those threads (against
the share of all sends that did: a cause shows as a larger share among the slow ones),
and how many were written while a round held the loop. The clocks are the same clock, so the parts
add up to the send; the stamps themselves cost a few hundred nanoseconds a send.

    .venv/bin/python benchmarks/send_tail.py --duration 10 --warmup 2
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import bisect
import contextlib
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_clock = time.perf_counter


def _stamp_gc(out: list[tuple[float, float]], full: list[tuple[float, float]]) -> None:
    """Stamp every collection into ``out``, the full ones (generation 2) into ``full`` too."""
    start = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            start[0] = _clock()
        else:
            out.append((start[0], _clock()))
            if info.get("generation") == 2:
                full.append(out[-1])

    gc.callbacks.append(on_gc)


# ---------------------------------------------------------------------- broker child


def _stamp_threads() -> dict[str, list[tuple[float, float]]]:
    """Stamp the steps of the store's threads other than the event loop's: the page
    warmer's (``CommitLog.warm_step``), the housekeeper's (its checkpoint and its check of
    the dispatch lag) and the commit-log flusher's (``CommitLog.dirty_bytes``, called once
    a wake-up, and the flush itself). Each holds the GIL while it runs Python code."""
    import threading

    from tidemq.store import commitlog, flush, message_store

    out: dict[str, list[tuple[float, float]]] = {}
    main = threading.main_thread()

    def wrap(cls: Any, name: str, label: str) -> None:
        inner = getattr(cls, name)
        spans = out.setdefault(label, [])

        def stamped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is main:
                return inner(self, *args, **kwargs)
            t0 = _clock()
            try:
                return inner(self, *args, **kwargs)
            finally:
                spans.append((t0, _clock()))

        setattr(cls, name, stamped)

    wrap(commitlog.CommitLog, "warm_step", "warmer")
    wrap(message_store.MessageStore, "_write_checkpoint", "housekeeper")
    wrap(message_store.MessageStore, "dispatch_lag", "housekeeper")
    wrap(commitlog.CommitLog, "dirty_bytes", "flusher")
    wrap(flush.FlushService, "_flush", "flusher")
    return out


def _broker_child(out_path: str, argv: list[str]) -> None:
    """Run ``tidemq standalone`` with its connections and dispatcher stamped; the stamps
    are written to ``out_path`` when it exits (SIGTERM: a clean shutdown)."""
    from tidemq.net import connection
    from tidemq.store import dispatch

    reads: list[tuple[float, float]] = []
    flushes: list[float] = []
    rounds: list[tuple[float, float]] = []
    collections: list[tuple[float, float]] = []
    full: list[tuple[float, float]] = []
    _stamp_gc(collections, full)
    received = connection.Connection._frames_received
    flush = connection.Connection._flush
    run_once = dispatch.Dispatcher.run_once
    threads = _stamp_threads()

    def frames_received(self: Any) -> None:
        t0 = _clock()
        received(self)
        reads.append((t0, _clock()))

    def flush_out(self: Any) -> None:
        if self._out:
            flushes.append(_clock())
        flush(self)

    def dispatch_round(self: Any, batches: Any) -> None:
        t0 = _clock()
        run_once(self, batches)
        rounds.append((t0, _clock()))

    connection.Connection._frames_received = frames_received  # type: ignore[method-assign]
    connection.Connection._flush = flush_out  # type: ignore[method-assign]
    dispatch.Dispatcher.run_once = dispatch_round  # type: ignore[method-assign]

    def dump() -> None:
        Path(out_path).write_text(json.dumps({"reads": reads, "flushes": flushes,
                                              "rounds": rounds, "gc": collections,
                                              "gc_full": full, "threads": threads}))

    atexit.register(dump)
    from tidemq.cli.main import main

    sys.argv = ["tidemq", *argv]
    main()


# ---------------------------------------------------------------------- client


async def _run(duration: float, warmup: float, stamps_path: str) -> dict[str, Any]:
    from tidemq.bench.process import BrokerProcess
    from tidemq.client import AdminClient, ClientConfig, Message, Producer
    from tidemq.errors import TideMQError
    from tidemq.net import connection

    class StampedBroker(BrokerProcess):
        def command(self, namesrv_port: int, broker_port: int) -> list[str]:
            cmd = super().command(namesrv_port, broker_port)
            return [sys.executable, __file__, "--broker-child", stamps_path, *cmd[3:]]

    written: list[float] = []
    answered: list[float] = []
    collections: list[tuple[float, float]] = []
    full: list[tuple[float, float]] = []
    send_request = connection.Connection.send_request
    received = connection.Connection._frames_received

    def stamped_send(self: Any, *args: Any, **kwargs: Any) -> int:
        opaque = send_request(self, *args, **kwargs)
        written.append(_clock())
        return opaque

    def stamped_received(self: Any) -> None:
        answered.append(_clock())
        received(self)

    broker = StampedBroker()
    await broker.start()
    sends: list[tuple[float, float]] = []
    try:
        async with AdminClient(broker.namesrv_addr) as admin:
            await admin.create_topic("SendTail", read_queue_nums=8, write_queue_nums=8)
            while True:
                with contextlib.suppress(TideMQError):
                    route = await admin.instance.routes.get("SendTail", refresh=True)
                    if route.publish_queues:
                        break
                await asyncio.sleep(0.05)  # the broker registers the topic soon
        producer = Producer("send_tail", config=ClientConfig(
            namesrv_addr=(broker.namesrv_addr,), send_msg_timeout=30.0))
        await producer.start()
        msg = Message("SendTail", b"x" * 128)
        queue = route.publish_queues[0]
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)  # as tidemq bench produce
        _stamp_gc(collections, full)
        connection.Connection.send_request = stamped_send  # type: ignore[method-assign]
        connection.Connection._frames_received = stamped_received  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        start = loop.time()
        while loop.time() - start < warmup + duration:
            measured = loop.time() - start >= warmup
            t0 = _clock()
            await producer.send(msg, queue=queue)
            if measured:
                sends.append((t0, _clock()))
        connection.Connection.send_request = send_request  # type: ignore[method-assign]
        connection.Connection._frames_received = received  # type: ignore[method-assign]
        await producer.close()
    finally:
        await broker.stop()
    return {"sends": sends, "written": written, "answered": answered, "gc": collections,
            "gc_full": full}


def _first_in(times: list[float], lo: float, hi: float) -> float | None:
    i = bisect.bisect_left(times, lo)
    return times[i] if i < len(times) and times[i] <= hi else None


def _overlaps(spans: list[tuple[float, float]], lo: float, hi: float) -> bool:
    """Whether a span of ``spans`` (sorted by start, not overlapping) overlaps ``(lo, hi)``."""
    i = bisect.bisect_left(spans, (hi,)) - 1
    return i >= 0 and spans[i][1] > lo


_PARTS = ("build", "to broker", "broker", "to client", "finish")


def _analyse(client: dict[str, Any], broker: dict[str, Any]) -> None:
    written, answered = client["written"], client["answered"]
    reads = broker["reads"]
    read_starts = [a for a, _ in reads]
    flushes = broker["flushes"]
    rounds = broker["rounds"]
    round_starts = [a for a, _ in rounds]
    rows: list[tuple[float, list[float], bool, bool, float]] = []
    busy_to_broker: list[float] = []  # "to broker" of requests written during a round
    free_to_broker: list[float] = []
    in_round: set[float] = set()  # the sends (by start) whose request waited on a round
    for t0, t1 in client["sends"]:
        tw = _first_in(written, t0, t1)
        tr = _first_in(answered, tw, t1) if tw is not None else None
        tb = _first_in(read_starts, tw, tr) if tw is not None and tr is not None else None
        if tw is None or tr is None or tb is None:
            continue
        tf = _first_in(flushes, tb, tr)
        if tf is None:
            continue
        parts = [tw - t0, tb - tw, tf - tb, tr - tf, t1 - tr]
        i = bisect.bisect_right(round_starts, tw) - 1
        if i >= 0 and rounds[i][1] > tw:
            busy_to_broker.append(tb - tw)
            in_round.add(t0)
        else:
            free_to_broker.append(tb - tw)
        rows.append((t1 - t0, parts, _overlaps(broker["rounds"], tw, tr),
                     _overlaps(broker["gc"], t0, t1) or _overlaps(client["gc"], t0, t1), t0))
    if not rows:
        print("no send could be matched with the broker's stamps")
        return
    totals = sorted(r[0] for r in rows)
    p99 = totals[int(len(totals) * 0.99)]
    medians = [statistics.median(r[1][i] for r in rows) for i in range(5)]
    print(f"{len(rows):,} sends: p50 {statistics.median(totals) * 1e3:.3f} ms, "
          f"p99 {p99 * 1e3:.3f} ms, max {totals[-1] * 1e3:.3f} ms")
    print(f"{'part':12s} {'median µs':>10s} {'p99 µs':>8s}")
    for i, name in enumerate(_PARTS):
        values = sorted(r[1][i] for r in rows)
        print(f"{name:12s} {medians[i] * 1e6:10.1f} {values[int(len(values) * 0.99)] * 1e6:8.1f}")
    slow = [r for r in rows if r[0] >= p99]
    blame = dict.fromkeys(_PARTS, 0)
    for _total, parts, _round, _gc, _t0 in slow:
        worst = max(range(5), key=lambda i: parts[i] - medians[i])
        blame[_PARTS[worst]] += 1
    print(f"the {len(slow)} sends at or above the p99, by the part furthest above its "
          f"median: " + ", ".join(f"{k} {v}" for k, v in blame.items() if v))
    print(f"  overlapping a dispatch round: {sum(r[2] for r in slow)} "
          f"(all sends: {sum(r[2] for r in rows) / len(rows):.0%}); a garbage collection: "
          f"{sum(r[3] for r in slow)} (all sends: {sum(r[3] for r in rows)})")
    full_in_send = sum(_overlaps(broker["gc_full"], a, b) or _overlaps(client["gc_full"], a, b)
                       for a, b in client["sends"])
    print(f"  collections over the run: broker {len(broker['gc'])} (full "
          f"{len(broker['gc_full'])}), client {len(client['gc'])} (full "
          f"{len(client['gc_full'])}); full ones overlapping a send: {full_in_send}")
    print("  mean excess over the medians, µs: " + ", ".join(
        f"{name} {statistics.fmean(r[1][i] for r in slow) * 1e6 - medians[i] * 1e6:.0f}"
        for i, name in enumerate(_PARTS)))
    for label, spans in sorted(broker.get("threads", {}).items()):
        in_slow = sum(_overlaps(spans, t0, t0 + total) for total, _p, _r, _g, t0 in slow)
        in_all = sum(_overlaps(spans, t0, t0 + total) for total, _p, _r, _g, t0 in rows)
        held = sorted(b - a for a, b in spans) or [0.0]
        print(f"  the {label} thread: {len(spans):,} steps (median "
              f"{statistics.median(held) * 1e6:.1f} µs, max {held[-1] * 1e6:.0f} µs); "
              f"overlapping {in_slow} of the slow sends "
              f"({in_slow / len(slow):.1%}), {in_all:,} of all ({in_all / len(rows):.1%})")
    waited = sum(r[4] in in_round for r in slow)
    print(f"  written while a dispatch round ran on the broker (read after it): {waited} of the "
          f"slow sends ({waited / len(slow):.1%}), {len(in_round):,} of all "
          f"({len(in_round) / len(rows):.1%})")
    lengths = sorted(b - a for a, b in rounds)
    if lengths:
        long = len(lengths) - bisect.bisect_left(lengths, 100e-6)
        print(f"dispatch rounds: {len(lengths):,}, median {statistics.median(lengths) * 1e6:.1f}"
              f" µs, p99 {lengths[int(len(lengths) * 0.99)] * 1e6:.1f} µs, over 100 µs {long:,}")
    for label, values in (("during a dispatch round", busy_to_broker),
                          ("with the dispatch thread idle", free_to_broker)):
        if values:
            print(f"requests written {label}: {len(values):,}, 'to broker' median "
                  f"{statistics.median(values) * 1e6:.1f} µs")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--broker-child":
        _broker_child(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    ns = parser.parse_args()
    import uvloop

    uvloop.install()
    with tempfile.TemporaryDirectory() as tmp:
        stamps = os.path.join(tmp, "broker.json")
        client = asyncio.run(_run(ns.duration, ns.warmup, stamps))
        broker = json.loads(Path(stamps).read_text())
    for stamps_of in (client, broker):  # spans as sorted tuples, for bisect
        for key in ("gc", "gc_full", "rounds"):
            if key in stamps_of:
                stamps_of[key] = sorted(map(tuple, stamps_of[key]))
        for label, spans in stamps_of.get("threads", {}).items():
            stamps_of["threads"][label] = sorted(map(tuple, spans))
    _analyse(client, broker)


if __name__ == "__main__":
    main()
