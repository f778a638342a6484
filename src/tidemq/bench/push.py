"""``tidemq bench push``: push-consumer throughput and rebalance completion time.

One broker process (``tidemq standalone`` in a subprocess, see :mod:`tidemq.bench.process`)
and this process as the client. Phases, each in the same run:

* **throughput**: ``messages`` 128-byte messages are pre-filled over ``queues`` queues
  with batch sends; then one PushConsumer with a trivial listener (counts, returns
  CONSUME_SUCCESS) consumes them from the first offset with ``consume_batch_max_size``
  messages per listener call. Reported: msgs/s from start to the last message.
* **rebalance**: three members of a group are running and balanced; a fourth starts. The
  time from its start until the four assignments are disjoint, cover every queue and
  each member holds its average share -- the rebalance completion time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from typing import Any

from tidemq.bench.process import BrokerProcess, process_cpu_seconds
from tidemq.client import AdminClient, ClientConfig, Producer, PushConsumer
from tidemq.client.listener import ConsumeStatus
from tidemq.client.push_options import PushOptions
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.types import Message, MessageExt, MessageQueue

__all__ = ["PushBenchConfig", "run_push_bench"]


@dataclasses.dataclass
class PushBenchConfig:
    messages: int = 200_000
    queues: int = 8
    body_size: int = 128
    batch: int = 32  # messages per listener call
    pull_batch: int = 1000  # messages per pull request
    repeat: int = 3


async def _fill(namesrv: str, topic: str, cfg: PushBenchConfig) -> None:
    admin = AdminClient(namesrv)
    await admin.start()
    await admin.create_topic(topic, read_queue_nums=cfg.queues, write_queue_nums=cfg.queues)
    for _ in range(200):
        try:
            await admin.topic_route(topic)
            break
        except Exception:
            await asyncio.sleep(0.05)
    await admin.close()
    producer = Producer("bench-push-fill", namesrv)
    await producer.start()
    body = b"x" * cfg.body_size
    per_batch = 200
    sends = []
    for i in range(cfg.messages // per_batch):
        queue = MessageQueue(topic, "broker-a", i % cfg.queues)
        sends.append(producer.send_batch([Message(topic, body)] * per_batch, queue=queue))
        if len(sends) >= 16:
            await asyncio.gather(*sends)
            sends = []
    await asyncio.gather(*sends)
    await producer.close()


async def _throughput(namesrv: str, topic: str, cfg: PushBenchConfig,
                      broker_pid: int) -> dict[str, Any]:
    done = asyncio.Event()
    count = 0
    total = (cfg.messages // 200) * 200

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        nonlocal count
        count += len(msgs)
        if count >= total:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    opts = PushOptions(consume_batch_max_size=cfg.batch, pull_threshold_for_queue=4000,
                       consume_concurrently_max_span=0)
    config = ClientConfig(namesrv_addr=(namesrv,), pull_batch_size=cfg.pull_batch)
    consumer = PushConsumer(f"bench-push-{time.time_ns()}", config=config, listener=listener,
                            options=opts,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, "*")
    cpu0 = time.process_time()
    bcpu0 = process_cpu_seconds(broker_pid) or 0.0
    t0 = time.perf_counter()
    await consumer.start()
    async with asyncio.timeout(600):
        await done.wait()
    dt = time.perf_counter() - t0
    client_cpu = time.process_time() - cpu0
    broker_cpu = (process_cpu_seconds(broker_pid) or 0.0) - bcpu0
    await consumer.close()
    return {"messages": count, "seconds": dt, "msgs_per_s": count / dt,
            "client_cpu_pct": 100 * client_cpu / dt, "broker_cpu_pct": 100 * broker_cpu / dt,
            "client_us_per_msg": 1e6 * client_cpu / max(count, 1),
            "broker_us_per_msg": 1e6 * broker_cpu / max(count, 1)}


def _balanced(assignments: list[set[MessageQueue]], queues: int) -> bool:
    """Disjoint, covering, even -- over the topic's queues (members also share the
    group's retry topic, which is left out)."""
    assignments = [{q for q in a if not q.topic.startswith("%RETRY%")} for a in assignments]
    union: set[MessageQueue] = set()
    for a in assignments:
        if union & a:
            return False
        union |= a
    share = queues // len(assignments)
    return len(union) == queues and all(share <= len(a) <= share + 1 for a in assignments)


async def _rebalance(namesrv: str, topic: str, cfg: PushBenchConfig) -> float:
    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        return ConsumeStatus.CONSUME_SUCCESS

    group = f"bench-rebalance-{time.time_ns()}"
    members = []

    def member_config(i: int) -> ClientConfig:  # one client instance per member
        return ClientConfig(namesrv_addr=(namesrv,), instance_name=f"{group}-m{i}")

    for i in range(3):
        c = PushConsumer(group, config=member_config(i), listener=listener)
        c.subscribe(topic, "*")
        await c.start()
        members.append(c)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not _balanced([set(m.assignment()) for m in members], cfg.queues):
        if loop.time() > deadline:
            raise RuntimeError("three members never balanced: " + repr(
                [sorted(q.queue_id for q in m.assignment()) for m in members]))
        await asyncio.sleep(0.01)
    fourth = PushConsumer(group, config=member_config(3), listener=listener)
    fourth.subscribe(topic, "*")
    t0 = time.perf_counter()
    await fourth.start()
    members.append(fourth)
    while not _balanced([set(m.assignment()) for m in members], cfg.queues):
        if loop.time() > deadline:
            raise RuntimeError("four members never balanced")
        await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - t0
    for m in members:
        await m.close()
    return elapsed


async def _one(cfg: PushBenchConfig) -> dict[str, Any]:
    broker = BrokerProcess()
    namesrv = await broker.start()
    try:
        topic = "BenchPush"
        await _fill(namesrv, topic, cfg)
        result = await _throughput(namesrv, topic, cfg, broker.pid)
        result["rebalance_s"] = await _rebalance(namesrv, topic, cfg)
        return result
    finally:
        await broker.stop()


def run_push_bench(cfg: PushBenchConfig) -> dict[str, Any]:
    runs = [asyncio.run(_one(cfg)) for _ in range(cfg.repeat)]
    return {"runs": runs,
            "median_msgs_per_s": statistics.median(r["msgs_per_s"] for r in runs),
            "median_rebalance_s": statistics.median(r["rebalance_s"] for r in runs)}
