"""``tidemq bench produce|consume|latency``: one broker process, the load in this one.

Modelled on RocketMQ's benchmark scripts (``producer.sh``, ``consumer.sh``): the broker
runs in its own process (:class:`~tidemq.bench.process.BrokerProcess`, or ``namesrv``
names a running cluster) and the load comes from this process through the asyncio client,
with as little Python work per message as the API allows. Rows and CPU figures come from
:mod:`tidemq.bench.meter`.

=========  =================================================================================
workload   what is measured
=========  =================================================================================
produce    ``in_flight`` sends kept running over ``producers`` producers (each with its own
           connection; worker ``k`` sends to queue ``k mod queues``); ``batch > 1`` sends
           ``send_batch`` calls of that many. Rate in messages/s; latency per send call.
consume    ``messages`` pre-filled in batches of 100, then a PullConsumer reads every queue
           from its first offset, ``pull_batch`` messages per pull; messages/s returned by
           ``poll``. With ``columns`` a second consumer then reads the same messages with
           ``poll_batches`` (columns; every body taken, its bytes summed), a second row
           (``result["columns"]``) of the same run.
latency    one producer sends ``rate`` messages/s, a long-polling PullConsumer (pulls of up
           to ``pull_batch``) receives them; end-to-end latency is receipt time minus the
           send time carried in the first 8 bytes of the body (``perf_counter_ns``: one
           process, one clock). ``batch > 1`` offers the rate as ``rate / batch``
           ``send_batch`` calls a second of that many messages, each stamped with the
           time its batch is sent, and the consumer reads them as columns
           (``poll_batches``): rates a client of single messages cannot keep. Without
           ``receive`` there is no consumer: the rows count acknowledged messages, and
           with a replica the figure of interest is its lag under the send load alone.
=========  =================================================================================

``linger_ms`` (produce, latency) sends each message alone through an
:class:`~tidemq.client.AutoBatchProducer` per producer (``linger_ms``, at most
``max_batch`` messages and ``max_batch_bytes`` per batch), awaiting its own future: still
single-message sends for the caller, shipped as batches; the auto-batcher picks the
queues (its sticky queue), and latency is per message. With ``produce_api`` each
producer calls ``produce`` instead, keeping ``in_flight`` messages outstanding (see
``_ProduceWindow``). Either way the summary adds the requests the auto-batchers shipped
and the messages each carried on average.

With ``namesrv`` (a running cluster) the broker's CPU is read from the process listening
on the address of the topic's one master when it is on this machine; the summary's
``broker_cpu`` names that process, or says why there is no figure.

``acl`` and ``tls`` start the broker process with an ACL, or TLS only, and the clients
to match (:mod:`tidemq.bench.security`): the same load, to measure what each costs.

``raw`` (produce, consume) takes the client API's per-message work out, so the figures are
the broker's: a producer re-sends one pre-built SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
command (a fresh UNIQ_KEY patched into its properties each time; a batch's entries keep
theirs) and checks only the response code; a consumer pulls each queue in a loop and counts
``nextBeginOffset - queueOffset`` without decoding the records. What is left on the client
is framing: one header encode and one decode per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tidemq.bench.columns import take_columns
from tidemq.bench.listener import listening_pid
from tidemq.bench.load import acknowledged, join_load
from tidemq.bench.meter import Meter, Report, Sampler, measure
from tidemq.bench.pacer import STAMP, Pacer
from tidemq.bench.process import BenchError, BrokerProcess, free_ports
from tidemq.bench.replica import REPLICA_MODES, ReplicaProcess, replica_settings
from tidemq.bench.replication_lag import ReplicationLagSampler
from tidemq.bench.security import BenchSecurity, client_environment
from tidemq.bench.topics import create_routed_topic
from tidemq.client import (
    AdminClient,
    AutoBatchProducer,
    ClientConfig,
    ClientInstance,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
)
from tidemq.client.batch_rpc import batch_requester
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import PullMessageRequestHeader
from tidemq.codec.message import SendOptions, batch_send_request, send_request
from tidemq.errors import ResponseCode, TideMQError, error_for_code
from tidemq.types import SendResult, SendStatus

__all__ = [
    "FLUSH_TYPES",
    "BrokerBenchConfig",
    "run_consume",
    "run_latency",
    "run_produce",
]

FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
_PREFILL_BATCH = 100
_KEY_PLACEHOLDER = "0" * 32
#: An auto-batcher's default buffer, and what a message counts in it beyond its body at
#: most (entry header, keys, properties).
_BATCHER_BUFFER = 32 * 1024 * 1024
_ENTRY_ROOM = 512


@dataclasses.dataclass(slots=True)
class BrokerBenchConfig:
    namesrv: str | None = None  # a running cluster; None: start a broker process
    flush: str = "ASYNC_FLUSH"
    topic: str = "BenchTopic"
    queues: int = 8
    size: int = 128
    batch: int = 1
    producers: int = 1
    in_flight: int = 256
    duration: float = 10.0
    warmup: float = 1.0
    rate: int = 5000
    messages: int = 1_000_000
    pull_batch: int = 1000
    raw: bool = False
    columns: bool = False  # consume: also read with poll_batches (a second row)
    #: latency: a consumer receives what is sent (off: only sends, and the replica's lag)
    receive: bool = True
    linger_ms: float | None = None  # single sends through an AutoBatchProducer
    produce_api: bool = False  # with linger_ms: AutoBatchProducer.produce and callbacks
    max_batch: int = 1024  # its max_batch_messages
    max_batch_bytes: int = 32 * 1024  # its max_batch_bytes
    broker_settings: tuple[str, ...] = ()  # extra KEY=VALUE for the broker process
    data_dir: str | None = None
    profile: str | None = None  # py-spy output for the broker process
    acl: bool = False  # the broker process checks an ACL; clients sign (bench.security)
    tls: bool = False  # the broker process speaks TLS only; clients use it
    #: "async" / "sync": the broker process is an ASYNC_MASTER / SYNC_MASTER with one
    #: replica in a second process (bench.replica); None: a single broker
    replica: str | None = None
    #: The producers record message trace (enable_msg_trace) to the broker's trace topic.
    trace: bool = False

    @property
    def security(self) -> BenchSecurity:
        return BenchSecurity(acl=self.acl, tls=self.tls)

    def check(self) -> None:
        """Raise ``ValueError`` naming the first setting out of range."""
        if self.replica is not None and self.replica not in REPLICA_MODES:
            raise ValueError(f"replica must be one of {sorted(REPLICA_MODES)}, "
                             f"got {self.replica!r}")
        if self.flush not in FLUSH_TYPES:
            raise ValueError(f"flush must be one of {FLUSH_TYPES}, got {self.flush!r}")
        for name in ("queues", "size", "batch", "producers", "in_flight", "rate",
                     "messages", "pull_batch", "max_batch", "max_batch_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.linger_ms is not None:
            if self.linger_ms < 0:
                raise ValueError("linger_ms must not be negative")
            if self.batch > 1 or self.raw:
                raise ValueError("linger_ms auto-batches single sends: not with batch or raw")
        if self.produce_api and self.linger_ms is None:
            raise ValueError("produce_api sends through the auto-batcher: give linger_ms")
        if self.columns and self.raw:
            raise ValueError("columns reads through the client API: not with raw")
        if self.trace and self.raw:
            raise ValueError("trace is recorded by the client API: not with raw")
        if self.namesrv and (self.acl or self.tls):
            raise ValueError("acl and tls set up the benchmark's own broker; for a running "
                             "cluster, give the clients TIDEMQ_ACCESS_KEY/TIDEMQ_SECRET_KEY "
                             "and TIDEMQ_TLS_CA in the environment")
        if self.duration <= 0 or self.warmup < 0:
            raise ValueError("duration must be positive and warmup not negative")


# ---------------------------------------------------------------------- set-up


@contextlib.asynccontextmanager
async def _broker(cfg: BrokerBenchConfig) -> AsyncIterator[tuple[str, Pids]]:
    """The name-server address to use and the pids of the processes we started."""
    if cfg.namesrv:
        yield cfg.namesrv, Pids(None, None)
        return
    broker = BrokerProcess(flush=cfg.flush, settings=cfg.broker_settings,
                           data_dir=cfg.data_dir, profile=cfg.profile)
    try:
        extra, env = cfg.security.prepare(broker.data)
    except BaseException:
        shutil.rmtree(broker.data, ignore_errors=True)
        raise
    broker.settings += tuple(extra)
    if cfg.trace:
        broker.settings += ("traceTopicEnable=true",)
    replica = None
    if cfg.replica is not None:
        (ha_port,) = free_ports(1)
        broker.settings += replica_settings(cfg.replica, ha_port)
        replica = ReplicaProcess(broker.data / "replica", "", ha_port, cfg.flush,
                                 settings=cfg.broker_settings)
    with client_environment(env):
        await broker.start()
        try:
            if replica is not None:
                replica.namesrv = broker.namesrv_addr
                replica.master = broker.broker_addr
                await replica.start()
            yield broker.namesrv_addr, Pids(broker.pid, replica.pid if replica else None)
        finally:
            if replica is not None:
                await replica.stop()
            await broker.stop()


async def _create_topic(namesrv: str, topic: str, queues: int
                        ) -> tuple[list[MessageQueue], list[str]]:
    """Create ``topic`` on every master; its queues, and the addresses of the masters
    holding them."""
    async with AdminClient(namesrv) as admin:
        route = await create_routed_topic(admin, topic, queues)
    return list(route.publish_queues), sorted(set(route.master_addresses.values()))


@contextlib.contextmanager
def _tuned_gc() -> Iterator[None]:
    """The load makes many short-lived objects: fewer young collections while it runs."""
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _client_config(namesrv: str, index: int, *, trace: bool = False) -> ClientConfig:
    """Producer ``index`` gets its own client instance, hence its own connections."""
    return ClientConfig(namesrv_addr=(namesrv,), instance_name=f"bench-{os.getpid()}-{index}",
                        send_msg_timeout=30.0, request_timeout=30.0, long_polling_timeout=5.0,
                        enable_msg_trace=trace)


@contextlib.asynccontextmanager
async def _producers(namesrv: str, count: int, *, trace: bool = False
                     ) -> AsyncIterator[list[Producer]]:
    producers = [Producer(f"bench_producer_{i}", config=_client_config(namesrv, i, trace=trace))
                 for i in range(count)]
    try:
        for p in producers:
            await p.start()
        yield producers
    finally:
        for p in producers:
            await p.close()


@contextlib.asynccontextmanager
async def _batchers(cfg: BrokerBenchConfig, producers: list[Producer]
                    ) -> AsyncIterator[list[AutoBatchProducer] | None]:
    """One auto-batcher per producer when ``linger_ms`` is set (closed, so flushed, last)."""
    if cfg.linger_ms is None:
        yield None
        return
    # Room for a whole produce() window: produce() refuses what a full buffer cannot take.
    window = -(-cfg.in_flight // len(producers))
    room = max(_BATCHER_BUFFER, window * (cfg.size + _ENTRY_ROOM))
    batchers = [AutoBatchProducer(p, linger_ms=cfg.linger_ms, max_batch_messages=cfg.max_batch,
                                  max_batch_bytes=cfg.max_batch_bytes, total_buffer_bytes=room)
                for p in producers]
    try:
        yield batchers
    finally:
        for b in batchers:
            await b.close()


def _trace_counts(producers: Sequence[Producer]) -> dict[str, int]:
    """What the producers' tracers did by the end of the run (before closing sends the
    rest of their queues)."""
    tracers = [p.tracer for p in producers if p.tracer is not None]
    return {"trace_sent_records": sum(t.sent_records for t in tracers),
            "trace_queued_events": sum(t.queued for t in tracers),
            "trace_dropped_events": sum(t.dropped for t in tracers),
            "trace_failed_records": sum(t.failed_records for t in tracers)}


def _shipped(batchers: Sequence[AutoBatchProducer] | None) -> dict[str, float]:
    """How many requests the auto-batchers shipped over the whole run, and how many
    messages each carried on average (none without auto-batchers)."""
    if not batchers:
        return {}
    requests = sum(b.shipped_requests for b in batchers)
    messages = sum(b.shipped_messages for b in batchers)
    return {"shipped_requests": requests,
            "shipped_messages_per_request": messages / requests if requests else 0.0}


def _pulled(consumer: PullConsumer | None, received: int) -> dict[str, float]:
    """How many requests the consumer made over the whole run (its pulls, but for the
    few offset requests of its start), and how many messages each brought on average
    (none without a consumer)."""
    if consumer is None:
        return {}
    requests = batch_requester(consumer.instance).stats.rpcs
    return {"pull_requests": requests,
            "pull_messages_per_request": received / requests if requests else 0.0}


def _result(kind: str, cfg: BrokerBenchConfig, sampler: Sampler,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a run returns; ``loadavg`` shows how busy the (shared) machine was."""
    return {"command": kind, "config": dataclasses.asdict(cfg),
            "summary": {**sampler.summary(cfg.warmup), **(extra or {})},
            "seconds": sampler.rows, "cpus": os.cpu_count(),
            "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


@dataclasses.dataclass(frozen=True, slots=True)
class Pids:
    """The broker process and its replica process, when the benchmark started them or
    found the running broker's process on this machine; ``broker_cpu``: for a running
    cluster, which process the broker's CPU figures are read from, or why there are none."""

    broker: int | None
    replica: int | None
    broker_cpu: str | None = None


def _running_broker(masters: Sequence[str]) -> Pids:
    """The :class:`Pids` of a running cluster whose topic's route names ``masters``:
    the process of its one master when that is on this machine
    (:func:`~tidemq.bench.listener.listening_pid`)."""
    if len(masters) != 1:
        return Pids(None, None, f"not measured: the topic's route names {len(masters)} "
                                f"masters ({', '.join(masters)}), not one")
    found = listening_pid(masters[0])
    if isinstance(found, str):
        return Pids(None, None, f"not measured: {found}")
    here = " (this process: its CPU includes the load's)" if found == os.getpid() else ""
    return Pids(found, None, f"process {found}, listening on {masters[0]}{here}")


_Body = Callable[[str, Pids, list[MessageQueue]], Awaitable[dict[str, Any]]]


async def _run(cfg: BrokerBenchConfig, body: _Body) -> dict[str, Any]:
    cfg.check()
    with _tuned_gc():
        async with _broker(cfg) as (namesrv, pids):
            queues, masters = await _create_topic(namesrv, cfg.topic, cfg.queues)
            if not cfg.namesrv:
                return await body(namesrv, pids, queues)
            running = _running_broker(masters)
            result = await body(namesrv, running, queues)
            for part in (result, result.get("columns")):
                if part is not None:
                    part["summary"]["broker_cpu"] = running.broker_cpu
            return result


async def _stop(tasks: Sequence[asyncio.Task[Any]], running: list[bool]) -> None:
    running[0] = False
    await join_load(tasks)


# ---------------------------------------------------------------------- produce


async def _send_loop(producer: Producer, queue: MessageQueue, payload: Message | list[Message],
                     count: int, meter: Meter, running: list[bool]) -> None:
    send: Callable[..., Awaitable[Any]] = (
        producer.send_batch if isinstance(payload, list) else producer.send)
    lat = meter.latencies
    clock = time.perf_counter
    while running[0]:
        t0 = clock()
        try:
            acknowledged(await send(payload, queue=queue))
        except TideMQError as exc:
            meter.fail(exc)
            await asyncio.sleep(0.01)  # do not spin against a failing broker
            continue
        lat.append(clock() - t0)
        meter.count += count


async def _auto_send_loop(batcher: AutoBatchProducer, msg: Message, meter: Meter,
                          running: list[bool]) -> None:
    """Single sends through the auto-batcher, which picks the queues: one future per
    message, awaited."""
    lat = meter.latencies
    clock = time.perf_counter
    send = batcher.send
    while running[0]:
        t0 = clock()
        try:
            acknowledged(await (await send(msg)))
        except TideMQError as exc:
            meter.fail(exc)
            await asyncio.sleep(0.01)
            continue
        lat.append(clock() - t0)
        meter.count += 1


#: Messages produced in a row that share one delivery callback and one start time.
_PRODUCE_RUN = 64
#: Read once: a member read from its enum class takes the slow attribute path of a class
#: whose metaclass has ``__getattr__``, which the callback would take for every message.
_SEND_OK = SendStatus.SEND_OK


class _ProducedRun:
    """The delivery callback of a run of messages produced in a row: it counts them as
    they are delivered and, when the last one is, hands the run back to its window."""

    __slots__ = ("count", "left", "ok", "t0", "window")

    def __init__(self, window: _ProduceWindow, t0: float, count: int) -> None:
        self.window, self.t0, self.count, self.left, self.ok = window, t0, count, count, 0

    def __call__(self, error: BaseException | None, result: SendResult | None) -> None:
        if error is None and result is not None and result.status is _SEND_OK:
            self.ok += 1
        else:
            self.window.failed(error, result)
        self.left -= 1
        if not self.left:
            self.window.delivered(self)


class _ProduceWindow:
    """One sender through :meth:`AutoBatchProducer.produce`: at most ``window`` messages
    produced and not yet delivered, topped up whenever half of them were. Messages are
    produced in runs of :data:`_PRODUCE_RUN` that share one delivery callback, so the
    load's own work per message is a call and a count, as in a Kafka producer loop; the
    latency recorded is one per run, from its first ``produce`` call to the delivery of
    its last message."""

    def __init__(self, batcher: AutoBatchProducer, topic: str, body: bytes, window: int,
                 meter: Meter) -> None:
        self.batcher, self.topic, self.body, self.window = batcher, topic, body, window
        self.meter = meter
        self.outstanding = 0
        self.wake = asyncio.Event()

    def failed(self, error: BaseException | None, result: SendResult | None) -> None:
        if error is None:
            status = result.status.name if result is not None else "nothing"
            error = TideMQError(f"send answered {status}")
        self.meter.fail(error)

    def delivered(self, run: _ProducedRun) -> None:
        self.meter.latencies.append(time.perf_counter() - run.t0)
        self.meter.count += run.ok
        self.outstanding -= run.count
        if self.outstanding <= self.window // 2:
            self.wake.set()

    async def run(self, running: list[bool]) -> None:
        produce, topic, body = self.batcher.produce, self.topic, self.body
        clock = time.perf_counter
        while running[0]:
            left = self.window - self.outstanding
            while left > 0:
                count = min(left, _PRODUCE_RUN)
                on_delivery = _ProducedRun(self, clock(), count)
                for _ in range(count):
                    produce(topic, body, on_delivery=on_delivery)
                left -= count
            self.outstanding = self.window
            self.wake.clear()
            await self.wake.wait()


class _RawSend:
    """One pre-built send command for ``queue``, re-sent with a fresh UNIQ_KEY."""

    def __init__(self, producer: Producer, queue: MessageQueue, cfg: BrokerBenchConfig) -> None:
        inst = producer.instance
        self.instance = inst
        self.count = cfg.batch
        opts = SendOptions(producer_group=producer.group)
        body = b"x" * cfg.size
        now = time.time_ns() // 1_000_000
        if cfg.batch == 1:
            msg = Message(cfg.topic, body, {"UNIQ_KEY": _KEY_PLACEHOLDER, "WAIT": "true"})
            self.cmd = send_request(msg, opts, queue_id=queue.queue_id, now_ms=now,
                                    keys=inst.uniq_keys, broker_name=queue.broker_name)
        else:
            msgs = [Message(cfg.topic, body, {"WAIT": "true"})] * cfg.batch
            self.cmd = batch_send_request(msgs, opts, queue_id=queue.queue_id, now_ms=now,
                                          keys=inst.uniq_keys, broker_name=queue.broker_name)
        self.field = next((k for k, v in self.cmd.ext_fields.items()
                           if _KEY_PLACEHOLDER in v), "")
        self.template = self.cmd.ext_fields.get(self.field, "")
        self.prefix = inst.uniq_keys.next_key(now)[:20]
        self.serial = 0
        self.queue = queue

    def next_command(self) -> RemotingCommand:
        if self.field:
            self.serial += 1
            self.cmd.ext_fields[self.field] = self.template.replace(
                _KEY_PLACEHOLDER, f"{self.prefix}{self.serial:012X}")
        return self.cmd


async def _raw_send_loop(raw: _RawSend, meter: Meter, running: list[bool]) -> None:
    inst, count = raw.instance, raw.count
    addr = await inst.master_address(raw.queue)
    lat = meter.latencies
    clock = time.perf_counter
    while running[0]:
        t0 = clock()
        try:
            response = await inst.request(addr, raw.next_command())
            if response.code != ResponseCode.SUCCESS:
                raise error_for_code(response.code, response.remark or "", address=addr)
        except TideMQError as exc:
            meter.fail(exc)
            await asyncio.sleep(0.01)
            continue
        lat.append(clock() - t0)
        meter.count += count


def _start_senders(cfg: BrokerBenchConfig, producers: list[Producer],
                   batchers: list[AutoBatchProducer] | None, queues: list[MessageQueue],
                   meter: Meter, running: list[bool]) -> list[asyncio.Task[None]]:
    tasks = []
    msg = Message(cfg.topic, b"x" * cfg.size)
    payload: Message | list[Message] = msg if cfg.batch == 1 else [msg] * cfg.batch
    if batchers is not None and cfg.produce_api:  # one window per producer
        window = max(1, cfg.in_flight // len(batchers))
        return [asyncio.ensure_future(_ProduceWindow(b, cfg.topic, msg.body, window,
                                                     meter).run(running))
                for b in batchers]
    for k in range(cfg.in_flight):
        producer, queue = producers[k % len(producers)], queues[k % len(queues)]
        loop: Awaitable[None]
        if batchers is not None:
            loop = _auto_send_loop(batchers[k % len(batchers)], msg, meter, running)
        elif cfg.raw:
            loop = _raw_send_loop(_RawSend(producer, queue, cfg), meter, running)
        else:
            loop = _send_loop(producer, queue, payload, cfg.batch, meter, running)
        tasks.append(asyncio.ensure_future(loop))
    return tasks


async def run_produce(cfg: BrokerBenchConfig, report: Report | None = None) -> dict[str, Any]:
    """The produce workload (module docstring); returns config, summary and rows."""

    async def body(namesrv: str, pids: Pids, queues: list[MessageQueue]
                   ) -> dict[str, Any]:
        meter, running = Meter(), [True]
        extra: dict[str, Any] = {}
        async with (_producers(namesrv, cfg.producers, trace=cfg.trace) as producers,
                    _batchers(cfg, producers) as batchers):
            tasks = _start_senders(cfg, producers, batchers, queues, meter, running)
            sampler = Sampler(meter, pids.broker, pids.replica)
            try:
                await measure(sampler, cfg.duration, report)
            finally:
                await _stop(tasks, running)
                extra = {**(_trace_counts(producers) if cfg.trace else {}),
                         **_shipped(batchers)}
        return _result("produce", cfg, sampler, extra)

    return await _run(cfg, body)


# ---------------------------------------------------------------------- consume


async def _prefill(cfg: BrokerBenchConfig, namesrv: str, queues: list[MessageQueue]
                   ) -> dict[str, Any]:
    """Store ``cfg.messages`` (rounded up to whole batches of 100), spread over the queues."""
    left = [-(-cfg.messages // _PREFILL_BATCH)]
    msgs = [Message(cfg.topic, b"x" * cfg.size)] * _PREFILL_BATCH
    stored = [0]

    async def worker(producer: Producer, queue: MessageQueue) -> None:
        while left[0] > 0:
            left[0] -= 1
            await producer.send_batch(msgs, queue=queue)
            stored[0] += _PREFILL_BATCH

    t0 = time.perf_counter()
    async with _producers(namesrv, cfg.producers) as producers:
        await asyncio.gather(*(worker(producers[k % len(producers)], queues[k % len(queues)])
                               for k in range(max(len(queues), 32))))
    dt = time.perf_counter() - t0
    return {"prefill_msgs": stored[0], "prefill_seconds": dt,
            "prefill_msgs_per_s": stored[0] / dt}


async def _max_offsets(namesrv: str, topic: str, total: int) -> dict[MessageQueue, int]:
    """Each queue's max offset, once they add up to ``total`` (dispatch is asynchronous)."""
    async with AdminClient(namesrv) as admin:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while True:
            status = await admin.topic_status(topic)
            if sum(s.max_offset for s in status) >= total:
                return {s.queue: s.max_offset for s in status}
            if loop.time() > deadline:
                raise BenchError(f"{total} messages of {topic} not dispatched after 120 s")
            await asyncio.sleep(0.05)  # dispatch runs in the broker process


async def _consume_loop(consumer: PullConsumer, meter: Meter, total: int) -> None:
    while meter.count < total:
        batch = await consumer.poll(timeout=1.0, max_messages=1 << 20)
        meter.count += len(batch)


async def _columns_loop(consumer: PullConsumer, meter: Meter, total: int) -> int:
    """:func:`_consume_loop` through ``poll_batches``, taking every body; their bytes."""
    nbytes = 0
    while meter.count < total:
        msgs, size = await take_columns(consumer, timeout=1.0, limit=1 << 20)
        meter.count += msgs
        nbytes += size
    return nbytes


async def _raw_pull_loop(inst: ClientInstance, group: str, queue: MessageQueue, end: int,
                         cfg: BrokerBenchConfig, meter: Meter) -> None:
    addr = await inst.master_address(queue)
    ext = PullMessageRequestHeader(
        consumer_group=group, topic=queue.topic, queue_id=queue.queue_id, queue_offset=0,
        max_msg_nums=cfg.pull_batch, sys_flag=0, commit_offset=0, suspend_timeout_millis=0,
        subscription="*", sub_version=0, expression_type="TAG",
        broker_name=queue.broker_name).to_ext()
    offset, lat, clock = 0, meter.latencies, time.perf_counter
    while offset < end:
        ext["queueOffset"] = str(offset)
        t0 = clock()
        response = await inst.request(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                                                    ext))
        if response.code != ResponseCode.SUCCESS:
            raise error_for_code(response.code, response.remark or "", address=addr)
        lat.append(clock() - t0)
        nxt = int(response.ext_fields["nextBeginOffset"])
        meter.count += nxt - offset
        offset = nxt


async def _read_all(cfg: BrokerBenchConfig, namesrv: str, ends: dict[MessageQueue, int],
                    meter: Meter, columns: bool = False) -> None:
    group = f"bench_consumer_{os.getpid()}{'_columns' if columns else ''}"
    config = dataclasses.replace(_client_config(namesrv, 0), pull_batch_size=cfg.pull_batch)
    consumer = PullConsumer(group, config=config)
    await consumer.start()
    try:
        if cfg.raw:
            await asyncio.gather(*(_raw_pull_loop(consumer.instance, group, mq, end, cfg, meter)
                                   for mq, end in ends.items()))
            return
        consumer.assign(ends)
        await consumer.seek_to_beginning()
        if columns:
            await _columns_loop(consumer, meter, sum(ends.values()))
        else:
            await _consume_loop(consumer, meter, sum(ends.values()))
    finally:
        await consumer.close(commit=False)


async def run_consume(cfg: BrokerBenchConfig, report: Report | None = None) -> dict[str, Any]:
    """The consume workload (module docstring): pre-fill, then read everything back."""

    async def body(namesrv: str, pids: Pids, queues: list[MessageQueue]
                   ) -> dict[str, Any]:
        prefill = await _prefill(cfg, namesrv, queues)
        ends = await _max_offsets(namesrv, cfg.topic, prefill["prefill_msgs"])
        result = await _read_measured(cfg, namesrv, pids, ends, prefill, report, False)
        if cfg.columns:
            result["columns"] = await _read_measured(cfg, namesrv, pids, ends, prefill,
                                                     report, True)
        return result

    return await _run(cfg, body)


async def _read_measured(cfg: BrokerBenchConfig, namesrv: str, pids: Pids,
                         ends: dict[MessageQueue, int], prefill: dict[str, Any],
                         report: Report | None, columns: bool) -> dict[str, Any]:
    """One reading of the pre-filled topic, sampled: the consume row."""
    meter = Meter()
    sampler = Sampler(meter, pids.broker, pids.replica)
    reader = asyncio.ensure_future(_read_all(cfg, namesrv, ends, meter, columns))
    try:
        await measure(sampler, cfg.duration, report, reader)
    finally:
        if not reader.done():
            reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    failure = None if reader.cancelled() else reader.exception()
    if failure is not None:
        raise failure
    total = sum(ends.values())
    extra = {**prefill, "consumed": meter.count, "complete": meter.count >= total}
    return _result("consume-columns" if columns else "consume", cfg, sampler, extra)


# ---------------------------------------------------------------------- latency


async def _receive_loop(consumer: PullConsumer, meter: Meter, running: list[bool]) -> None:
    lat = meter.latencies
    unpack = STAMP.unpack_from
    clock = time.perf_counter_ns
    while running[0]:
        batch = await consumer.poll(timeout=0.5, max_messages=1 << 16)
        now = clock()
        for msg in batch:
            lat.append((now - unpack(msg.body)[0]) / 1e9)
        meter.count += len(batch)


async def _receive_columns_loop(consumer: PullConsumer, meter: Meter,
                                running: list[bool]) -> None:
    """:func:`_receive_loop` through ``poll_batches``: the stamps are read from the bodies
    without a message object each, so that the consumer keeps up with batched rates."""
    lat = meter.latencies
    unpack = STAMP.unpack_from
    clock = time.perf_counter_ns
    while running[0]:
        batches = await consumer.poll_batches(timeout=0.5, max_messages=1 << 16)
        now = clock()
        for batch in batches:
            bodies = batch.bodies
            stamps = np.fromiter((unpack(b)[0] for b in bodies), np.int64, len(bodies))
            lat.frombytes(((now - stamps) / 1e9).tobytes())
            meter.count += len(bodies)


async def _lag_sampler(cfg: BrokerBenchConfig, namesrv: str, queues: list[MessageQueue]
                       ) -> ReplicationLagSampler | None:
    """With a replica, a sampler of its lag behind the master that ``queues`` live on."""
    if cfg.replica is None:
        return None
    async with AdminClient(namesrv) as admin:
        master = (await admin.masters())[queues[0].broker_name]
    return ReplicationLagSampler(namesrv, master)


@contextlib.asynccontextmanager
async def _latency_consumer(cfg: BrokerBenchConfig, namesrv: str, queues: list[MessageQueue]
                            ) -> AsyncIterator[PullConsumer | None]:
    """The consumer of the latency workload, its pulls already held by the broker at the
    end of every queue; ``None`` when ``cfg.receive`` is off."""
    if not cfg.receive:
        yield None
        return
    config = dataclasses.replace(_client_config(namesrv, cfg.producers),
                                 pull_batch_size=cfg.pull_batch)
    consumer = PullConsumer(f"bench_latency_{os.getpid()}", config=config)
    await consumer.start()
    try:
        consumer.assign(queues)
        await consumer.seek_to_end()
        await consumer.poll(timeout=0.2)  # the pulls are now held by the broker
        yield consumer
    finally:
        await consumer.close(commit=False)


async def run_latency(cfg: BrokerBenchConfig, report: Report | None = None) -> dict[str, Any]:
    """The latency workload (module docstring): end-to-end at a fixed rate."""
    if cfg.size < STAMP.size:
        raise ValueError(f"latency needs bodies of at least {STAMP.size} bytes")

    async def body(namesrv: str, pids: Pids, queues: list[MessageQueue]
                   ) -> dict[str, Any]:
        received, acks, running = Meter(), Meter(), [True]
        lag = await _lag_sampler(cfg, namesrv, queues)
        async with (_latency_consumer(cfg, namesrv, queues) as consumer,
                    _producers(namesrv, 1) as (producer,),
                    _batchers(cfg, [producer]) as batchers):
            pacer = Pacer(producer, batchers[0] if batchers else None, queues, acks,
                          topic=cfg.topic, size=cfg.size, rate=cfg.rate,
                          in_flight=cfg.in_flight, batch=cfg.batch)
            tasks = [asyncio.ensure_future(pacer.run(running))]
            if consumer is not None:
                receive = _receive_columns_loop if cfg.batch > 1 else _receive_loop
                tasks.append(asyncio.ensure_future(receive(consumer, received, running)))
            if lag is not None:
                tasks.append(asyncio.ensure_future(lag.run(running)))
            # without a consumer, the rows count acknowledged messages
            sampler, ack_sampler = (Sampler(received if consumer else acks, pids.broker,
                                            pids.replica), Sampler(acks, None))

            def both(row: dict[str, Any]) -> None:
                ack = ack_sampler.tick()
                row["sent_per_s"], row["ack_p99_ms"] = ack["msgs_per_s"], ack["p99_ms"]
                if report is not None:
                    report(row)

            try:
                await measure(sampler, cfg.duration, both)
            finally:
                await _stop(tasks, running)
                requests = {**_shipped(batchers), **_pulled(consumer, received.count)}
        ack = ack_sampler.summary(cfg.warmup)
        late = sorted(pacer.late) or [0.0]
        extra = {**requests, "sent": pacer.sent, "send_calls": pacer.calls,
                 "skipped_over_in_flight": pacer.skipped,
                 "pacer_late_p99_ms": late[int(0.99 * (len(late) - 1))] * 1e3,
                 "pacer_late_max_ms": late[-1] * 1e3,
                 "send_errors": acks.errors, "send_last_error": acks.last_error or None,
                 "ack": {k: ack.get(k) for k in ("msgs_per_s", "p50_ms", "p99_ms", "p999_ms")}}
        if cfg.receive:
            extra["received"] = received.count
        if lag is not None:
            extra["replication_lag"] = lag.summary(cfg.warmup)
        return _result("latency", cfg, sampler, extra)

    return await _run(cfg, body)

