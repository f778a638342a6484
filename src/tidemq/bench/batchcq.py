"""``tidemq bench batchcq``: inner batches (RIP-26) against outer batches, in one run.

One broker process (``tidemq standalone`` on free ports with a temporary data directory,
:class:`~tidemq.bench.process.BrokerProcess`) and this process as the one producer and
consumer. Three topics of ``queues`` queues: two BatchCQ, one SimpleCQ. Every send is a
:meth:`~tidemq.client.Producer.send_batch` of ``batch`` messages of ``size`` bytes
(compressible text, the same bodies in every phase); ``in_flight`` sends run at once, send
``k`` to queue ``k mod queues``. The application's :class:`~tidemq.types.Message` objects
are made once and reused; everything the client library does per send -- checks, fresh
``UNIQ_KEY``\\ s, encoding, compression, the request -- is measured.

=============  ========================================================================
phase          what is measured (messages/s over ``duration`` s after ``warmup`` s)
=============  ========================================================================
inner          send_batch to a BatchCQ topic, uncompressed: one record per batch
inner-zstd     the same with zstd end-to-end compression (the producer's default)
outer          send_batch to a SimpleCQ topic: the broker stores a record per message
consume        a PullConsumer reads the ``inner`` topic from its first offset
               (``pull_batch`` messages per pull): messages returned by ``poll``
consume-       the same read with ``poll_batches`` (columns, no object per message;
columns        every body is taken: its bytes are summed)
consume-zstd   ``consume`` for the ``inner-zstd`` topic (the consumer decompresses)
consume-zstd-  the same read with ``poll_batches``
columns
=============  ========================================================================

Each phase reports client and broker CPU (100 % is one core) and CPU nanoseconds per
message on each side, so a reader sees which side saturates and what each would sustain
with a core of its own -- the figure that survives a shared, busy machine. With
``profile_dir`` every phase is also sampled by ``py-spy`` -- the broker
process and this one -- and the heaviest functions (own time) are summarised.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tidemq.bench.columns import take_columns
from tidemq.bench.load import join_load
from tidemq.bench.process import (
    BrokerProcess,
    process_cpu_seconds,
    thread_cpu_seconds,
    thread_cpu_split,
)
from tidemq.bench.topics import wait_routed
from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
)
from tidemq.client.sending import BatchCompression
from tidemq.codec.compression import CompressionType
from tidemq.errors import TideMQError

__all__ = ["PHASES", "BatchCqBenchConfig", "run_batchcq"]

PHASES = ("inner", "inner-zstd", "outer", "consume", "consume-columns", "consume-zstd",
          "consume-zstd-columns")
_TOPICS = {"inner": "BcqInner", "inner-zstd": "BcqZstd", "outer": "BcqOuter"}
_POOL = 16  # distinct message lists the senders take turns with
_LINE = re.compile(r":\d+\)$")


@dataclasses.dataclass(slots=True)
class BatchCqBenchConfig:
    size: int = 128
    batch: int = 100
    queues: int = 8
    in_flight: int = 32
    duration: float = 5.0
    warmup: float = 1.0
    pull_batch: int = 2000
    #: Upper bound on each consume phase, seconds.
    consume_seconds: float = 60.0
    zstd_level: int | None = None
    broker_settings: tuple[str, ...] = ()
    data_dir: str | None = None
    #: Where py-spy profiles go (``None``: no profiling).
    profile_dir: str | None = None

    def check(self) -> None:
        for name in ("size", "batch", "queues", "in_flight", "pull_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.batch > 0x7FFF:
            raise ValueError("an inner batch holds at most 32767 messages")
        if self.duration <= 0 or self.warmup < 0:
            raise ValueError("duration must be positive and warmup not negative")
        if self.profile_dir is not None and _py_spy() is None:
            raise ValueError("profiling needs py-spy on PATH or next to the interpreter")


def payloads(cfg: BatchCqBenchConfig, topic: str) -> list[list[Message]]:
    """``_POOL`` lists of ``batch`` messages with compressible ``size``-byte bodies: a
    JSON telemetry record, repeated to fill the size. A batch of them compresses far
    better than one record would (a batch of 100 x 128 B: 20.2 kB of entries to ~950 B
    with zstd level 3, ~15 commit-log bytes a message), since neighbours share most of
    their text."""
    pool = []
    for p in range(_POOL):
        msgs = []
        for i in range(cfg.batch):
            n = p * cfg.batch + i
            text = (f'{{"device":"sensor-{n % 997:04d}","site":"plant-{n % 7}",'
                    f'"metric":"temperature","value":{20 + (n * 37) % 150 / 10:.1f},'
                    f'"unit":"celsius","seq":{n}}}')
            body = (text * (cfg.size // len(text) + 1)).encode()[: cfg.size]
            msgs.append(Message(topic, body))
        pool.append(msgs)
    return pool


# ---------------------------------------------------------------------- measuring


@dataclasses.dataclass(slots=True)
class _Window:
    """Messages, wall time and CPU of both processes -- and of each broker thread -- over
    the measured part of a phase."""

    broker_pid: int
    t0: float = 0.0
    client0: float = 0.0
    broker0: float = 0.0
    threads0: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    msgs: int = 0

    def open(self) -> None:
        self.t0 = time.perf_counter()
        self.client0 = time.process_time()
        self.broker0 = process_cpu_seconds(self.broker_pid) or 0.0
        self.threads0 = thread_cpu_seconds(self.broker_pid)
        self.msgs = 0

    def close(self, name: str, **extra: Any) -> dict[str, Any]:
        """The row of the phase. ``*_ns_per_msg`` is CPU time per message: what a side
        would sustain with a whole core is 1e9 / that (``*_msgs_per_core_s``).
        ``broker_user_ns_per_msg``/``broker_sys_ns_per_msg`` and ``broker_threads``
        split the broker's CPU into user and kernel time and by thread
        (:func:`~tidemq.bench.process.thread_cpu_split`)."""
        dt = time.perf_counter() - self.t0
        client = time.process_time() - self.client0
        broker = (process_cpu_seconds(self.broker_pid) or 0.0) - self.broker0
        msgs = max(self.msgs, 1)
        split = thread_cpu_split(self.threads0, thread_cpu_seconds(self.broker_pid), dt,
                                 self.msgs)
        return {"phase": name, "msgs": self.msgs, "seconds": dt,
                "msgs_per_s": self.msgs / dt if dt > 0 else 0.0,
                "client_cpu_pct": 100 * client / dt if dt > 0 else 0.0,
                "broker_cpu_pct": 100 * broker / dt if dt > 0 else 0.0,
                "client_ns_per_msg": 1e9 * client / msgs,
                "broker_ns_per_msg": 1e9 * broker / msgs,
                "client_msgs_per_core_s": msgs / client if client > 0 else None,
                "broker_msgs_per_core_s": msgs / broker if broker > 0 else None,
                "broker_user_ns_per_msg": split["user_ns_per_msg"],
                "broker_sys_ns_per_msg": split["sys_ns_per_msg"],
                "broker_threads": split["threads"], **extra}


def _py_spy() -> str | None:
    found = shutil.which("py-spy")
    beside = Path(sys.executable).with_name("py-spy")
    return found or (str(beside) if beside.exists() else None)


@contextlib.contextmanager
def _profiled(cfg: BatchCqBenchConfig, phase: str, broker_pid: int,
              seconds: float) -> Iterator[dict[str, str]]:
    """py-spy on the broker and on this process for ``seconds`` (collapsed stacks)."""
    out: dict[str, str] = {}
    spy = _py_spy()
    if cfg.profile_dir is None or spy is None:
        yield out
        return
    directory = Path(cfg.profile_dir)
    directory.mkdir(parents=True, exist_ok=True)
    procs = []
    for side, pid in (("broker", broker_pid), ("client", os.getpid())):
        path = directory / f"{phase}-{side}.txt"
        out[side] = str(path)
        procs.append(subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--rate", "200", "--format", "raw",
             "--duration", str(max(1, round(seconds))), "--nonblocking", "-o", str(path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        yield out
    finally:
        for proc in procs:
            try:
                proc.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                proc.kill()


def top_functions(collapsed: str, limit: int = 8) -> list[tuple[str, float]]:
    """The functions with the most own samples in a py-spy ``raw`` (collapsed) file, as
    ``(function (file), share of all samples)``. Samples count threads that were not idle;
    ``Runner.run`` as the leaf is time inside the (C) event loop itself."""
    own: Counter[str] = Counter()
    total = 0
    try:
        lines = Path(collapsed).read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        leaf = _LINE.sub(")", stack.rsplit(";", 1)[-1].strip())
        n = int(count)
        total += n
        own[leaf] += n
    return [(name, n / total) for name, n in own.most_common(limit)] if total else []


# ---------------------------------------------------------------------- phases


async def _log_offset(admin: AdminClient, broker: BrokerProcess) -> int | None:
    """The broker's commit-log end offset (GET_BROKER_RUNTIME_INFO), if it says."""
    with contextlib.suppress(TideMQError, ValueError):
        return int((await admin.broker_status(broker.broker_addr))["commitLogMaxOffset"])
    return None


async def _produce(cfg: BatchCqBenchConfig, producer: Producer, admin: AdminClient,
                   phase: str, queues: list[MessageQueue],
                   broker: BrokerProcess) -> dict[str, Any]:
    """A produce phase's row; ``log_bytes_per_msg`` is what the broker's commit log grew
    by per measured message (every byte of it is page cache the kernel had to find)."""
    broker_pid = broker.pid
    topic = _TOPICS[phase]
    pool = payloads(cfg, topic)
    compression = BatchCompression(CompressionType.ZSTD, cfg.zstd_level) if (
        phase == "inner-zstd") else BatchCompression(None)
    window = _Window(broker_pid)
    measuring = [False]
    running = [True]
    errors: list[str] = []
    mine = [mq for mq in queues if mq.topic == topic]

    async def sender(k: int) -> None:
        mq = mine[k % len(mine)]
        i = k
        while running[0]:
            msgs = pool[i % _POOL]
            i += 1
            try:
                await producer.send_batch(msgs, queue=mq, compression=compression)
            except TideMQError as exc:
                errors.append(str(exc))
                await asyncio.sleep(0.01)
                continue
            if measuring[0]:
                window.msgs += len(msgs)

    tasks = [asyncio.ensure_future(sender(k)) for k in range(cfg.in_flight)]
    try:
        await asyncio.sleep(cfg.warmup)
        with _profiled(cfg, phase, broker_pid, cfg.duration) as profiles:
            start = await _log_offset(admin, broker)
            window.open()
            measuring[0] = True
            await asyncio.sleep(cfg.duration)
            measuring[0] = False
            result = window.close(phase, errors=len(errors),
                                  last_error=errors[-1] if errors else "")
            end = await _log_offset(admin, broker)
            if start is not None and end is not None and window.msgs:
                result["log_bytes_per_msg"] = (end - start) / window.msgs
    finally:
        running[0] = False
        await join_load(tasks)
    if profiles:
        result["profiles"] = profiles
    return result


async def _read_objects(consumer: PullConsumer, limit: int) -> tuple[int, int]:
    """One poll: messages and body bytes (not summed: the objects hold their bodies)."""
    return len(await consumer.poll(timeout=1.0, max_messages=limit)), 0


async def _read_columns(consumer: PullConsumer, limit: int) -> tuple[int, int]:
    """One poll_batches: messages, and the bytes of every body taken from the columns."""
    return await take_columns(consumer, timeout=1.0, limit=limit)


async def _consume(cfg: BatchCqBenchConfig, namesrv: str, phase: str, topic: str,
                   queues: list[MessageQueue], broker_pid: int) -> dict[str, Any]:
    mine = [mq for mq in queues if mq.topic == topic]
    async with AdminClient(namesrv) as admin:
        total = sum(s.max_offset - s.min_offset for s in await admin.topic_status(topic))
    config = dataclasses.replace(_client_config(namesrv, phase), pull_batch_size=cfg.pull_batch)
    window = _Window(broker_pid)
    seconds = min(cfg.consume_seconds, max(1.0, total / 200_000))
    async with PullConsumer(f"bench_{phase.replace('-', '_')}", config=config,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
                            ) as consumer:
        consumer.assign(mine)
        await consumer.seek_to_beginning()
        loop = asyncio.get_running_loop()
        with _profiled(cfg, phase, broker_pid, seconds) as profiles:
            window.open()
            deadline = loop.time() + cfg.consume_seconds
            read = _read_columns if phase.endswith("-columns") else _read_objects
            nbytes = 0
            while window.msgs < total and loop.time() < deadline:
                msgs, size = await read(consumer, cfg.pull_batch * 8)
                window.msgs += msgs
                nbytes += size
            result = window.close(phase, expected=total)
            if nbytes:
                result["body_bytes"] = nbytes
    if profiles:
        result["profiles"] = profiles
    return result


# ---------------------------------------------------------------------- the run


def _client_config(namesrv: str, name: str) -> ClientConfig:
    return ClientConfig(namesrv_addr=(namesrv,), instance_name=f"batchcq-{os.getpid()}-{name}",
                        send_msg_timeout=30.0, request_timeout=30.0, long_polling_timeout=1.0)


async def _topics(namesrv: str, cfg: BatchCqBenchConfig) -> list[MessageQueue]:
    async with AdminClient(namesrv) as admin:
        for phase, topic in _TOPICS.items():
            attrs: dict[str, str | None] | None = (
                None if phase == "outer" else {"queue.type": "BatchCQ"})
            await admin.create_topic(topic, read_queue_nums=cfg.queues,
                                     write_queue_nums=cfg.queues, attributes=attrs)
        queues: list[MessageQueue] = []
        for topic in _TOPICS.values():
            queues += (await wait_routed(admin, topic, cfg.queues)).publish_queues
        return queues


def _ratio(rows: dict[str, dict[str, Any]], top: str, bottom: str) -> float | None:
    below = rows[bottom]["msgs_per_s"]
    return rows[top]["msgs_per_s"] / below if below else None


async def run_batchcq(cfg: BatchCqBenchConfig,
                      report: Any = None) -> dict[str, Any]:
    """Every phase in one run against one broker process; ``report(row)`` is called after
    each phase. Returns the configuration, the phase rows and the ratios."""
    cfg.check()
    rows: dict[str, dict[str, Any]] = {}
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    broker = BrokerProcess(settings=cfg.broker_settings, data_dir=cfg.data_dir)
    try:
        namesrv = await broker.start()
        queues = await _topics(namesrv, cfg)
        producer = Producer("bench_batchcq", config=_client_config(namesrv, "producer"))
        await producer.start()
        try:
            async with AdminClient(namesrv) as admin:
                for phase in ("inner", "inner-zstd", "outer"):
                    rows[phase] = await _produce(cfg, producer, admin, phase, queues, broker)
                    if report is not None:
                        report(rows[phase])
        finally:
            await producer.close()
        for phase, topic in (("consume", _TOPICS["inner"]),
                             ("consume-columns", _TOPICS["inner"]),
                             ("consume-zstd", _TOPICS["inner-zstd"]),
                             ("consume-zstd-columns", _TOPICS["inner-zstd"])):
            rows[phase] = await _consume(cfg, namesrv, phase, topic, queues, broker.pid)
            if report is not None:
                report(rows[phase])
    finally:
        await broker.stop()
        gc.set_threshold(*old)
        gc.unfreeze()
    for row in rows.values():
        if "profiles" in row:
            row["top"] = {side: top_functions(path) for side, path in row["profiles"].items()}
    outer = rows["outer"]["msgs_per_s"]
    ratios = {"inner_over_outer": rows["inner"]["msgs_per_s"] / outer if outer else None,
              "zstd_over_inner": (rows["inner-zstd"]["msgs_per_s"] / rows["inner"]["msgs_per_s"]
                                  if rows["inner"]["msgs_per_s"] else None),
              "columns_over_objects": _ratio(rows, "consume-columns", "consume"),
              "zstd_columns_over_objects": _ratio(rows, "consume-zstd-columns",
                                                  "consume-zstd")}
    return {"command": "batchcq", "argv": sys.argv[1:], "config": dataclasses.asdict(cfg),
            "phases": rows, "ratios": ratios, "cpus": os.cpu_count(),
            "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
