"""``tidemq bench dispatch``: the serial against the concurrent dispatcher, in-process.

The load saturates the serial dispatcher: ``put_multi_dispatch`` over ``queues`` classic
queues, each message fanned out to ``fanout`` of ``lmqs`` light message queues (RIP-28),
with its UNIQ_KEY indexed. Both dispatchers are measured in one run, alternating, each
on a fresh store directory; every figure is the median of ``repeat`` runs. The store runs
under a broker's collector settings (:mod:`tidemq.broker.gc_settings`), the pre-built
messages frozen out of its scans as a broker's start-up objects are.

=========  ===============================================================================
part       what is measured
=========  ===============================================================================
backlog    the dispatcher paused, ``messages`` appended, resumed: messages made visible
           per second until drained (consume-queue entries, LMQ entries, index keys).
sustained  one store per dispatcher and run, warmed up for a second at the lowest rate
           (the first round creates every queue's files), then a producer thread puts at
           each rate of ``rates`` in turn for ``seconds`` (paced per millisecond); each
           message's lag is the time from its put's call to the end of the round that
           made it visible (a round hook), both on the monotonic clock in ns, so lag
           p50/p99 per rate is over every message, not samples of the millisecond store
           clock. The highest sustained rate is the highest one whose lag p99 is at most
           ``max_lag_ms`` and whose producer kept up (>= 95 % of the rate); the ladder
           stops after two rates in a row that are not sustained. Each rate also
           reports the garbage collections it saw per generation and the longest (the
           process stops for one).
gil        which calls of the dispatch path release the GIL: a spinning Python thread's
           progress during one call (30-1000 ms), over its progress in an idle window of
           the same length right after, median of 5 (about 1: released; about 0.5: Python
           code sharing the GIL; about 0: the call holds the GIL throughout).
=========  ===============================================================================
"""

from __future__ import annotations

import dataclasses
import gc
import mmap
import random
import shutil
import statistics
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from tidemq.broker.gc_settings import server_gc
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import encode_properties
from tidemq.store.config import StoreConfig
from tidemq.store.consume_queue import CQ_DTYPE
from tidemq.store.message_store import MessageInput, MessageStore

__all__ = ["LOAD_MESSAGES", "MODES", "RATES", "DispatchBenchConfig", "gil_release_probe",
           "run_dispatch_bench"]

MODES = ("serial", "concurrent")
#: The produce rates of the sustained part, msg/s: on past the highest rate either
#: dispatcher has sustained on a quiet 2-core host, so that both dispatchers' highest
#: sustained rates fall inside the ladder (it stops after two rates not sustained).
#: From 20,000 on the rungs are 5,000 apart: where the highest sustained rates fall
#: (30,000-60,000), a rung is about a tenth of the rate, and so is the ratio's step.
RATES = (2000, 4000, 8000, 12000, 16000, *range(20000, 80001, 5000))
#: Pre-built messages at most: a ladder's higher rates put them again (their keys
#: repeat; what dispatching one costs does not change).
LOAD_MESSAGES = 150_000
KEEP_UP = 0.95  # the producer must reach this share of the target rate

Report = Callable[[str], None]


@dataclasses.dataclass(slots=True)
class DispatchBenchConfig:
    messages: int = 100_000  # backlog size
    queues: int = 64
    fanout: int = 10
    lmqs: int = 1000
    body_size: int = 128
    rates: tuple[int, ...] = RATES
    seconds: float = 3.0
    warmup: float = 1.0  # seconds at the lowest rate before the measured ladder
    max_lag_ms: float = 100.0
    repeat: int = 3
    workers: int | None = None  # None: the StoreConfig defaults
    ring_size: int | None = None
    round_records: int | None = None
    sweep: bool = False  # also time the backlog over a grid of concurrent settings
    gil: bool = True
    directory: str | None = None
    segment_size: int = 256 * 1024 * 1024


class _Load:
    """Pre-built messages (the per-message client work is not what is measured)."""

    def __init__(self, cfg: DispatchBenchConfig, count: int, seed: int = 1) -> None:
        rng = random.Random(seed)
        pool = [f"%LMQ%bench{i}" for i in range(cfg.lmqs)]
        body = b"x" * cfg.body_size
        tag = tags_code("bench")
        self.items: list[tuple[MessageInput, list[str]]] = []
        for i in range(count):
            names = rng.sample(pool, cfg.fanout)
            key = f"K{seed:03d}{i:012d}"
            props = encode_properties({"TAGS": "bench", "UNIQ_KEY": key,
                                       "INNER_MULTI_DISPATCH": ",".join(names)})
            self.items.append((MessageInput(body, props, tags_code=tag, keys=(key,)), names))
        self.queues = cfg.queues

    def put(self, store: MessageStore, start: int, count: int,
            stamps: list[int] | None = None) -> None:
        """Put messages ``start`` to ``start + count``; with ``stamps``, each one's
        monotonic time (ns) right before its put is appended to it."""
        items, queues, put = self.items, self.queues, store.put_multi_dispatch
        n = len(items)
        if stamps is None:
            for i in range(start, start + count):
                msg, names = items[i % n]
                put("bench", i % queues, msg, names)
            return
        stamp, now = stamps.append, time.perf_counter_ns
        for i in range(start, start + count):
            msg, names = items[i % n]
            stamp(now())
            put("bench", i % queues, msg, names)


def _open(root: Path, cfg: DispatchBenchConfig, mode: str, **settings: int) -> MessageStore:
    extra = {k: v for k, v in (("dispatch_workers", cfg.workers),
                               ("dispatch_ring_size", cfg.ring_size),
                               ("dispatch_round_records", cfg.round_records))
             if v is not None}
    extra.update(settings)
    config = StoreConfig(store_path_root_dir=str(root),
                         mapped_file_size_commit_log=cfg.segment_size,
                         enable_lmq=True, enable_multi_dispatch=True,
                         enable_build_consume_queue_concurrently=mode == "concurrent",
                         dispatch_lag_warn_ms=0).replace(**extra)
    store = MessageStore(config)
    store.start()
    return store


def _backlog(root: Path, cfg: DispatchBenchConfig, mode: str, load: _Load,
             **settings: int) -> dict[str, Any]:
    store = _open(root, cfg, mode, **settings)
    try:
        assert store.dispatcher is not None
        store.dispatcher.pause()
        t0 = time.perf_counter()
        load.put(store, 0, cfg.messages)
        produce = time.perf_counter() - t0
        t0, cpu0 = time.perf_counter(), time.process_time()
        store.dispatcher.resume()
        if not store.wait_dispatched(600):
            raise RuntimeError(f"{mode} dispatch did not drain ({store.status})")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return {"messages": cfg.messages, "seconds": seconds, "cpu_seconds": cpu,
            "msgs_per_s": cfg.messages / seconds,
            "msgs_per_cpu_s": cfg.messages / cpu if cpu else 0.0,
            "lmq_entries_per_s": cfg.messages * cfg.fanout / seconds,
            "produce_msgs_per_s": cfg.messages / produce}


class _Collections:
    """The garbage collections while entered: how many of each generation, and the
    longest in seconds."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.longest = 0.0
        self._started = 0.0

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.counts[info["generation"]] += 1
        self.longest = max(self.longest, time.perf_counter() - self._started)

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._observe)


class _Visible:
    """When the store's messages became visible: once a dispatch round, the records
    dispatched so far and the monotonic time (ns), from a round hook (a broker's
    long-poll wake-ups are one too); rounds are applied one at a time, in log order."""

    def __init__(self, store: MessageStore) -> None:
        dispatcher = store.dispatcher
        assert dispatcher is not None
        self.rounds: list[tuple[int, int]] = []
        self._awaited = 0
        self._reached = threading.Event()
        seen, now = self.rounds.append, time.perf_counter_ns

        def hook(_touched: object) -> None:
            records = dispatcher.dispatched_entries
            seen((records, now()))
            if records >= self._awaited:
                self._reached.set()

        store.add_dispatch_round_hook(hook)

    def wait(self, records: int, timeout: float) -> bool:
        """Wait until the hook saw ``records`` records visible: a dispatcher's drain
        returns once the position moved, before the round's hooks ran."""
        self._reached.clear()
        self._awaited = records
        if self.rounds and self.rounds[-1][0] >= records:
            return True
        return self._reached.wait(timeout)

    def lags_ms(self, stamps: Sequence[int], first: int, last: int) -> np.ndarray:
        """The lag (ms) of the store's messages ``first`` to ``last`` (numbered from 0 in
        put order, one record each), put at ``stamps[i]`` (ns): the time to the end of
        the first round after which more than ``i`` records were visible."""
        rounds = np.array(self.rounds, dtype=np.int64).reshape(-1, 2)
        return message_lags_ms(np.asarray(stamps[first:last], dtype=np.int64), first,
                               rounds[:, 0], rounds[:, 1])


def message_lags_ms(put_ns: np.ndarray, first: int, visible_records: np.ndarray,
                    visible_ns: np.ndarray) -> np.ndarray:
    """Each message's lag in ms: message ``first + i``, put at ``put_ns[i]``, is visible
    at the first ``visible_ns[j]`` whose ``visible_records[j]`` (records visible then,
    never decreasing) exceeds its number."""
    numbers = np.arange(first, first + len(put_ns), dtype=np.int64)
    at = np.searchsorted(visible_records, numbers, side="right")
    if len(put_ns) and (not len(visible_records) or at[-1] >= len(visible_records)):
        raise ValueError(f"message {first + len(put_ns) - 1} was never visible")
    lags: np.ndarray = (visible_ns[at] - put_ns) / 1e6
    return lags


class _Paced:
    """A store under a paced producer: ``run(rate, seconds)`` puts ``rate`` messages a
    second (the due ones every millisecond), each one's lag measured (:class:`_Visible`)."""

    def __init__(self, store: MessageStore, load: _Load) -> None:
        self.store = store
        self.load = load
        self.sent = 0
        self.stamps: list[int] = []  # each message's put time, ns, in put order
        self.visible = _Visible(store)

    def run(self, rate: int, seconds: float) -> tuple[float, np.ndarray]:
        """Returns the achieved rate and the lag of each message put (ms)."""
        store, stamps = self.store, self.stamps
        first = self.sent
        t0 = time.perf_counter()
        while (now := time.perf_counter()) < t0 + seconds:
            due = first + int((now - t0) * rate) - self.sent
            if due > 0:
                self.load.put(store, self.sent, due, stamps)
                self.sent += due
            else:
                time.sleep(0.001)
        elapsed = time.perf_counter() - t0
        if not store.wait_dispatched(600) or not self.visible.wait(self.sent, 60):
            raise RuntimeError(f"dispatch did not drain ({store.status})")
        return (self.sent - first) / elapsed, self.visible.lags_ms(stamps, first, self.sent)


def _ladder(root: Path, cfg: DispatchBenchConfig, mode: str, load: _Load,
            say: Report, label: str) -> list[dict[str, Any]]:
    """One store, warmed up (its queue and index files created and touched at the lowest
    rate for a second, unmeasured), then every rate in turn until two in a row are not
    sustained."""
    store = _open(root, cfg, mode)
    out: list[dict[str, Any]] = []
    try:
        paced = _Paced(store, load)
        paced.run(min(cfg.rates), cfg.warmup)
        failed = 0
        for rate in cfg.rates:
            if failed >= 2:  # the ceiling is found
                break
            with _Collections() as collections:
                achieved, lags = paced.run(rate, cfg.seconds)
            p50, p99 = np.percentile(lags, [50, 99]).tolist() if len(lags) else [0.0, 0.0]
            run = {"rate": rate, "achieved_msgs_per_s": achieved, "lag_p50_ms": p50,
                   "lag_p99_ms": p99, "lag_max_ms": float(lags.max()) if len(lags) else 0.0,
                   "messages": len(lags),
                   "sustained": p99 <= cfg.max_lag_ms and achieved >= KEEP_UP * rate,
                   "gc_collections": collections.counts,
                   "gc_longest_ms": collections.longest * 1000}
            out.append(run)
            failed = 0 if run["sustained"] else failed + 1
            n0, n1, n2 = collections.counts
            say(f"rate {mode:>10} {label}: {rate:>7,}/s  achieved {achieved:>8,.0f}/s  lag p50 "
                f"{p50:7.3f} p99 {p99:8.3f} ms  {'ok' if run['sustained'] else '--'}  "
                f"(gc {n0}/{n1}/{n2}, longest {collections.longest * 1000:.0f} ms)")
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return out


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def run_dispatch_bench(cfg: DispatchBenchConfig, report: Report | None = None
                       ) -> dict[str, Any]:
    """Run every part ``cfg.repeat`` times, serial and concurrent alternating; returns the
    runs and their medians (module docstring)."""
    say = report or (lambda _line: None)
    base = Path(cfg.directory) if cfg.directory else Path(tempfile.mkdtemp(
        prefix="tidemq-bench-dispatch-"))
    base.mkdir(parents=True, exist_ok=True)
    per_rate = int(max(cfg.rates, default=0) * cfg.seconds * 1.05) + 1
    load = _Load(cfg, max(cfg.messages, min(per_rate, LOAD_MESSAGES)))
    results: dict[str, Any] = {"config": dataclasses.asdict(cfg)}
    try:
        with server_gc():  # the load frozen, as a broker's start-up objects
            results["backlog"] = _run_backlog(base, cfg, load, say)
            results["sustained"] = _run_sustained(base, cfg, load, say)
            if cfg.sweep:
                results["sweep"] = _run_sweep(base, cfg, load, say)
    finally:
        if not cfg.directory:
            shutil.rmtree(base, ignore_errors=True)
    if cfg.gil:
        results["gil"] = gil_release_probe()
    return results


def _run_backlog(base: Path, cfg: DispatchBenchConfig, load: _Load,
                 say: Report) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for r in range(cfg.repeat):
        for mode in MODES:
            run = _backlog(base / f"backlog-{mode}-{r}", cfg, mode, load)
            runs[mode].append(run)
            say(f"backlog {mode:>10} run {r + 1}: {run['msgs_per_s']:>9,.0f} msg/s "
                f"({run['lmq_entries_per_s']:,.0f} LMQ entries/s, {run['seconds']:.2f} s; "
                f"{run['msgs_per_cpu_s']:,.0f} msg per CPU-second)")
    out: dict[str, Any] = {m: {"runs": runs[m],
                               "median_msgs_per_s": _median([x["msgs_per_s"]
                                                             for x in runs[m]]),
                               "median_msgs_per_cpu_s": _median([x["msgs_per_cpu_s"]
                                                                 for x in runs[m]])}
                           for m in MODES}
    pairs = list(zip(runs["serial"], runs["concurrent"], strict=True))
    out["median_ratio"] = _median([c["msgs_per_s"] / s["msgs_per_s"] for s, c in pairs])
    out["median_cpu_ratio"] = _median([c["msgs_per_cpu_s"] / s["msgs_per_cpu_s"]
                                       for s, c in pairs])
    return out


def _run_sustained(base: Path, cfg: DispatchBenchConfig, load: _Load,
                   say: Report) -> dict[str, Any]:
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {
        m: {rate: [] for rate in cfg.rates} for m in MODES}
    best: dict[str, list[int]] = {m: [] for m in MODES}
    for r in range(cfg.repeat):
        for mode in MODES:
            ladder = _ladder(base / f"rate-{mode}-{r}", cfg, mode, load, say, f"run {r + 1}")
            for run in ladder:
                runs[mode][run["rate"]].append(run)
            best[mode].append(max((x["rate"] for x in ladder if x["sustained"]), default=0))
    table = []
    for rate in cfg.rates:
        row: dict[str, Any] = {"rate": rate}
        for mode in MODES:
            got = runs[mode][rate]
            row[mode] = None if not got else {
                "runs": len(got),
                "lag_p50_ms": _median([x["lag_p50_ms"] for x in got]),
                "lag_p99_ms": _median([x["lag_p99_ms"] for x in got]),
                "achieved_msgs_per_s": _median([x["achieved_msgs_per_s"] for x in got]),
                "sustained_runs": sum(1 for x in got if x["sustained"]),
            }
        table.append(row)
    return {"table": table, "max_sustained": {m: _median(best[m]) for m in MODES},
            "max_sustained_runs": best, "runs": {m: {str(k): v for k, v in runs[m].items()}
                                                 for m in MODES}}


SWEEP = {"dispatch_workers": (1, 2, 4), "dispatch_round_records": (512, 2048, 8192),
         "dispatch_ring_size": (2, 8, 32)}


def _run_sweep(base: Path, cfg: DispatchBenchConfig, load: _Load,
               say: Report) -> list[dict[str, Any]]:
    """Backlog throughput of the concurrent dispatcher per setting, one knob at a time
    (the others at their defaults), each against a serial run measured right before."""
    rows = []
    for knob, values in SWEEP.items():
        for value in values:
            ratios, cpu_ratios, rates = [], [], []
            for r in range(cfg.repeat):
                serial = _backlog(base / f"sweep-s-{r}", cfg, "serial", load)
                conc = _backlog(base / f"sweep-c-{r}", cfg, "concurrent", load,
                                **{knob: value})
                ratios.append(conc["msgs_per_s"] / serial["msgs_per_s"])
                cpu_ratios.append(conc["msgs_per_cpu_s"] / serial["msgs_per_cpu_s"])
                rates.append(conc["msgs_per_s"])
            row = {"knob": knob, "value": value, "median_msgs_per_s": _median(rates),
                   "median_ratio": _median(ratios), "median_cpu_ratio": _median(cpu_ratios)}
            rows.append(row)
            say(f"sweep {knob}={value}: {row['median_msgs_per_s']:,.0f} msg/s, "
                f"{row['median_ratio']:.2f}x serial ({row['median_cpu_ratio']:.2f}x per "
                f"CPU-second)")
    return rows


# ---------------------------------------------------------------------- the GIL probe


class _Spinner:
    """A thread counting as fast as it can; :meth:`share` is its progress during one
    call over its progress in an idle window of the same length right after."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="bench-gil-spinner",
                                        daemon=True)

    def _spin(self) -> None:
        stop = self._stop
        while not stop.is_set():
            self.count += 1

    def __enter__(self) -> _Spinner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def share(self, call: Callable[[], object], tries: int = 5) -> float:
        shares = []
        for _ in range(tries):
            time.sleep(0.01)
            c0, t0 = self.count, time.perf_counter()
            call()
            c1, t1 = self.count, time.perf_counter()
            time.sleep(t1 - t0)
            c2, t2 = self.count, time.perf_counter()
            busy = (c1 - c0) / (t1 - t0)
            idle = (c2 - c1) / (t2 - t1)
            shares.append(busy / idle if idle else 0.0)
        return float(statistics.median(shares))


def gil_release_probe() -> dict[str, float]:
    """The GIL share of each call on the dispatch path (module docstring)."""
    out: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="tidemq-gil-"))
    try:
        with _Spinner() as spinner:
            _probe_rocksdb(tmp, spinner, out)
            _probe_numpy(tmp, spinner, out)
            out["time.sleep (control: released)"] = spinner.share(lambda: time.sleep(0.05))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _probe_rocksdb(tmp: Path, spinner: _Spinner, out: dict[str, float]) -> None:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    db = Rdict(str(tmp / "db"), opts)
    wo = WriteOptions()
    wo.disable_wal = True  # type: ignore[method-assign,assignment]  # a property at runtime
    db.set_write_options(wo)
    entry, offset = struct.Struct(">qiqq"), struct.Struct(">q")
    counter = [0]
    puts = 50_000

    def build() -> WriteBatch:
        wb = WriteBatch(raw_mode=True)
        base = counter[0]
        counter[0] += puts
        value = entry.pack(1, 2, 3, 4)
        for k in range(puts):
            wb.put(b"E%LMQ%bench" + str(k % 1000).encode() + b"\x00" + offset.pack(base + k),
                   value)
        return wb

    ready = [build() for _ in range(5)]
    out["WriteBatch.put x 50k (Python loop)"] = spinner.share(build)
    out["Rdict.write of 50k puts"] = spinner.share(lambda: db.write(ready.pop()))

    def write_and_flush() -> None:
        db.flush()

    for wb in [build() for _ in range(5)]:
        db.write(wb)
    out["Rdict.flush (memtable to disk)"] = spinner.share(write_and_flush, tries=1)
    db.close()


def _probe_numpy(tmp: Path, spinner: _Spinner, out: dict[str, float]) -> None:
    n = 5_000_000
    column = np.arange(n, dtype=np.int64)
    entries = np.empty(n, dtype=CQ_DTYPE)
    ints = list(range(2_000_000))
    out["np.asarray(list of 2M ints)"] = spinner.share(
        lambda: np.asarray(ints, dtype=np.int64))
    out["numpy column copy into CQ entries (5M)"] = spinner.share(
        lambda: entries.__setitem__("phys", column))
    out["ndarray.tobytes (100 MB)"] = spinner.share(entries.tobytes)
    data = entries.tobytes()
    with open(tmp / "map", "w+b") as f:
        f.truncate(len(data))
        mm = mmap.mmap(f.fileno(), len(data))
        try:
            out["mmap slice write (100 MB)"] = spinner.share(
                lambda: mm.__setitem__(slice(0, len(data)), data))
        finally:
            mm.close()
