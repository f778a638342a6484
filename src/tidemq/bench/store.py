"""``tidemq bench store``: the store's own throughput, one process, no network.

Workloads (128-byte bodies by default), each on a fresh store directory. Each run also
reports ``cpu_us``: CPU time of the whole process (every thread) per message over the
timed span, the figure to compare on a shared, noisy machine.

* ``append``: single-record ``put`` calls.
* ``append_batch``: ``put_batch`` calls of ``batch`` records (one lock per batch).
* ``dispatch``: a backlog of single-record puts over ``queues`` queues, dispatcher paused,
  then the time to build every consume-queue entry.
* ``read``: sequential ``get`` of ``read_batch`` messages at a time over one queue, written
  by the same process (nothing to check for damage); ``read_passes`` passes over it, the
  median pass reported (one pass of a few hundred thousand messages is tens of
  milliseconds, too short to time alone on a busy machine).
* ``sync_flush``: ``appenders`` threads each doing put + wait for SYNC_FLUSH durability.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.types import FlushDiskType

__all__ = ["StoreBenchConfig", "run_store_bench"]


@dataclasses.dataclass(slots=True)
class StoreBenchConfig:
    body_size: int = 128
    messages: int = 1_000_000
    batch: int = 100
    queues: int = 8
    read_batch: int = 1000
    read_passes: int = 5
    appenders: int = 64
    sync_seconds: float = 3.0
    segment_size: int = 1024 * 1024 * 1024
    directory: str | None = None
    repeat: int = 3


Report = Callable[[str, dict[str, Any]], None]


def _store(root: Path, cfg: StoreBenchConfig, **changes: Any) -> MessageStore:
    config = StoreConfig(store_path_root_dir=str(root),
                         mapped_file_size_commit_log=cfg.segment_size,
                         message_index_enable=False, **changes)
    store = MessageStore(config)
    store.start()
    return store


def _append(root: Path, cfg: StoreBenchConfig) -> dict[str, Any]:
    store = _store(root, cfg)
    msg = MessageInput(b"x" * cfg.body_size, b"TAGS\x01bench\x02", tags_code=1)
    n, queues = cfg.messages, cfg.queues
    put = store.put
    c0, t0 = time.process_time(), time.perf_counter()
    for i in range(n):
        put("bench", i % queues, msg)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.shutdown()
    return {"messages": n, "seconds": dt, "msgs_per_s": n / dt, "cpu_us": cpu / n * 1e6}


def _append_batch(root: Path, cfg: StoreBenchConfig) -> dict[str, Any]:
    store = _store(root, cfg)
    msgs = [MessageInput(b"x" * cfg.body_size, b"TAGS\x01bench\x02", tags_code=1)] * cfg.batch
    calls, queues = cfg.messages // cfg.batch, cfg.queues
    put_batch = store.put_batch
    c0, t0 = time.process_time(), time.perf_counter()
    for i in range(calls):
        put_batch("bench", i % queues, msgs)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.shutdown()
    n = calls * cfg.batch
    return {"messages": n, "batch": cfg.batch, "seconds": dt, "msgs_per_s": n / dt,
            "cpu_us": cpu / n * 1e6}


def _dispatch(root: Path, cfg: StoreBenchConfig) -> dict[str, Any]:
    store = _store(root, cfg)
    assert store.dispatcher is not None
    store.dispatcher.pause()  # build a backlog, then time the dispatcher alone
    msg = MessageInput(b"x" * cfg.body_size, b"TAGS\x01bench\x02", tags_code=1)
    n = cfg.messages
    for i in range(n):
        store.put("bench", i % cfg.queues, msg)
    dispatcher = store.dispatcher
    c0, t0 = time.process_time(), time.perf_counter()
    dispatcher.resume()
    dispatcher.drain(timeout=600)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.shutdown()
    return {"entries": n, "queues": cfg.queues, "seconds": dt, "entries_per_s": n / dt,
            "cpu_us": cpu / n * 1e6}


def _read(root: Path, cfg: StoreBenchConfig) -> dict[str, Any]:
    store = _store(root, cfg)
    msgs = [MessageInput(b"x" * cfg.body_size, b"TAGS\x01bench\x02", tags_code=1)] * 1000
    for _ in range(cfg.messages // 1000):
        store.put_batch("bench", 0, msgs)
    store.wait_dispatched(600)
    total = store.max_offset("bench", 0)
    passes: list[tuple[float, float]] = []  # (seconds, CPU seconds) of each pass
    for _ in range(cfg.read_passes):
        c0, t0 = time.process_time(), time.perf_counter()
        offset = count = nbytes = 0
        while offset < total:
            res = store.get("bench", 0, offset, cfg.read_batch, 64 * 1024 * 1024)
            count += res.message_count
            nbytes += sum(len(b) for b in res.buffers)
            offset = res.next_begin_offset
        passes.append((time.perf_counter() - t0, time.process_time() - c0))
    store.shutdown()
    dt, cpu = sorted(passes)[len(passes) // 2]
    return {"messages": count, "bytes": nbytes, "passes": len(passes), "seconds": dt,
            "msgs_per_s": count / dt, "cpu_us": cpu / max(1, count) * 1e6}


def _sync_flush(root: Path, cfg: StoreBenchConfig) -> dict[str, Any]:
    store = _store(root, cfg, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    msg = MessageInput(b"x" * cfg.body_size)
    stop = time.perf_counter() + cfg.sync_seconds
    acked = [0] * cfg.appenders
    latencies: list[float] = []

    def worker(k: int) -> None:
        local: list[float] = []
        while time.perf_counter() < stop:
            t = time.perf_counter()
            store.put("bench", k % cfg.queues, msg).wait_durable()
            local.append(time.perf_counter() - t)
            acked[k] += 1
        latencies.extend(local)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(cfg.appenders)]
    c0, t0 = time.process_time(), time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert store.flusher is not None
    flushes = store.flusher.flush_count
    store.shutdown()
    latencies.sort()
    n = sum(acked)

    def pct(p: float) -> float:
        if not latencies:
            return 0.0
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"acked": n, "appenders": cfg.appenders, "seconds": dt, "msgs_per_s": n / dt,
            "fsyncs": flushes, "p50_ms": pct(0.5), "p99_ms": pct(0.99),
            "cpu_us": cpu / max(1, n) * 1e6}


WORKLOADS: dict[str, Callable[[Path, StoreBenchConfig], dict[str, Any]]] = {
    "append": _append,
    "append_batch": _append_batch,
    "dispatch": _dispatch,
    "read": _read,
    "sync_flush": _sync_flush,
}


def run_store_bench(cfg: StoreBenchConfig, workloads: list[str] | None = None,
                    report: Report | None = None) -> dict[str, Any]:
    """Run each workload ``cfg.repeat`` times; returns runs and medians per workload."""
    results: dict[str, Any] = {}
    base = Path(cfg.directory) if cfg.directory else Path(tempfile.mkdtemp(prefix="tidemq-bench-"))
    try:
        for name in workloads or list(WORKLOADS):
            runs = []
            for r in range(cfg.repeat):
                root = base / f"{name}-{r}"
                runs.append(WORKLOADS[name](root, cfg))
                shutil.rmtree(root, ignore_errors=True)
                if report is not None:
                    report(name, runs[-1])
            key = "entries_per_s" if name == "dispatch" else "msgs_per_s"
            rates = sorted(run[key] for run in runs)
            results[name] = {"runs": runs, "median_" + key: rates[len(rates) // 2]}
    finally:
        if not cfg.directory:
            shutil.rmtree(base, ignore_errors=True)
    return results
