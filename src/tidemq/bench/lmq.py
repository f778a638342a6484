"""``tidemq bench lmq``: a million light message queues on one broker (RIP-28), one run.

=====  ==================================================================================
phase  what is measured, and where
=====  ==================================================================================
a      **Scale.** ``lmqs`` distinct LMQs, each with one message: ``lmqs / fanout`` messages,
       message ``i`` fanned out to LMQs ``i*fanout .. i*fanout+fanout-1``. Built by a
       *child process* with the store in-process (the wire path of one Python broker
       runs at a few thousand sends/s; see docs/benchmarks.md), which reports its RSS
       with every queue hot in its caches. Then ``tidemq standalone`` (name server and
       broker in one process) is started on that store: *restart to serving* is from
       spawning it to the answer of the first pull of a random LMQ, and *broker RSS*
       (``/proc/<pid>/status``: VmRSS, RssAnon, RssFile) is read from that process.
b      **Fan-out dispatch.** In the build child: the dispatcher is paused while the puts
       run, then resumed; LMQ entries / dispatch seconds, for the build (every entry
       creates its queue) and for ``dispatch_messages`` more messages fanned out to random
       existing LMQs. Over the wire, to the broker process, ``wire_messages`` fan-out
       messages to random existing LMQs three ways: ``raw`` (one SEND_MESSAGE_V2
       request each, ``in_flight`` at once, nothing coalesced), ``single``
       (``Producer.send``, ``in_flight`` at once: the client coalesces them into
       batch-protocol requests) and ``batched`` (an ``AutoBatchProducer``: batches of
       fan-out messages per parent queue); acknowledged messages/s, LMQ entries/s and
       the broker's CPU time per message.
c      **Pull latency.** ``pulls`` sequential one-connection pulls (PULL_MESSAGE, max 32)
       of random LMQs from the broker process; p50/p99/p999. In the child: the same with
       ``MessageStore.get``.
d      **File-per-queue comparison** at ``compare_queues`` LMQs (upstream's old cap,
       20,000; fewer where the fd limit cannot give every file queue its two fds, see
       :func:`_compare_queues`), ``compare_messages`` messages fanned out ``fanout``
       ways, each variant in a child process of its own: ``rocksdb`` (this store);
       ``file-cq`` (one record, one 20-byte entry per target in a classic consume queue
       per LMQ -- upstream's file LMQ); ``put-per-target`` (no LMQ: the message stored
       once per target on an ordinary topic). Files and directories on disk, bytes on
       disk, open fds, RSS, put and dispatch rates.
=====  ==================================================================================

File-backed mmap pages count in RSS (RssFile): the commit log's pre-faulted segment and
touched consume-queue pages. They are the page cache, reclaimable, and shared; RssAnon is
the process's own memory. Both are reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemq.bench.meter import percentiles_ms
from tidemq.bench.process import BrokerProcess, process_cpu_seconds, thread_cpu_seconds
from tidemq.client import (
    AdminClient,
    AutoBatchProducer,
    ClientConfig,
    Message,
    MessageQueue,
    Producer,
    lmq_message,
)
from tidemq.client.offsets import max_offset_request, read_offset
from tidemq.client.pull import pull_request
from tidemq.client.stamps import new_uniq_keys
from tidemq.client.subscription import Subscription
from tidemq.codec.bodies import KVTable, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import SendOptions, send_request
from tidemq.errors import ResponseCode, TideMQError
from tidemq.net.client import RemotingClient
from tidemq.store.config import StoreConfig
from tidemq.store.dispatch import DispatchBatch
from tidemq.store.message_store import MessageInput, MessageStore

__all__ = ["TARGETS", "LmqBenchConfig", "run_lmq_bench"]

PARENT = "LmqParent"
TARGETS = {"rss_gib": 1.5, "restart_s": 10.0, "dispatch_entries_per_s": 100_000.0,
           "pull_p99_ms": 5.0, "wire_single_msgs_per_s": 10_000.0,
           "wire_batched_msgs_per_s": 10_000.0}
#: Targets met by reaching them (the others by staying under them).
AT_LEAST = ("dispatch_entries_per_s", "wire_single_msgs_per_s", "wire_batched_msgs_per_s")
VARIANTS = ("rocksdb", "file-cq", "put-per-target")
GIB = 1 << 30
_CHILD = "from tidemq.bench.lmq import child_main; child_main()"

Report = Callable[[str], None]


@dataclasses.dataclass(slots=True)
class LmqBenchConfig:
    lmqs: int = 1_000_000
    fanout: int = 10
    body_size: int = 100
    parent_queues: int = 8
    dispatch_messages: int = 20_000
    pulls: int = 2000
    wire_messages: int = 5000
    in_flight: int = 64
    compare_queues: int = 20_000
    compare_messages: int = 20_000
    segment_size: int = GIB
    directory: str | None = None
    skip_compare: bool = False

    def check(self) -> None:
        for name in ("lmqs", "fanout", "body_size", "parent_queues", "pulls",
                     "compare_queues", "compare_messages", "in_flight"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.lmqs % self.fanout:
            raise ValueError("lmqs must be a multiple of fanout (one message per LMQ)")


def lmq_name(k: int) -> str:
    return f"%LMQ%dev{k:07d}"


def _props(names: list[str]) -> bytes:
    return b"INNER_MULTI_DISPATCH\x01" + ",".join(names).encode() + b"\x02"


def rss(pid: int | str = "self") -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of ``pid`` in bytes (from ``/proc/<pid>/status``)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def disk_usage(root: Path) -> dict[str, int]:
    """Files, directories and allocated bytes under ``root``."""
    files = dirs = allocated = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        dirs += len(dirnames)
        for name in filenames:
            files += 1
            with contextlib.suppress(OSError):
                allocated += os.stat(os.path.join(_dirpath, name)).st_blocks * 512
    return {"files": files, "dirs": dirs, "bytes_on_disk": allocated}


# ---------------------------------------------------------------------- child processes


def _no_other_tenants(_path: Path) -> float:
    """Disk usage as the bench children see it: these machines are shared and their disk
    often sits near the 90 % at which a store turns read-only, whoever filled it."""
    return 0.0


def _store(root: Path, segment_size: int, *, lmq: bool) -> MessageStore:
    store = MessageStore(StoreConfig(
        store_path_root_dir=str(root), mapped_file_size_commit_log=segment_size,
        message_index_enable=False, enable_lmq=lmq, enable_multi_dispatch=lmq),
        disk_usage=_no_other_tenants)
    store.start()
    return store


def _timed_dispatch(store: MessageStore, puts: Callable[[], int]) -> dict[str, float]:
    """Run ``puts`` (returns LMQ entries it fanned out) with the dispatcher paused, then
    time the dispatcher alone: wall clock, and the process's CPU time meanwhile (the
    dispatcher and RocksDB's background threads; the main thread only waits), which
    swings far less than the wall clock on a shared machine."""
    dispatcher = store.dispatcher
    assert dispatcher is not None
    dispatcher.pause()
    t0 = time.perf_counter()
    entries = puts()
    put_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    c1 = time.process_time()
    dispatcher.resume()
    if not dispatcher.drain(timeout=1800):
        raise RuntimeError("the dispatcher did not catch up")
    dispatch_s = time.perf_counter() - t1
    cpu_s = time.process_time() - c1
    return {"entries": entries, "put_s": put_s, "dispatch_s": dispatch_s,
            "entries_per_s": entries / dispatch_s if dispatch_s else 0.0,
            "dispatch_cpu_s": cpu_s, "cpu_us_per_entry": cpu_s / entries * 1e6 if entries
            else 0.0}


def _build(cfg: LmqBenchConfig, root: Path) -> dict[str, Any]:
    """Phase a (build) and b, c in-process; runs in a child process."""
    store = _store(root, cfg.segment_size, lmq=True)
    body = b"x" * cfg.body_size
    fan, queues = cfg.fanout, cfg.parent_queues
    put = store.put_multi_dispatch
    messages = cfg.lmqs // fan

    def build() -> int:
        for i in range(messages):
            names = [lmq_name(i * fan + j) for j in range(fan)]
            put(PARENT, i % queues, MessageInput(body, _props(names)), names)
        return messages * fan

    out: dict[str, Any] = {"build": _timed_dispatch(store, build)}
    out["build"]["msgs_per_s"] = messages / out["build"]["put_s"]
    out["rss_built"] = rss()
    rng = random.Random(1)

    def steady() -> int:
        for i in range(cfg.dispatch_messages):
            names = [lmq_name(k) for k in rng.sample(range(cfg.lmqs), fan)]
            put(PARENT, i % queues, MessageInput(body, _props(names)), names)
        return cfg.dispatch_messages * fan

    out["steady"] = _timed_dispatch(store, steady)
    out["steady"]["msgs_per_s"] = cfg.dispatch_messages / out["steady"]["put_s"]
    lat = []
    for _ in range(cfg.pulls):
        name = lmq_name(rng.randrange(cfg.lmqs))
        t0 = time.perf_counter()
        result = store.get(name, 0, 0, 32)
        lat.append(time.perf_counter() - t0)
        assert result.found, (name, result.status)
    out["get"] = percentiles_ms(lat)
    lmq = store.lmq
    assert lmq is not None
    t0 = time.perf_counter()
    out["lmq_count"], out["lmq_entries"] = lmq.stats()
    out["stats_walk_s"] = time.perf_counter() - t0
    out["rss_end"] = rss()
    t0 = time.perf_counter()
    store.shutdown()
    out["shutdown_s"] = time.perf_counter() - t0
    out["lmq_disk"] = disk_usage(root / "lmq")
    t0 = time.perf_counter()  # where restart time goes: the store's own start
    _store(root, cfg.segment_size, lmq=True).shutdown()
    out["store_restart_s"] = time.perf_counter() - t0
    return out


def _compare(cfg: LmqBenchConfig, root: Path, variant: str, queues: int) -> dict[str, Any]:
    """Phase d, one variant; runs in a child process of its own."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    store = _store(root, cfg.segment_size, lmq=variant == "rocksdb")
    body = b"x" * cfg.body_size
    fan, n = cfg.fanout, cfg.compare_messages
    names = [f"%LMQ%f{k:05d}" if variant == "rocksdb" else f"lmqfile{k:05d}"
             for k in range(queues)]

    def targets(i: int) -> list[str]:
        return [names[(i * fan + j) % queues] for j in range(fan)]

    def rocksdb() -> int:
        for i in range(n):
            t = targets(i)
            store.put_multi_dispatch(PARENT, i % cfg.parent_queues,
                                     MessageInput(body, _props(t)), t)
        return n * fan

    def file_cq() -> int:  # one record, one consume-queue entry per target (file LMQ)
        next_offset = dict.fromkeys(names, 0)
        assert store.dispatcher is not None
        submit = store.dispatcher.submit
        for i in range(n):
            t = targets(i)
            res = store.put(PARENT, i % cfg.parent_queues, MessageInput(body, _props(t)))
            phys, size = res.phys_offsets[0], res.sizes[0]
            for name in t:
                submit(DispatchBatch(name, 0, next_offset[name], (phys,), (size,), (0,),
                                     res.store_timestamp, phys + size))
                next_offset[name] += 1
        return n * fan

    def put_per_target() -> int:  # no LMQ: the message is stored once per target
        msg = MessageInput(body)
        for i in range(n):
            for name in targets(i):
                store.put(name, 0, msg)
        return n * fan

    run = {"rocksdb": rocksdb, "file-cq": file_cq, "put-per-target": put_per_target}[variant]
    out: dict[str, Any] = _timed_dispatch(store, run)
    out["msgs_per_s"] = n / out["put_s"]
    out["rss"] = rss()
    out["open_fds"] = len(os.listdir("/proc/self/fd"))
    out["commitlog_bytes"] = store.commitlog.max_offset - store.commitlog.min_offset
    store.shutdown()
    out["disk"] = disk_usage(root)
    index = [disk_usage(root / sub) for sub in ("consumequeue", "lmq")]
    out["index_disk"] = {k: sum(d[k] for d in index) for k in index[0]}  # no commit log
    out["queues"] = queues
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return out


def child_main() -> None:
    """Entry of the child processes: ``-c ... <json args>``; prints one JSON line.

    The garbage collector is tuned as ``tidemq broker`` tunes it (fewer young
    collections), so in-process figures are the broker's."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)
    args = json.loads(sys.argv[1])
    cfg = LmqBenchConfig(**args["config"])
    root = Path(args["root"])
    if args["job"] == "build":
        result = _build(cfg, root)
    else:
        result = _compare(cfg, root, args["job"], args["queues"])
    sys.stdout.write(json.dumps(result) + "\n")


def _child(job: str, cfg: LmqBenchConfig, root: Path, **extra: Any) -> dict[str, Any]:
    arg = json.dumps({"job": job, "config": dataclasses.asdict(cfg), "root": str(root),
                      **extra})
    proc = subprocess.run([sys.executable, "-c", _CHILD, arg], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"bench child {job!r} failed ({proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


# ---------------------------------------------------------------------- the broker process


async def _first_found(client: RemotingClient, addr: str, cfg: LmqBenchConfig,
                       deadline: float) -> None:
    """Pull a random LMQ until it answers FOUND (the broker serves the built store)."""
    sub = Subscription.parse("*")
    name = lmq_name(random.randrange(cfg.lmqs))
    mq = MessageQueue(name, "bench", 0)
    while True:
        try:
            resp = await client.request(addr, pull_request("bench", mq, 0, max_nums=32,
                                                            subscription=sub))
            if resp.code == ResponseCode.SUCCESS:
                return
        except Exception:
            if time.perf_counter() > deadline:
                raise
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the broker never served {name}")
        await asyncio.sleep(0.02)  # another process: nothing to wait on but its answer


async def lmq_walk_done(pid: int, deadline: float) -> float:
    """Wait until the broker ``pid`` has ended the start's walk of its LMQs (its thread
    ``tidemq-lmq-warm`` is gone), so that no measurement charges the walk's CPU to what
    it measures; returns when (``time.perf_counter``)."""
    while "tidemq-lmq-warm" in thread_cpu_seconds(pid):
        if time.perf_counter() > deadline:
            raise RuntimeError("the broker's start walk of its LMQs did not end")
        await asyncio.sleep(0.1)  # another process: nothing to wait on but /proc
    return time.perf_counter()


async def _pulls(client: RemotingClient, addr: str, cfg: LmqBenchConfig) -> dict[str, Any]:
    sub = Subscription.parse("*")
    rng = random.Random(2)
    lat = []
    for _ in range(cfg.pulls):
        mq = MessageQueue(lmq_name(rng.randrange(cfg.lmqs)), "bench", 0)
        cmd = pull_request("bench", mq, 0, max_nums=32, subscription=sub)
        t0 = time.perf_counter()
        resp = await client.request(addr, cmd)
        lat.append(time.perf_counter() - t0)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"pull of {mq.topic}: {resp.code} {resp.remark}")
    return percentiles_ms(lat)


def _wire_messages(cfg: LmqBenchConfig, seed: int) -> list[Message]:
    """``wire_messages`` fan-out messages, each to ``fanout`` random existing LMQs, built
    as a user builds them (:func:`~tidemq.client.lmq_message` checks the names); built
    before the clock starts, so the figures are the sending's."""
    rng = random.Random(seed)
    body = b"x" * cfg.body_size
    return [lmq_message(Message(PARENT, body),
                        [lmq_name(k) for k in rng.sample(range(cfg.lmqs), cfg.fanout)])
            for _ in range(cfg.wire_messages)]


async def _raw_sends(client: RemotingClient, addr: str, msgs: list[Message],
                     in_flight: int, queues: int) -> None:
    """One SEND_MESSAGE_V2 request per message, ``in_flight`` at once, no client-side
    coalescing: the broker's cost of a fan-out send on its own."""
    keys = new_uniq_keys("127.0.0.1")
    opts = SendOptions(producer_group="lmq-bench")
    todo = list(reversed(msgs))

    async def worker() -> None:
        while todo:
            i = len(todo)
            msg = todo.pop()
            now = time.time_ns() // 1_000_000
            cmd = send_request(msg, opts, queue_id=i % queues, now_ms=now, keys=keys,
                               broker_name="bench")
            resp = await client.request(addr, cmd)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"fan-out send: {resp.code} {resp.remark}")

    await asyncio.gather(*(worker() for _ in range(in_flight)))


async def _producer_sends(producer: Producer, msgs: list[Message], in_flight: int) -> None:
    """``Producer.send`` of each message, ``in_flight`` at once (the client coalesces the
    sends of one event-loop iteration into batch-protocol requests)."""
    todo = list(reversed(msgs))

    async def worker() -> None:
        while todo:
            await producer.send(todo.pop())

    await asyncio.gather(*(worker() for _ in range(in_flight)))


async def _batched_sends(producer: Producer, msgs: list[Message]) -> None:
    """Every message through an :class:`AutoBatchProducer`: per parent queue, batches
    (``SEND_BATCH_MESSAGE``) whose messages each fan out to their own LMQs."""
    batcher = AutoBatchProducer(producer)
    try:
        futures = [await batcher.send(msg) for msg in msgs]
        await asyncio.gather(*futures)
    finally:
        await batcher.close()


#: The ways ``wire`` sends fan-out messages (module docstring, phase b).
WIRE_MODES = ("raw", "single", "batched")


async def parent_dispatched(client: RemotingClient, addr: str, cfg: LmqBenchConfig) -> int:
    """Messages of the fan-outs' topic dispatched (its queues' max offsets, added up)."""
    total = 0
    for qid in range(cfg.parent_queues):
        mq = MessageQueue(PARENT, "bench", qid)
        total += read_offset(await client.request(addr, max_offset_request(mq)), address=addr)
    return total


async def until_dispatched(client: RemotingClient, addr: str, cfg: LmqBenchConfig,
                           target: int, deadline: float) -> None:
    """Wait until ``target`` messages of the fan-outs' topic are dispatched: a message's
    LMQ entries are written in the same dispatch round as its queue's entry. A send is
    answered before its message is dispatched, so a figure read at the last answer would
    leave out what dispatch still had to do."""
    while await parent_dispatched(client, addr, cfg) < target:
        if time.perf_counter() > deadline:
            raise RuntimeError("the broker's dispatch did not catch up with the sends")
        await asyncio.sleep(0.005)  # another process: nothing to wait on but its answers


async def _wire_sends(client: RemotingClient, addr: str, namesrv: str, cfg: LmqBenchConfig,
                      pid: int) -> dict[str, Any]:
    """Phase b over the wire: each mode of :data:`WIRE_MODES` with messages of its own;
    messages/s and LMQ entries/s through dispatch (the sends' own rate beside them), and
    the broker's CPU time per message, both counted until dispatch has caught up."""
    out: dict[str, Any] = {}
    config = ClientConfig(namesrv_addr=(namesrv,), send_msg_timeout=60.0, request_timeout=60.0)
    async with Producer("lmq-bench", config=config) as producer:
        for seed, mode in enumerate(WIRE_MODES, 3):
            msgs = _wire_messages(cfg, seed)
            target = await parent_dispatched(client, addr, cfg) + len(msgs)
            cpu0 = process_cpu_seconds(pid)
            t0 = time.perf_counter()
            if mode == "raw":
                await _raw_sends(client, addr, msgs, cfg.in_flight, cfg.parent_queues)
            elif mode == "single":
                await _producer_sends(producer, msgs, cfg.in_flight)
            else:
                await _batched_sends(producer, msgs)
            answered = time.perf_counter() - t0
            await until_dispatched(client, addr, cfg, target, time.perf_counter() + 300)
            seconds = time.perf_counter() - t0
            cpu1 = process_cpu_seconds(pid)
            n = len(msgs)
            out[mode] = {"messages": n, "seconds": seconds, "msgs_per_s": n / seconds,
                         "entries_per_s": n * cfg.fanout / seconds,
                         "answered_msgs_per_s": n / answered,
                         "broker_cpu_us_per_msg": (cpu1 - cpu0) / n * 1e6
                         if cpu0 is not None and cpu1 is not None else None}
    return out


async def _serve(cfg: LmqBenchConfig, broker: BrokerProcess) -> dict[str, Any]:
    """Phases a (restart, RSS), b (wire) and c (wire) against the broker process."""
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    namesrv = await broker.start(timeout=300)
    out["registered_s"] = time.perf_counter() - t0
    async with AdminClient(config=ClientConfig(namesrv_addr=(namesrv,))) as admin:
        addr = (await admin.cluster_list())[0].address
        await admin.create_topic(PARENT, broker_addr=addr,
                                 read_queue_nums=cfg.parent_queues,
                                 write_queue_nums=cfg.parent_queues)
    client = RemotingClient(request_timeout=60)
    try:
        await _first_found(client, addr, cfg, time.perf_counter() + 120)
        out["restart_s"] = time.perf_counter() - t0
        out["rss_started"] = rss(broker.pid)
        out["walk_s"] = await lmq_walk_done(broker.pid, t0 + 600) - t0
        out["rss_walked"] = rss(broker.pid)
        out["pull"] = await _pulls(client, addr, cfg)
        out["rss_after_pulls"] = rss(broker.pid)
        try:
            out["wire"] = await _wire_sends(client, addr, namesrv, cfg, broker.pid)
        except (RuntimeError, TideMQError) as exc:  # e.g. a full shared disk: the other
            out["wire"] = {"error": str(exc)}  # figures stand
        out["rss_after_sends"] = rss(broker.pid)
        resp = await client.request(addr, RemotingCommand.request(
            RequestCode.GET_BROKER_RUNTIME_INFO))
        table = decode_body(resp.full_body(), KVTable).table
        out["broker_lmq_count"] = int(table.get("lmqCount", "0"))
    finally:
        await client.close()
    return out


# ---------------------------------------------------------------------- the run


#: Open fds per consume-queue file: MappedFile's own and the one ``mmap`` dups.
FDS_PER_QUEUE_FILE = 2


def _compare_queues(cfg: LmqBenchConfig) -> tuple[int, str]:
    """The queue count of phase d, capped by the fd limit: each consume-queue file keeps
    two fds open (and an mmap), so a process needs two per file queue."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return cfg.compare_queues, ""
    cap = (hard - 512) // FDS_PER_QUEUE_FILE
    if cfg.compare_queues <= cap:
        return cfg.compare_queues, ""
    return cap, (f"{cfg.compare_queues:,} file queues need "
                 f"{cfg.compare_queues * FDS_PER_QUEUE_FILE:,} open fds (two per consume-"
                 f"queue file) but RLIMIT_NOFILE is {hard:,} here: every variant runs at "
                 f"{cap:,} queues")


def _verdicts(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    serve, build = result["broker"], result["build"]
    rss_gib = max(serve["rss_started"]["VmRSS"], serve["rss_after_sends"]["VmRSS"]) / GIB
    measured = {
        "rss_gib": rss_gib,
        "restart_s": serve["restart_s"],
        "dispatch_entries_per_s": min(build["build"]["entries_per_s"],
                                      build["steady"]["entries_per_s"]),
        "pull_p99_ms": serve["pull"]["p99_ms"],
    }
    wire = serve["wire"]
    for mode in ("single", "batched"):
        measured[f"wire_{mode}_msgs_per_s"] = 0.0 if "error" in wire else wire[mode]["msgs_per_s"]
    out = {}
    for key, target in TARGETS.items():
        value = measured[key]
        met = value >= target if key in AT_LEAST else value <= target
        out[key] = {"value": value, "target": target, "met": met}
    return out


def run_lmq_bench(cfg: LmqBenchConfig, report: Report | None = None) -> dict[str, Any]:
    """Every phase of the module docstring; returns the results and the verdicts."""
    cfg.check()
    say = report or (lambda _line: None)
    result: dict[str, Any] = {"config": dataclasses.asdict(cfg)}
    settings = ["enableLmq=true", "enableMultiDispatch=true", "messageIndexEnable=false",
                f"mappedFileSizeCommitLog={cfg.segment_size}"]
    broker = BrokerProcess(settings=settings, data_dir=cfg.directory)
    try:
        root = broker.data / "data" / "store"
        say(f"a/b/c: building {cfg.lmqs:,} LMQs in a child process ...")
        result["build"] = _child("build", cfg, root)
        say(f"a/b/c: restarting on the store as a broker process ({broker.data}) ...")
        result["broker"] = asyncio.run(_serve(cfg, broker))
    finally:
        asyncio.run(broker.stop())
    if not cfg.skip_compare:
        queues, note = _compare_queues(cfg)
        result["compare_note"] = note
        result["compare"] = {}
        with tempfile.TemporaryDirectory(prefix="tidemq-lmq-cmp-", dir=cfg.directory) as tmp:
            runs = [(variant, variant, queues) for variant in VARIANTS]
            if note:  # the RocksDB store has no such limit: also at the full count
                say(f"d: {note}")
                runs.insert(0, ("rocksdb", "rocksdb-full", cfg.compare_queues))
            for variant, label, count in runs:
                say(f"d: {variant} at {count:,} queues ...")
                try:
                    result["compare"][label] = _child(variant, cfg, Path(tmp) / label,
                                                      queues=count)
                except RuntimeError as exc:  # reported, and the other variants still run
                    result.setdefault("compare_errors", {})[label] = str(exc)[-2000:]
    result["verdicts"] = _verdicts(result)
    return result


def _wire_rows(wire: dict[str, Any]) -> list[tuple[str, str]]:
    if "error" in wire:
        return [("b  fan-out sends over the wire", f"FAILED: {wire['error']}")]
    rows = []
    for mode in WIRE_MODES:
        w = wire[mode]
        cpu = w.get("broker_cpu_us_per_msg")
        rows.append((f"b  fan-out sends over the wire, {mode}",
                     f"{w['msgs_per_s']:,.0f} msgs/s = {w['entries_per_s']:,.0f} entries/s"
                     + (f" through dispatch (answered {w['answered_msgs_per_s']:,.0f} msgs/s)"
                        if "answered_msgs_per_s" in w else "")
                     + (f" (broker {cpu:,.0f} us CPU/msg)" if cpu is not None else "")))
    return rows


def summary_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures of a run as (what, value) lines for a table."""
    b, s = result["build"], result["broker"]

    def mib(values: dict[str, int]) -> str:
        return (f"{values['VmRSS'] / (1 << 20):,.0f} MiB (anon {values['RssAnon'] / (1 << 20):,.0f}"
                f", file {values['RssFile'] / (1 << 20):,.0f})")

    rows = [
        ("a  LMQs built / counted by the broker", f"{b['lmq_count']:,} / "
                                                   f"{s['broker_lmq_count']:,}"),
        ("a  build child RSS, every LMQ hot", mib(b["rss_built"])),
        ("a  broker RSS after restart", mib(s["rss_started"])),
        ("a  broker RSS after the start's LMQ walk", mib(s["rss_walked"])),
        ("a  broker RSS after pulls and sends", mib(s["rss_after_sends"])),
        ("a  restart to serving (spawn -> first pull)", f"{s['restart_s']:.2f} s"),
        ("a  ... of which the store's start + stop", f"{b['store_restart_s']:.2f} s"),
        ("a  end of the start's LMQ walk (spawn -> walk done)", f"{s['walk_s']:.2f} s"),
        ("a  LMQ store on disk", f"{b['lmq_disk']['files']} files, "
                                  f"{b['lmq_disk']['bytes_on_disk'] / (1 << 20):,.0f} MiB"),
        ("b  dispatch, new LMQs (in-process)", f"{b['build']['entries_per_s']:,.0f} entries/s"
                                                f" ({b['build']['cpu_us_per_entry']:.2f} us "
                                                f"CPU/entry)"),
        ("b  dispatch, existing LMQs (in-process)",
         f"{b['steady']['entries_per_s']:,.0f} entries/s "
         f"({b['steady']['cpu_us_per_entry']:.2f} us CPU/entry)"),
        ("b  fan-out puts (in-process)", f"{b['build']['msgs_per_s']:,.0f} msgs/s"),
        *_wire_rows(s["wire"]),
        ("c  pull random LMQ, wire p50/p99", f"{s['pull']['p50_ms']:.2f} / "
                                             f"{s['pull']['p99_ms']:.2f} ms"),
        ("c  get random LMQ, in-process p50/p99", f"{b['get']['p50_ms']:.3f} / "
                                                   f"{b['get']['p99_ms']:.3f} ms"),
    ]
    for variant, error in result.get("compare_errors", {}).items():
        rows.append((f"d  {variant}", "FAILED: " + error.strip().splitlines()[-1][:120]))
    for variant, d in result.get("compare", {}).items():
        rows.append((f"d  {variant} ({d['queues']:,} queues)",
                     f"{d['entries_per_s']:,.0f} entries/s dispatch, "
                     f"{d['msgs_per_s']:,.0f} msgs/s put, {d['disk']['files']:,} files + "
                     f"{d['disk']['dirs']:,} dirs, queue index "
                     f"{d['index_disk']['bytes_on_disk'] / (1 << 20):,.1f} MiB on disk, "
                     f"{d['open_fds']:,} fds, "
                     f"RSS {mib(d['rss'])}, commit log "
                     f"{d['commitlog_bytes'] / (1 << 20):,.1f} MiB"))
    return rows
