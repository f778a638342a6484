"""``tidemq bench batchproto``: the batch protocol against one RPC per queue, in one run.

One broker process (:class:`~tidemq.bench.process.BrokerProcess`: ``tidemq standalone`` on
free loopback ports, batch protocol enabled) serves every workload; the load comes from
this process. Each workload runs with the client's batch protocol off and on
(``ClientConfig.batch_protocol_enable``), alternating which goes first, ``repeat`` times;
the medians are compared -- ratios measured minutes apart on the same broker, as the
machines are shared and noisy.

============  ==========================================================================
workload      what is measured
============  ==========================================================================
consume-N     N queues of one topic pre-filled with ``messages`` small messages in total;
              a PullConsumer assigned all N queues (``pull_batch`` per queue per pull)
              reads them from offset 0 until every one is read. Rate: messages returned
              by ``poll`` per second
consume-      with ``columns``: the same read through ``poll_batches`` (columns, no
columns-N     object per message; every body taken, its bytes summed)
produce-N     one Producer sends rounds of one message to each of N queues
              (``Producer.send_multi``), ``rounds_in_flight`` rounds at a time, for
              ``produce_seconds``. Rate: acknowledged messages per second
============  ==========================================================================

RPCs are counted by the client's :class:`~tidemq.client.batch_rpc.BatchRequester`: every
data-path request, a parent or a request sent on its own (route lookups and heartbeats are
not counted). Reported per mode: messages/s, RPCs/s, messages per RPC, both processes'
CPU and their CPU per message (steadier than rates when the machine is busy); per
workload: ``speedup`` (messages/s on / off) and ``rpc_reduction`` (RPCs per message
off / on). Target at 64 queues: ``speedup >= 3`` and ``rpc_reduction >= 10``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tidemq.bench.columns import take_columns
from tidemq.bench.process import BenchError, BrokerProcess, process_cpu_seconds
from tidemq.bench.topics import create_routed_topic
from tidemq.client import (
    AdminClient,
    ClientConfig,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
)
from tidemq.client.batch_rpc import batch_requester
from tidemq.client.instance import ClientInstance
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import PullMessageRequestHeader
from tidemq.codec.message import SendOptions, send_request
from tidemq.errors import ResponseCode, error_for_code

__all__ = ["TARGET_RPC_REDUCTION", "TARGET_SPEEDUP", "BatchProtoBenchConfig",
           "run_batch_protocol_bench", "target_met"]

#: The broker process's settings (``--broker-set`` adds to them): the feature on, and disk
#: thresholds that keep retention from deleting the workload's data on a shared disk.
_BROKER_SETTINGS = ("batchProtocolEnable=true", "diskMaxUsedSpaceRatio=99",
                    "diskSpaceCleanForciblyRatio=99", "diskSpaceWarningLevelRatio=99")
TARGET_SPEEDUP = 3.0
TARGET_RPC_REDUCTION = 10.0
_PREFILL_BATCH = 100

Report = Callable[[str, str, dict[str, Any]], None]
_Reader = Callable[[str, list[MessageQueue], int, bool, str, int, "BatchProtoBenchConfig"],
                   Awaitable["_Run"]]
_Writer = Callable[[str, list[MessageQueue], bool, str, int, "BatchProtoBenchConfig"],
                   Awaitable["_Run"]]


@dataclasses.dataclass(slots=True)
class BatchProtoBenchConfig:
    consume_queues: tuple[int, ...] = (64, 256)
    produce_queues: int = 64
    messages: int = 128_000  # per consume workload, spread over its queues
    size: int = 64
    pull_batch: int = 32
    produce_seconds: float = 3.0
    rounds_in_flight: int = 4
    repeat: int = 3
    broker_settings: tuple[str, ...] = ()
    data_dir: str | None = None
    #: Also run each consume workload through ``poll_batches`` (consume-columns-N).
    columns: bool = False

    def check(self) -> None:
        for name in ("produce_queues", "messages", "size", "pull_batch", "rounds_in_flight",
                     "repeat"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not self.consume_queues or min(self.consume_queues) < 1:
            raise ValueError("consume_queues must name positive queue counts")
        if self.produce_seconds <= 0:
            raise ValueError("produce_seconds must be positive")


@dataclasses.dataclass(slots=True)
class _Run:
    """What one run of one mode measured."""

    msgs: int
    rpcs: int
    seconds: float
    client_cpu: float
    broker_cpu: float | None

    def row(self) -> dict[str, Any]:
        s = self.seconds
        return {
            "msgs": self.msgs, "rpcs": self.rpcs, "seconds": s,
            "msgs_per_s": self.msgs / s, "rpcs_per_s": self.rpcs / s,
            "msgs_per_rpc": self.msgs / self.rpcs if self.rpcs else None,
            "client_cpu_pct": 100 * self.client_cpu / s,
            "broker_cpu_pct": None if self.broker_cpu is None else 100 * self.broker_cpu / s,
            # Both processes' CPU per message: steadier than rates on a busy machine.
            "cpu_us_per_msg": None if self.broker_cpu is None or not self.msgs
            else 1e6 * (self.client_cpu + self.broker_cpu) / self.msgs,
        }


class _Clock:
    """Wall time, this process's CPU and the broker's CPU between start and stop."""

    def __init__(self, broker_pid: int) -> None:
        self.pid = broker_pid
        self.t0 = time.perf_counter()
        self.c0 = time.process_time()
        self.b0 = process_cpu_seconds(broker_pid)

    def stop(self, msgs: int, rpcs: int) -> _Run:
        b1 = process_cpu_seconds(self.pid)
        broker = None if b1 is None or self.b0 is None else b1 - self.b0
        return _Run(msgs, rpcs, time.perf_counter() - self.t0,
                    time.process_time() - self.c0, broker)


def _config(namesrv: str, batch: bool, name: str, cfg: BatchProtoBenchConfig) -> ClientConfig:
    # Own instance per run: a fresh connection and fresh RPC counts.
    return ClientConfig(namesrv_addr=(namesrv,), instance_name=name,
                        batch_protocol_enable=batch, pull_batch_size=cfg.pull_batch,
                        long_polling_timeout=5.0, request_timeout=10.0,
                        send_msg_timeout=10.0)


async def _create_topic(namesrv: str, topic: str, queues: int) -> list[MessageQueue]:
    async with AdminClient(namesrv) as admin:
        route = await create_routed_topic(admin, topic, queues)
    return sorted(route.publish_queues)


async def _prefill(namesrv: str, queues: list[MessageQueue], per_queue: int,
                   cfg: BatchProtoBenchConfig) -> None:
    body = b"x" * cfg.size
    producer = Producer("bench_prefill", config=_config(namesrv, True, "prefill", cfg))
    await producer.start()
    try:
        for start in range(0, per_queue, _PREFILL_BATCH):
            n = min(_PREFILL_BATCH, per_queue - start)
            await asyncio.gather(*(producer.send_batch([Message(mq.topic, body)] * n, queue=mq)
                                   for mq in queues))
    finally:
        await producer.close()
    async with AdminClient(namesrv) as admin:
        deadline = asyncio.get_running_loop().time() + 120
        while sum(s.max_offset for s in await admin.topic_status(queues[0].topic)) < (
                per_queue * len(queues)):
            if asyncio.get_running_loop().time() > deadline:
                raise BenchError(f"{queues[0].topic} not dispatched after 120 s")
            await asyncio.sleep(0.05)  # dispatch runs in the broker process


async def _consume(namesrv: str, queues: list[MessageQueue], per_queue: int, batch: bool,
                   run: str, pid: int, cfg: BatchProtoBenchConfig, *,
                   columns: bool = False) -> _Run:
    """Read every queue from offset 0 with ``poll``, or with ``poll_batches``
    (``columns``: every body is taken and its bytes summed)."""
    consumer = PullConsumer(f"bench_bp_{run}", config=_config(namesrv, batch, run, cfg))
    await consumer.start()
    try:
        consumer.assign(queues)
        for mq in queues:
            consumer.seek(mq, 0)
        inst = consumer.instance
        await inst.routes.get(queues[0].topic)
        await inst.heartbeat_new_brokers()
        rpc = batch_requester(inst)
        total, got = per_queue * len(queues), 0
        rpcs0 = rpc.stats.rpcs
        clock = _Clock(pid)
        while got < total:
            if columns:  # the bodies are taken; their byte count is not reported here
                got += (await take_columns(consumer, timeout=5.0, limit=1 << 20))[0]
            else:
                got += len(await consumer.poll(timeout=5.0, max_messages=1 << 20))
        return clock.stop(got, rpc.stats.rpcs - rpcs0)
    finally:
        await consumer.close(commit=False)


_consume_columns: _Reader = functools.partial(_consume, columns=True)


async def _produce(namesrv: str, queues: list[MessageQueue], batch: bool, run: str,
                   pid: int, cfg: BatchProtoBenchConfig) -> _Run:
    producer = Producer(f"bench_bp_{run}", config=_config(namesrv, batch, run, cfg))
    await producer.start()
    body = b"x" * cfg.size
    try:
        await producer.send_multi([(Message(mq.topic, body), mq) for mq in queues])  # warm
        rpc = batch_requester(producer.instance)
        sent, rpcs0 = 0, rpc.stats.rpcs
        clock = _Clock(pid)
        deadline = time.perf_counter() + cfg.produce_seconds

        async def rounds() -> None:
            nonlocal sent
            while time.perf_counter() < deadline:
                await producer.send_multi([(Message(mq.topic, body), mq) for mq in queues])
                sent += len(queues)

        await asyncio.gather(*(rounds() for _ in range(cfg.rounds_in_flight)))
        return clock.stop(sent, rpc.stats.rpcs - rpcs0)
    finally:
        await producer.close()


async def _raw_instance(namesrv: str, batch: bool, run: str, cfg: BatchProtoBenchConfig,
                        topic: str) -> ClientInstance:
    inst = ClientInstance(_config(namesrv, batch, run, cfg))
    await inst.routes.get(topic)
    return inst


async def _consume_raw(namesrv: str, queues: list[MessageQueue], per_queue: int, batch: bool,
                       run: str, pid: int, cfg: BatchProtoBenchConfig) -> _Run:
    """Every queue read by its own loop of pre-built pulls; records are counted from
    ``nextBeginOffset``, never decoded: what the protocol costs, without the client's
    per-message work."""
    inst = await _raw_instance(namesrv, batch, run, cfg, queues[0].topic)
    rpc = batch_requester(inst)
    got = 0

    async def read(mq: MessageQueue) -> None:
        nonlocal got
        addr = await inst.master_address(mq)
        ext = PullMessageRequestHeader(
            consumer_group=f"bench_bp_{run}", topic=mq.topic, queue_id=mq.queue_id,
            queue_offset=0, max_msg_nums=cfg.pull_batch, sys_flag=0, commit_offset=0,
            suspend_timeout_millis=0, subscription="*", sub_version=0, expression_type="TAG",
            broker_name=mq.broker_name).to_ext()
        offset = 0
        while offset < per_queue:
            ext["queueOffset"] = str(offset)
            response = await rpc.request(addr, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, dict(ext)))
            if response.code != ResponseCode.SUCCESS:
                raise error_for_code(response.code, response.remark or "", address=addr)
            nxt = int(response.ext_fields["nextBeginOffset"])
            got += nxt - offset
            offset = nxt

    try:
        rpcs0 = rpc.stats.rpcs
        clock = _Clock(pid)
        await asyncio.gather(*(read(mq) for mq in queues))
        return clock.stop(got, rpc.stats.rpcs - rpcs0)
    finally:
        await inst.close()


async def _produce_raw(namesrv: str, queues: list[MessageQueue], batch: bool, run: str,
                       pid: int, cfg: BatchProtoBenchConfig) -> _Run:
    """Rounds of one pre-built SEND_MESSAGE_V2 per queue: no per-message client work."""
    inst = await _raw_instance(namesrv, batch, run, cfg, queues[0].topic)
    rpc = batch_requester(inst)
    opts = SendOptions(producer_group=f"bench_bp_{run}")
    now = int(time.time() * 1000)
    templates = [(await inst.master_address(mq), send_request(
        Message(mq.topic, b"x" * cfg.size, {"WAIT": "true"}), opts, queue_id=mq.queue_id,
        now_ms=now, keys=inst.uniq_keys, broker_name=mq.broker_name)) for mq in queues]
    sent = 0

    async def one(addr: str, template: RemotingCommand) -> None:
        response = await rpc.request(addr, dataclasses.replace(template))
        if response.code != ResponseCode.SUCCESS:
            raise error_for_code(response.code, response.remark or "", address=addr)

    try:
        await asyncio.gather(*(one(a, t) for a, t in templates))  # warm
        rpcs0 = rpc.stats.rpcs
        clock = _Clock(pid)
        deadline = time.perf_counter() + cfg.produce_seconds

        async def rounds() -> None:
            nonlocal sent
            while time.perf_counter() < deadline:
                await asyncio.gather(*(one(a, t) for a, t in templates))
                sent += len(templates)

        await asyncio.gather(*(rounds() for _ in range(cfg.rounds_in_flight)))
        return clock.stop(sent, rpc.stats.rpcs - rpcs0)
    finally:
        await inst.close()


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median rate, plus the spread of the rates."""
    ranked = sorted(rows, key=lambda r: r["msgs_per_s"])
    mid = dict(ranked[len(ranked) // 2])
    mid["msgs_per_s_all"] = [r["msgs_per_s"] for r in rows]
    mid["msgs_per_s_median"] = statistics.median(r["msgs_per_s"] for r in rows)
    return mid


async def _compare(name: str, cfg: BatchProtoBenchConfig,
                   once: Callable[[bool, str], Awaitable[_Run]],
                   report: Report | None) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for i in range(cfg.repeat):
        for batch in ((False, True) if i % 2 == 0 else (True, False)):
            mode = "on" if batch else "off"
            row = (await once(batch, f"{name}-{mode}-{i}-{os.getpid()}")).row()
            rows[mode].append(row)
            if report is not None:
                report(name, mode, row)
    off, on = _median(rows["off"]), _median(rows["on"])
    speedup = on["msgs_per_s_median"] / off["msgs_per_s_median"]
    per_msg_off = off["rpcs"] / off["msgs"]
    per_msg_on = on["rpcs"] / on["msgs"] if on["rpcs"] else 0.0
    reduction = per_msg_off / per_msg_on if per_msg_on else float("inf")
    return {"off": off, "on": on, "speedup": speedup, "rpc_reduction": reduction}


async def run_batch_protocol_bench(cfg: BatchProtoBenchConfig,
                                   report: Report | None = None) -> dict[str, Any]:
    """Every workload of the module docstring against one broker process."""
    cfg.check()
    broker = BrokerProcess(settings=(*_BROKER_SETTINGS, *cfg.broker_settings),
                           data_dir=cfg.data_dir)
    namesrv = await broker.start()
    pid = broker.pid
    results: dict[str, Any] = {}
    try:
        topics: dict[int, list[MessageQueue]] = {}
        for n in cfg.consume_queues:
            topics[n] = await _create_topic(namesrv, f"BatchProto{n}", n)
            await _prefill(namesrv, topics[n], max(1, cfg.messages // n), cfg)
        for n in cfg.consume_queues:
            per_queue = max(1, cfg.messages // n)

            readers: list[tuple[str, _Reader]] = [("", _consume), ("-raw", _consume_raw)]
            if cfg.columns:
                readers.insert(1, ("-columns", _consume_columns))
            for kind, reader in readers:

                async def consume(batch: bool, run: str, qs: list[MessageQueue] = topics[n],
                                  per: int = per_queue, read: _Reader = reader) -> _Run:
                    return await read(namesrv, qs, per, batch, run, pid, cfg)

                name = f"consume{kind}-{n}"
                results[name] = await _compare(name, cfg, consume, report)
        produce_queues = await _create_topic(namesrv, "BatchProtoProduce", cfg.produce_queues)
        for raw, writer in ((False, _produce), (True, _produce_raw)):

            async def produce(batch: bool, run: str, write: _Writer = writer) -> _Run:
                return await write(namesrv, produce_queues, batch, run, pid, cfg)

            name = f"produce{'-raw' if raw else ''}-{cfg.produce_queues}"
            results[name] = await _compare(name, cfg, produce, report)
    finally:
        await broker.stop()
    return results


def target_met(result: dict[str, Any]) -> bool:
    """Whether a workload's comparison meets both targets."""
    return bool(result["speedup"] >= TARGET_SPEEDUP
                and result["rpc_reduction"] >= TARGET_RPC_REDUCTION)
