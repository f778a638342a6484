"""``tidemq bench migration``: a logical queue migrating under load (RIP-21).

An in-process cluster of three brokers; a logical topic with ``queues`` logical queues;
``producers`` senders keep ``in_flight`` sends each going to one logical queue while a
consumer reads it. After a warm-up, MigrateLogicalQueue moves the queue to another
broker. Reported:

* ``migrate_s``: the admin operation (plan, seal, commit) end to end;
* ``first_write_s``: from the start of the migration until the first send acknowledged
  with an offset in the new segment (the new segment accepting writes);
* produce and consume msgs/s per ``window`` before, during (the window containing the
  migration) and after -- the dip.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tidemq.client import AdminClient, Producer, PullConsumer
from tidemq.client.logical_admin import LogicalQueueAdmin
from tidemq.inprocess import Cluster
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue

__all__ = ["MigrationBenchConfig", "run_migration_bench"]


@dataclasses.dataclass
class MigrationBenchConfig:
    queues: int = 4
    warmup: float = 3.0
    after: float = 3.0
    window: float = 0.25
    in_flight: int = 16
    body_size: int = 128
    repeat: int = 3


async def _one(cfg: MigrationBenchConfig, root: Path) -> dict[str, Any]:
    topic = "BenchLQ"
    async with Cluster(root, brokers=3) as cluster:
        admin = AdminClient(cluster.namesrv_addr)
        await admin.start()
        lqa = LogicalQueueAdmin(admin)
        mapping = await lqa.create(topic, cfg.queues, ["broker-a", "broker-b"])
        for _ in range(300):
            try:
                r = await admin.topic_route(topic)
                if r.queue_datas and r.queue_datas[0].broker_name == LOGICAL_BROKER:
                    break
            except Exception:
                pass
            await asyncio.sleep(0.01)
        mq = MessageQueue(topic, LOGICAL_BROKER, 0)
        producer = Producer("bench-lq", cluster.namesrv_addr)
        await producer.start()
        consumer = PullConsumer("bench-lq-c", cluster.namesrv_addr)
        await consumer.start()
        consumer.assign([mq])
        consumer.seek(mq, 0)
        t0 = time.perf_counter()
        sends: list[tuple[float, int]] = []
        recvs: list[float] = []
        running = True
        migrating: dict[str, float] = {}
        body = b"x" * cfg.body_size

        async def send_loop() -> None:
            while running:
                res = await producer.send(Message(topic, body), queue=mq)
                sends.append((time.perf_counter() - t0, res.queue_offset))

        async def recv_loop() -> None:
            while running:
                msgs = await consumer.poll(timeout=0.2)
                now = time.perf_counter() - t0
                recvs.extend([now] * len(msgs))

        tasks = [asyncio.ensure_future(send_loop()) for _ in range(cfg.in_flight)]
        tasks.append(asyncio.ensure_future(recv_loop()))
        await asyncio.sleep(cfg.warmup)
        migrating["start"] = time.perf_counter() - t0
        mapping = await lqa.migrate(topic, 0, "broker-c")
        migrating["end"] = time.perf_counter() - t0
        await asyncio.sleep(cfg.after)
        running = False
        await asyncio.gather(*tasks, return_exceptions=True)
        await consumer.close()
        await producer.close()
        await admin.close()
    new_start = mapping.leader(0).logical_start if mapping.leader(0) else -1  # type: ignore[union-attr]
    first_new = min((t for t, off in sends if off >= new_start and t >= migrating["start"]),
                    default=float("nan"))

    def rate(times: list[float], lo: float, hi: float) -> float:
        return sum(1 for t in times if lo <= t < hi) / (hi - lo) if hi > lo else 0.0

    send_times = [t for t, _ in sends]
    w = cfg.window
    before = (migrating["start"] - 1.0, migrating["start"])
    during = (migrating["start"], max(migrating["end"], migrating["start"] + w))
    after = (migrating["end"] + 0.5, migrating["end"] + 1.5)
    windows = []
    t = 0.0
    end = migrating["end"] + cfg.after
    while t < end:
        windows.append((round(t, 3), rate(send_times, t, t + w), rate(recvs, t, t + w)))
        t += w
    return {
        "migrate_s": migrating["end"] - migrating["start"],
        "first_write_s": first_new - migrating["start"],
        "produce_before": rate(send_times, *before), "produce_during": rate(send_times, *during),
        "produce_after": rate(send_times, *after),
        "consume_before": rate(recvs, *before), "consume_during": rate(recvs, *during),
        "consume_after": rate(recvs, *after),
        "acked": len(sends), "consumed": len(recvs), "windows": windows,
    }


def run_migration_bench(cfg: MigrationBenchConfig) -> dict[str, Any]:
    runs = []
    for _ in range(cfg.repeat):
        with tempfile.TemporaryDirectory(prefix="tidemq-bench-lq-") as d:
            runs.append(asyncio.run(_one(cfg, Path(d))))
    keys = ["migrate_s", "first_write_s", "produce_before", "produce_during", "produce_after",
            "consume_before", "consume_during", "consume_after"]
    return {"runs": runs, "median": {k: statistics.median(r[k] for r in runs) for k in keys}}
