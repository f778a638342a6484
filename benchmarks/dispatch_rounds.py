"""Where a paced dispatcher's lag comes from: its rounds, recorded one by one.

``tidemq bench dispatch``'s paced load (``put_multi_dispatch`` over 64 queues, each
message fanned out to 10 of 1,000 LMQs, its UNIQ_KEY indexed; a producer thread putting
the due messages every millisecond) at each rate of ``--rates``, on one store per
dispatcher. Recorded per round, without changing what the dispatcher does (its methods
wrapped on the instance): the records it holds, its wall time and the dispatching
thread's CPU time (wall minus CPU is time spent waiting for the GIL or a core), the
delay from the append that woke the sleeping thread to the thread running again, and
which way it was applied (``serial``, ``inline``: the concurrent dispatcher's own steps
on the builder, ``prepare`` / ``commit``: the pipeline's). Beside them each message's lag
from its put to visible (as the bench), and each thread's CPU per message.

    .venv/bin/python benchmarks/dispatch_rounds.py --rates 8000,12000,16000
"""

from __future__ import annotations

import argparse
import collections
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tidemq.bench.dispatch import MODES, DispatchBenchConfig, _Load, _open, _Paced
from tidemq.broker.gc_settings import server_gc
from tidemq.store.concurrent_dispatch import ConcurrentDispatcher
from tidemq.store.dispatch import Dispatcher
from tidemq.store.message_store import MessageStore
from tidemq.store.wakeup import Wakeup


class _Log:
    def __init__(self) -> None:
        self.rounds: list[tuple[str, int, float, float]] = []  # kind, records, wall, cpu
        self.wakes: list[float] = []
        self.set_at = 0.0


class _TimedWakeup(Wakeup):
    """A :class:`Wakeup` that notes when it was first set after a clear, and how long
    the waiter took to run after that."""

    __slots__ = ("log",)

    def __init__(self, log: _Log) -> None:
        super().__init__()
        self.log = log

    def set(self) -> None:
        if not self.log.set_at:
            self.log.set_at = time.perf_counter()
        super().set()

    def wait(self, timeout: float | None = None) -> bool:
        got = super().wait(timeout)
        if got and self.log.set_at:
            self.log.wakes.append(time.perf_counter() - self.log.set_at)
        return got

    def clear(self) -> None:
        self.log.set_at = 0.0
        super().clear()


def _records(batches: list[Any]) -> int:
    return sum(len(b.phys) for b in batches)


def _timed(log: _Log, kind: str, call: Callable[..., Any],
           count: Callable[..., int]) -> Callable[..., Any]:
    def wrapped(*args: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return call(*args)
        finally:
            log.rounds.append((kind, count(*args), time.perf_counter() - t0,
                               time.thread_time() - c0))
    return wrapped


def _instrument(store: MessageStore) -> _Log:
    log = _Log()
    d = store.dispatcher
    assert d is not None
    d._wakeup = _TimedWakeup(log)
    kind = "serial" if type(d) is Dispatcher else "inline"
    d.run_once = _timed(log, kind, d.run_once, _records)  # type: ignore[method-assign]
    if isinstance(d, ConcurrentDispatcher):
        d._prepare = _timed(log, "prepare", d._prepare,  # type: ignore[method-assign]
                            lambda _seq, batches: _records(batches))
        d._commit = _timed(log, "commit", d._commit,  # type: ignore[method-assign]
                           lambda p: p.records)
    return log


def _thread_cpu() -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for tid in Path("/proc/self/task").iterdir():
        try:
            name = (tid / "comm").read_text().strip()
            out[name] += int((tid / "schedstat").read_text().split()[0]) / 1e9
        except FileNotFoundError:
            continue
    return out


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


def measure(mode: str, rates: list[int], seconds: float, settings: dict[str, int],
            serial_below: int | None) -> None:
    cfg = DispatchBenchConfig()
    load = _Load(cfg, int(max(rates) * seconds * 1.05) + 1)
    root = Path(tempfile.mkdtemp(prefix="dispatch-rounds-"))
    try:
        with server_gc():
            store = _open(root / mode, cfg, mode, **settings)
            if serial_below is not None and isinstance(store.dispatcher, ConcurrentDispatcher):
                store.dispatcher.serial_below = serial_below
            try:
                paced = _Paced(store, load)
                paced.run(min(rates), 1.0)
                log = _instrument(store)
                for rate in rates:
                    log.rounds.clear()
                    log.wakes.clear()
                    sent0 = paced.sent
                    cpu0 = _thread_cpu()
                    achieved, lags = paced.run(rate, seconds)
                    cpu1 = _thread_cpu()
                    _report(mode, rate, achieved, lags, log, paced.sent - sent0,
                            {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1})
            finally:
                store.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _report(mode: str, rate: int, achieved: float, lags: np.ndarray, log: _Log,
            sent: int, cpu: dict[str, float]) -> None:
    print(f"{mode} at {rate:,}/s: achieved {achieved:,.0f}/s, lag p50 {_pct(lags, 50):.3f} "
          f"p99 {_pct(lags, 99):.3f} max {_pct(lags, 100):.3f} ms")
    per_thread = "  ".join(f"{name} {seconds * 1e6 / sent:.1f}"
                           for name, seconds in sorted(cpu.items()) if seconds > 0.001)
    print(f"  CPU µs a message by thread: {per_thread}")
    kinds = sorted({r[0] for r in log.rounds})
    for kind in kinds:
        rows = [r for r in log.rounds if r[0] == kind]
        n = [float(r[1]) for r in rows]
        wall = [r[2] * 1000 for r in rows]
        cpu_ms = [r[3] * 1000 for r in rows]
        wait = [w - c for w, c in zip(wall, cpu_ms, strict=True)]
        per_rec = sum(r[3] for r in rows) * 1e6 / max(1, sum(r[1] for r in rows))
        print(f"  {kind:8} {len(rows):6} rounds  records p50 {_pct(n, 50):6.0f} p90 "
              f"{_pct(n, 90):6.0f} max {max(n):6.0f} | wall ms p50 {_pct(wall, 50):6.2f} "
              f"p99 {_pct(wall, 99):7.2f} max {max(wall):7.2f} | not on CPU ms p50 "
              f"{_pct(wait, 50):6.2f} p99 {_pct(wait, 99):7.2f} | CPU µs a record "
              f"{per_rec:6.1f}")
    w = [x * 1000 for x in log.wakes]
    print(f"  wake-ups {len(w)}: append to running ms p50 {_pct(w, 50):.2f} p90 "
          f"{_pct(w, 90):.2f} p99 {_pct(w, 99):.2f} max {max(w, default=0):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="8000,12000,16000")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=N",
                        help="a StoreConfig setting, e.g. dispatch_round_records=512")
    parser.add_argument("--serial-below", type=int, default=None,
                        help="the concurrent dispatcher's serial_below")
    ns = parser.parse_args()
    rates = [int(r) for r in ns.rates.split(",")]
    settings = {k: int(v) for k, v in (item.split("=", 1) for item in ns.set)}
    for mode in ns.modes.split(","):
        measure(mode, rates, ns.seconds, settings, ns.serial_below)


if __name__ == "__main__":
    main()
