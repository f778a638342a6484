"""Counting and sampling for the broker benchmarks.

The load loops touch a :class:`Meter` once per operation (a count and one latency float in
an ``array``); a :class:`Sampler` turns it into one row per interval with latency
percentiles and the CPU use of this process (``process_time``: all threads, 100 % is one
core) and of the broker process (``/proc``), so a reader sees which side saturates.

Row fields: ``t`` (seconds since start, at the row's end), ``seconds``, ``msgs``,
``msgs_per_s``, ``p50_ms``/``p99_ms``/``p999_ms`` (``None`` without samples),
``client_cpu_pct``, ``broker_cpu_pct`` (``None`` when the broker is not ours),
``replica_cpu_pct`` (``None`` without a replica process of ours), ``errors``.
The summary adds CPU microseconds per message of each process, the figure to compare on a
machine shared with other work, and for a broker process of ours its CPU per message
split into user and kernel time and by thread (``broker_user_us_per_msg``,
``broker_sys_us_per_msg``, ``broker_threads``: :func:`~tidemq.bench.process.thread_cpu_split`),
and the bytes it wrote to disk a message (``broker_disk_bytes_per_msg``:
:func:`~tidemq.bench.process.process_write_bytes`).
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tidemq.bench.process import (
    ThreadCpu,
    process_cpu_seconds,
    process_write_bytes,
    thread_cpu_seconds,
    thread_cpu_split,
)

__all__ = ["Meter", "Report", "Sampler", "measure", "percentiles_ms"]

Report = Callable[[dict[str, Any]], None]


class Meter:
    """What the load loops touch per operation: a count and one latency (seconds)."""

    __slots__ = ("count", "errors", "last_error", "latencies")

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.last_error = ""
        self.latencies = array("d")

    def fail(self, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = str(exc)


def percentiles_ms(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p99/p999 in milliseconds of latencies in seconds (``None`` without values)."""
    if len(values) == 0:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None}
    p = np.percentile(np.asarray(values), [50, 99, 99.9]) * 1000
    return {"p50_ms": float(p[0]), "p99_ms": float(p[1]), "p999_ms": float(p[2])}


class Sampler:
    """Rows from a :class:`Meter` (module docstring); :meth:`summary` after warm-up."""

    def __init__(self, meter: Meter, broker_pid: int | None,
                 replica_pid: int | None = None) -> None:
        self.meter = meter
        self.broker_pid = broker_pid
        self.replica_pid = replica_pid
        self.t0 = time.perf_counter()
        self._last = (self.t0, time.process_time(), self._broker_cpu(), self._replica_cpu(),
                      0, 0, 0)
        self.rows: list[dict[str, Any]] = []
        self._spans: list[tuple[int, int]] = []  # latency index range of each row
        #: The broker's threads' CPU when sampling began, then at the end of each row.
        self._threads: list[ThreadCpu] = [self._broker_threads()]
        #: ... and the bytes it had written to disk then.
        self._written: list[int | None] = [self._broker_written()]

    def _broker_written(self) -> int | None:
        return process_write_bytes(self.broker_pid) if self.broker_pid else None

    def _broker_threads(self) -> ThreadCpu:
        return thread_cpu_seconds(self.broker_pid) if self.broker_pid else {}

    def _broker_cpu(self) -> float | None:
        return process_cpu_seconds(self.broker_pid) if self.broker_pid else None

    def _replica_cpu(self) -> float | None:
        return process_cpu_seconds(self.replica_pid) if self.replica_pid else None

    def tick(self) -> dict[str, Any]:
        now, cpu, bcpu = time.perf_counter(), time.process_time(), self._broker_cpu()
        rcpu = self._replica_cpu()
        meter = self.meter
        count, lat_end, errors = meter.count, len(meter.latencies), meter.errors
        t, c, b, r, last_count, lat_start, last_errors = self._last
        dt = now - t
        row: dict[str, Any] = {
            "t": round(now - self.t0, 3), "seconds": dt, "msgs": count - last_count,
            "msgs_per_s": (count - last_count) / dt,
            **percentiles_ms(meter.latencies[lat_start:lat_end]),
            "client_cpu_pct": 100 * (cpu - c) / dt,
            "broker_cpu_pct": None if bcpu is None or b is None else 100 * (bcpu - b) / dt,
            "replica_cpu_pct": None if rcpu is None or r is None else 100 * (rcpu - r) / dt,
            "errors": errors - last_errors,
        }
        self._last = (now, cpu, bcpu, rcpu, count, lat_end, errors)
        self.rows.append(row)
        self._spans.append((lat_start, lat_end))
        self._threads.append(self._broker_threads())
        self._written.append(self._broker_written())
        return row

    def summary(self, warmup: float) -> dict[str, Any]:
        """Totals over the rows that started after ``warmup`` seconds (else the last)."""
        keep = [i for i, r in enumerate(self.rows) if r["t"] - r["seconds"] >= warmup - 0.05]
        if not keep and self.rows:
            keep = [len(self.rows) - 1]
        if not keep:
            return {}
        rows = [self.rows[i] for i in keep]
        seconds = sum(r["seconds"] for r in rows)
        msgs = sum(r["msgs"] for r in rows)
        lat = self.meter.latencies[self._spans[keep[0]][0]:self._spans[keep[-1]][1]]
        rates = sorted(r["msgs_per_s"] for r in rows)
        split = thread_cpu_split(self._threads[keep[0]], self._threads[keep[-1] + 1], seconds,
                                 msgs)
        threads = {"broker_user_us_per_msg": split["user_ns_per_msg"] / 1000,
                   "broker_sys_us_per_msg": split["sys_ns_per_msg"] / 1000,
                   "broker_threads": split["threads"]} if split["threads"] else {}
        w0, w1 = self._written[keep[0]], self._written[keep[-1] + 1]
        if w0 is not None and w1 is not None and msgs:
            threads["broker_disk_bytes_per_msg"] = (w1 - w0) / msgs
        return {"seconds": seconds, "msgs": msgs, "msgs_per_s": msgs / seconds,
                "median_msgs_per_s": rates[len(rates) // 2], **percentiles_ms(lat),
                "client_cpu_pct": _mean(r["client_cpu_pct"] for r in rows),
                "broker_cpu_pct": _mean(r["broker_cpu_pct"] for r in rows),
                "client_cpu_us_per_msg": _cpu_per_msg(rows, "client_cpu_pct", msgs),
                "broker_cpu_us_per_msg": _cpu_per_msg(rows, "broker_cpu_pct", msgs),
                "replica_cpu_pct": _mean(r["replica_cpu_pct"] for r in rows),
                "replica_cpu_us_per_msg": _cpu_per_msg(rows, "replica_cpu_pct", msgs),
                "errors": sum(r["errors"] for r in rows),
                "last_error": self.meter.last_error or None, **threads}


def _cpu_per_msg(rows: list[dict[str, Any]], key: str, msgs: int) -> float | None:
    """CPU microseconds per message: steadier than rates on a shared machine, where a
    process waiting for a core gets neither CPU time nor messages done."""
    if not msgs or any(r[key] is None for r in rows):
        return None
    return float(sum(r[key] * r["seconds"] for r in rows) / 100 / msgs * 1e6)


def _mean(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


async def measure(sampler: Sampler, duration: float, report: Report | None,
                  done: asyncio.Future[None] | None = None) -> None:
    """Tick ``sampler`` every second for ``duration`` seconds, or until ``done``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + duration
    while (now := loop.time()) < end - 1e-3:
        wait = min(1.0, end - now)
        if done is not None:
            await asyncio.wait([done], timeout=wait)
        else:
            await asyncio.sleep(wait)
        row = sampler.tick()
        if report is not None:
            report(row)
        if done is not None and done.done():
            return
