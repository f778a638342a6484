"""``tidemq bench spark``: the Spark source's batch read rate against the raw blocking
client, in one run on one topic.

=====  ==================================================================================
phase  what is measured
=====  ==================================================================================
fill   ``messages`` small messages (a JSON order of about 60 bytes, ``KEYS`` and ``TAGS``)
       sent to a topic of ``queues`` queues with ``send_batch`` of ``batch`` messages from
       ``producers`` threads; then wait until every message is visible
raw    every queue read start to end with
       :class:`~tidemq.client.blocking.BlockingPullConsumer` (``pull`` of ``pull_batch``
       messages, each decoded into ``MessageExt`` objects) by as many reader processes as
       Spark runs tasks at once (the master's cores, at most one per queue; queues dealt
       round robin), started before the clock, ``repeat`` runs: rows/s. Processes, not
       threads: Spark's tasks run in separate Python workers, and threads of one
       interpreter would share one GIL
spark  ``spark.read.format("tidemq")`` of the whole topic in ``master`` (``local[2]``):
       one untimed warm-up run into each sink (JVM start, worker processes, JIT), then
       ``repeat`` timed runs into each sink -- ``noop`` (every row through a sink that drops it) and
       ``count()`` -- rows / wall seconds of the job
=====  ==================================================================================

Medians are quoted. CPU per row is reported next to each rate -- the broker process,
and the reading side (this process for *raw*; the JVM with its Python workers for
*spark*, and the JVM alone) -- because these machines are shared: a rate moves with the
load, CPU per row much less; so is the ratio of the two rates measured in one run.
Targets: Spark >= 300,000 rows/s and Spark / raw >= 0.5.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import re
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tidemq.bench.process import BenchError, BrokerProcess
from tidemq.client import AdminClient, ClientConfig
from tidemq.client.blocking import BlockingProducer, BlockingPullConsumer
from tidemq.errors import TideMQError
from tidemq.types import Message, MessageQueue

__all__ = ["TARGETS", "SparkBenchConfig", "master_cores", "run_spark_bench",
           "tree_cpu_seconds"]

TARGETS = {"spark_rows_per_s": 300_000.0, "spark_over_raw": 0.5}
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

Report = Callable[[str], None]


@dataclasses.dataclass(slots=True)
class SparkBenchConfig:
    messages: int = 1_000_000
    queues: int = 4
    batch: int = 1000
    producers: int = 4
    pull_batch: int | None = None  # None: the source's default pullBatchSize
    master: str = "local[2]"
    repeat: int = 3
    topic: str = "BenchSpark"
    namesrv: str | None = None
    broker_settings: tuple[str, ...] = ()
    data_dir: str | None = None

    def check(self) -> None:
        for name in ("messages", "queues", "batch", "producers", "repeat"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.pull_batch is not None and self.pull_batch < 1:
            raise ValueError("pull_batch must be at least 1")


def _ticks(pid: int) -> tuple[int, list[int]]:
    """utime + stime + cutime + cstime of ``pid`` in clock ticks, and its children (of
    every thread: a JVM forks from whichever thread asks)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):
            kids.extend(int(p) for p in (task / "children").read_text().split())
    return sum(int(x) for x in fields[11:15]), kids


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and every descendant, living or reaped (a reaped child's
    time is in its parent's ``cutime``)."""
    total, todo = 0, [pid]
    while todo:
        with contextlib.suppress(OSError, ValueError, IndexError):
            ticks, kids = _ticks(todo.pop())
            total += ticks
            todo.extend(kids)
    return total / _CLK_TCK


def _body(i: int) -> bytes:
    return (f'{{"order_id":{i},"customer":"c{i % 9973}","amount":{i % 997}.{i % 100:02d},'
            f'"event_time":{1_700_000_000_000 + i}}}').encode()


def _fill(cfg: SparkBenchConfig, namesrv: str) -> dict[str, Any]:
    starts = range(0, cfg.messages, cfg.batch)
    producer = BlockingProducer("bench-spark-fill", namesrv)

    def send(first: int) -> None:
        msgs = [Message(cfg.topic, _body(i), {"KEYS": f"o{i}", "TAGS": "order"})
                for i in range(first, min(cfg.messages, first + cfg.batch))]
        producer.send_batch(msgs)

    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(cfg.producers) as pool:
            for future in [pool.submit(send, s) for s in starts]:
                future.result()
    finally:
        producer.close()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "msgs_per_s": cfg.messages / seconds}


def _queues(consumer: BlockingPullConsumer, topic: str) -> list[MessageQueue]:
    return sorted(consumer.queues(topic), key=lambda q: (q.broker_name, q.queue_id))


def _wait_visible(cfg: SparkBenchConfig, namesrv: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    with BlockingPullConsumer("bench-spark-probe", namesrv) as c:
        while time.monotonic() < deadline:
            if sum(c.get_max_offset(q) for q in _queues(c, cfg.topic)) >= cfg.messages:
                return
            time.sleep(0.1)
    raise BenchError(f"{cfg.topic}: not all {cfg.messages} messages became visible")


_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")


def master_cores(master: str) -> int:
    """Tasks a ``local`` master runs at once (``local``: 1, ``local[N]``: N, ``local[*]``:
    the CPUs); 2 for other masters, whose executors this process cannot see."""
    match = _LOCAL.fullmatch(master.strip())
    if match is None:
        return 2
    cores = match.group(1)
    if cores is None:
        return 1
    return (os.cpu_count() or 1) if cores == "*" else max(1, int(cores))


def _read_queues(namesrv: str, queues: list[tuple[str, str, int]], pull_batch: int) -> int:
    """One raw reader: ``queues`` start to end; returns the rows (a pool worker)."""
    rows = 0
    with BlockingPullConsumer("bench-spark-raw", namesrv) as c:
        for topic, broker, queue_id in queues:
            q = MessageQueue(topic, broker, queue_id)
            end, offset = c.get_max_offset(q), c.get_min_offset(q)
            while offset < end:
                result = c.pull(q, offset, min(pull_batch, end - offset))
                rows += len(result.messages)
                if result.next_offset <= offset:
                    raise BenchError(f"{q}: no progress at {offset}")
                offset = result.next_offset
    return rows


def _ready() -> int:
    return os.getpid()


def _raw_once(cfg: SparkBenchConfig, namesrv: str, pull_batch: int, pool: Executor,
              workers: int) -> int:
    with BlockingPullConsumer("bench-spark-probe", namesrv) as c:
        queues = [(q.topic, q.broker_name, q.queue_id) for q in _queues(c, cfg.topic)]
    shares = [queues[i::workers] for i in range(workers)]
    futures = [pool.submit(_read_queues, namesrv, share, pull_batch)
               for share in shares if share]
    return sum(f.result() for f in futures)


def _own_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


@contextlib.contextmanager
def _cpu(pids: dict[str, int | None], own: dict[str, int] | None = None
         ) -> Iterator[dict[str, float]]:
    """CPU seconds used while inside by each process tree of ``pids`` (``0``: this
    process) and by each single process of ``own``."""
    def now() -> dict[str, float]:
        out = {name: (time.process_time() if pid == 0 else tree_cpu_seconds(pid))
               for name, pid in pids.items() if pid is not None}
        out.update({name: _own_cpu_seconds(pid) for name, pid in (own or {}).items()})
        return out

    out: dict[str, float] = {}
    before = now()
    yield out
    after = now()
    out.update({name: after[name] - before[name] for name in before})


def _summary(runs: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    rate = statistics.median(r["rows_per_s"] for r in runs)
    cpu = {name: statistics.median(r["cpu_s"][name] for r in runs) * 1e6 / rows
           for name in runs[0]["cpu_s"]}
    return {"runs": runs, "median_rows_per_s": rate, "cpu_us_per_row": cpu}


def _raw(cfg: SparkBenchConfig, namesrv: str, pull_batch: int, broker_pid: int | None,
         say: Report) -> dict[str, Any]:
    workers = min(master_cores(cfg.master), cfg.queues)
    runs = []
    spawn = multiprocessing.get_context("spawn")  # no fork of a threaded process
    with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        # Start the readers off the clock; the client's CPU is theirs and this process's
        # own (not its tree, which holds the broker when the bench started it).
        readers = {pid: f"reader {pid}" for pid in
                   [f.result() for f in [pool.submit(_ready) for _ in range(workers)]]}
        for i in range(cfg.repeat):
            with _cpu({"broker": broker_pid, **{n: p for p, n in readers.items()}},
                      {"self": os.getpid()}) as cpu:
                t0 = time.perf_counter()
                rows = _raw_once(cfg, namesrv, pull_batch, pool, workers)
                seconds = time.perf_counter() - t0
            if rows != cfg.messages:
                raise BenchError(f"the raw read returned {rows} rows, not {cfg.messages}")
            client = sum(cpu.pop(n) for n in readers.values()) + cpu.pop("self")
            cpu = {"client": client, **cpu}
            runs.append({"seconds": seconds, "rows_per_s": rows / seconds, "cpu_s": cpu})
            say(f"raw run {i + 1} ({workers} reader processes): {rows / seconds:,.0f} rows/s "
                f"({seconds:.2f} s)")
    out = _summary(runs, cfg.messages)
    out["workers"] = workers
    return out


def _spark(cfg: SparkBenchConfig, namesrv: str, broker_pid: int | None,
           say: Report) -> dict[str, Any]:
    from tidemq.spark.session import jvm_pid, session_scope, timed_read

    t0 = time.perf_counter()
    with session_scope(cfg.master, "tidemq-bench-spark") as spark:
        out: dict[str, Any] = {"session_s": time.perf_counter() - t0}
        options = {"namesrv": namesrv, "topic": cfg.topic}
        if cfg.pull_batch is not None:
            options["pullBatchSize"] = str(cfg.pull_batch)
        rows, warm = timed_read(spark, options, "count")
        if rows != cfg.messages:
            raise BenchError(f"Spark counted {rows} rows, not {cfg.messages}")
        _rows, warm_noop = timed_read(spark, options, "noop")
        out["warmup_s"] = {"count": warm, "noop": warm_noop}
        say(f"spark warm-up: count {warm:.2f} s, noop {warm_noop:.2f} s")
        jvm = jvm_pid(spark)
        pids = {"spark": jvm, "broker": broker_pid}
        for sink in ("noop", "count"):
            runs = []
            for i in range(cfg.repeat):
                with _cpu(pids, {"jvm": jvm}) as cpu:
                    _rows, seconds = timed_read(spark, options, sink)
                runs.append({"seconds": seconds, "rows_per_s": cfg.messages / seconds,
                             "cpu_s": cpu})
                say(f"spark {sink} run {i + 1}: {cfg.messages / seconds:,.0f} rows/s "
                    f"({seconds:.2f} s)")
            out[sink] = _summary(runs, cfg.messages)
    return out


async def _create_topic(cfg: SparkBenchConfig, namesrv: str) -> None:
    config = ClientConfig(namesrv_addr=(namesrv,))
    async with AdminClient(config=config) as admin:
        await admin.create_topic(cfg.topic, read_queue_nums=cfg.queues,
                                 write_queue_nums=cfg.queues)
        for _ in range(300):  # the broker registers the new topic with the name server
            with contextlib.suppress(TideMQError):
                route = await admin.topic_route(cfg.topic)
                if route.queue_datas:
                    return
            await asyncio.sleep(0.05)
    raise BenchError(f"{cfg.topic} got no route")


def _verdicts(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spark = result["spark"]["noop"]["median_rows_per_s"]
    ratio = spark / result["raw"]["median_rows_per_s"]
    values = {"spark_rows_per_s": spark, "spark_over_raw": ratio}
    return {k: {"value": v, "target": TARGETS[k], "met": v >= TARGETS[k]}
            for k, v in values.items()}


def run_spark_bench(cfg: SparkBenchConfig, report: Report | None = None) -> dict[str, Any]:
    """Every phase of the module docstring; returns the results and the verdicts."""
    cfg.check()
    say = report or (lambda _line: None)
    result: dict[str, Any] = {"config": dataclasses.asdict(cfg)}
    broker: BrokerProcess | None = None
    namesrv = cfg.namesrv
    if namesrv is None:
        broker = BrokerProcess(settings=cfg.broker_settings, data_dir=cfg.data_dir)
        namesrv = asyncio.run(broker.start())
        say(f"broker process {broker.pid} on {broker.data}, name server {namesrv}")
    try:
        from tidemq.spark.options import DEFAULT_PULL_BATCH

        pull_batch = cfg.pull_batch or DEFAULT_PULL_BATCH
        result["pull_batch"] = pull_batch
        asyncio.run(_create_topic(cfg, namesrv))
        say(f"fill: {cfg.messages:,} messages into {cfg.topic} ({cfg.queues} queues) ...")
        result["fill"] = _fill(cfg, namesrv)
        _wait_visible(cfg, namesrv)
        say(f"fill: {result['fill']['msgs_per_s']:,.0f} msg/s")
        broker_pid = broker.pid if broker is not None else None
        result["raw"] = _raw(cfg, namesrv, pull_batch, broker_pid, say)
        result["spark"] = _spark(cfg, namesrv, broker_pid, say)
    finally:
        if broker is not None:
            asyncio.run(broker.stop())
    result["verdicts"] = _verdicts(result)
    return result
