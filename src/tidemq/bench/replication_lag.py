"""How far behind a benchmark's replica is, in time, while the load runs.

:class:`ReplicationLagSampler` asks the master for its runtime info every ``interval``
seconds and keeps the age of the oldest record its furthest replica lacks
(``haReplicaStatus``'s ``lagMs``; 0 when the replica holds everything). Its summary is
the p50, p99 and largest of those samples after the warm-up: issue #25's "replication
lag p99 at 50 % of the single broker's throughput".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from tidemq.bench.meter import percentiles_ms
from tidemq.client import AdminClient, ClientConfig
from tidemq.errors import TideMQError

__all__ = ["ReplicationLagSampler"]


class ReplicationLagSampler:
    def __init__(self, namesrv: str, master: str, interval: float = 0.02) -> None:
        self.namesrv = namesrv
        self.master = master
        self.interval = interval
        self.started = time.monotonic()
        #: ``(monotonic time, lag ms)`` per answered sample.
        self.samples: list[tuple[float, int]] = []

    async def run(self, running: list[bool]) -> None:
        config = ClientConfig(namesrv_addr=(self.namesrv,), request_timeout=2.0)
        async with AdminClient(config=config) as admin:
            self.started = time.monotonic()
            while running[0]:
                with contextlib.suppress(TideMQError, ValueError):
                    status = await admin.broker_status(self.master)
                    rows = json.loads(status.get("haReplicaStatus", "[]"))
                    lags = [int(r["lagMs"]) for r in rows if int(r["lagMs"]) >= 0]
                    if lags:
                        self.samples.append((time.monotonic(), max(lags)))
                await asyncio.sleep(self.interval)

    def summary(self, warmup: float) -> dict[str, Any]:
        lags = [lag / 1000 for t, lag in self.samples if t - self.started >= warmup]
        return {"samples": len(lags), **percentiles_ms(lags),
                "max_ms": max(lags) * 1000 if lags else None}
