"""Which admin requests stall the broker's event loop, and for how long, on a large state.

Starts ``tidemq standalone`` (a separate process) on a store holding ``--topics`` topics,
``--groups`` subscription groups each with committed offsets on ``--group-topics`` topics
(every queue), a backlog of ``--backlog`` messages on one topic and, with ``--built DIR``,
a copy of the LMQ store ``benchmarks/lmq_wire.py --built DIR`` keeps there (its light
message queues). A probe process sends a cheap request (GET_MAX_OFFSET of one queue) on its
own connection every 5 ms and records each answer's latency. The probe's p99 and max
while nothing else runs are the floor; then every admin request the broker serves is
issued, one at a time, and for each the table gives its own latency and the probe's
longest wait among the probes sent while it ran: what it held the loop for, and the CPU
time the broker's event-loop thread spent meanwhile (``/proc``'s scheduler statistics:
steadier than the probe's wait on a busy machine, where the wait is the other
processes' as much as the broker's; it counts the probes served too). The name
server of ``tidemq standalone`` serves on the broker's loop: what it does with the
registration a topic change sends (the whole topic table) counts in the next rows.
The broker serves Prometheus metrics (``metricsPort``) and one row scrapes them.

    .venv/bin/python benchmarks/lmq_wire.py --lmqs 1000000 --built /tmp/lmq --rounds 0
    .venv/bin/python benchmarks/loop_stalls.py --built /tmp/lmq
    .venv/bin/python benchmarks/loop_stalls.py --groups 10000 --backlog 20000 --repeat 3 \
        --only UPDATE_CONSUMER_OFFSET --only '(the' --only DELETE_SUBSCRIPTIONGROUP \
        --only DELETE_TOPIC_IN_BROKER --only INVOKE_BROKER_TO_RESET_OFFSET \
        --only GET_ALL_CONSUMER_OFFSET

(the second: the requests that write or send the whole committed-offsets table, with a
committed offset on each queue of 21 topics for each of ten thousand groups).

``--only NAME`` (repeatable) issues only those requests; ``--repeat N`` issues them N
times over (a topic, group or queue of its own each round, or an offset: each round's
reset and commit change the offsets, and its flush writes them; the last table gives each
request's median over the rounds, steadier on a busy machine); ``--json FILE`` writes the
rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tidemq.bench.lmq import lmq_walk_done
from tidemq.bench.process import BrokerProcess
from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.codec.bodies import TopicConfig, TopicConfigSerializeWrapper, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import CreateTopicRequestHeader
from tidemq.net.client import RemotingClient

QUEUES = 8
BACKLOG = "stall-backlog"


def _write_state(config: Path, args: argparse.Namespace) -> None:
    """Topics, groups and offsets as a broker persists them, before it starts."""
    config.mkdir(parents=True, exist_ok=True)
    topics = {f"stall-topic-{i}": TopicConfig(topic_name=f"stall-topic-{i}",
                                              read_queue_nums=QUEUES, write_queue_nums=QUEUES)
              for i in range(args.topics)}
    topics[BACKLOG] = TopicConfig(topic_name=BACKLOG, read_queue_nums=QUEUES,
                                  write_queue_nums=QUEUES)
    (config / "topics.json").write_bytes(
        encode_body(TopicConfigSerializeWrapper(topic_config_table=topics)))
    groups = {f"stall-group-{g}": {"groupName": f"stall-group-{g}", "consumeEnable": True}
              for g in range(args.groups)}
    (config / "subscriptionGroup.json").write_text(json.dumps(
        {"subscriptionGroupTable": groups,
         "dataVersion": {"stateVersion": 0, "timestamp": 0, "counter": 0}}))
    offsets: dict[str, dict[str, int]] = {}
    for g in range(args.groups):
        for k in range(args.group_topics):
            topic = f"stall-topic-{(g * 7 + k) % max(args.topics, 1)}"
            offsets[f"{topic}@stall-group-{g}"] = {str(q): 0 for q in range(QUEUES)}
        offsets[f"{BACKLOG}@stall-group-{g}"] = {str(q): 0 for q in range(QUEUES)}
    (config / "consumerOffset.json").write_text(json.dumps({"offsetTable": offsets}))


def _probe(addr: str, pipe: Connection, period: float) -> None:
    """Child process: GET_MAX_OFFSET every ``period`` s until told to stop; sends back
    ``(sent, latency)`` pairs (``time.monotonic``, system-wide)."""
    asyncio.run(_probe_loop(addr, pipe, period))


async def _probe_loop(addr: str, pipe: Connection, period: float) -> None:
    client = RemotingClient(request_timeout=120)
    samples: list[tuple[float, float]] = []
    pending: set[asyncio.Task[None]] = set()

    async def one() -> None:
        cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                      {"topic": BACKLOG, "queueId": "0"})
        t0 = time.monotonic()
        await client.request(addr, cmd)
        samples.append((t0, time.monotonic() - t0))

    await one()
    pipe.send("ready")
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_reader(pipe.fileno(), lambda: stop.done() or stop.set_result(None))
    nxt = time.monotonic()
    while not stop.done():
        task = asyncio.create_task(one())
        pending.add(task)
        task.add_done_callback(pending.discard)
        nxt += period
        await asyncio.wait([stop], timeout=max(0.0, nxt - time.monotonic()))
    pipe.recv()
    await asyncio.gather(*pending, return_exceptions=True)
    await client.close()
    pipe.send(samples)


def _wait(seconds: float) -> float:
    """Not a request: a window of ``seconds`` in which the probe alone runs."""
    return seconds


async def _scrape(port: int) -> None:
    """Not a remoting request: GET /metrics over HTTP, read to the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    await reader.read()
    writer.close()


def _loop_cpu(pid: int) -> float:
    """Seconds on a CPU of process ``pid``'s first thread (its event loop) so far."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_Issue = Callable[[], RemotingCommand | float | Awaitable[None]]


def _requests(args: argparse.Namespace, rnd: int = 0) -> list[tuple[str, _Issue]]:
    """The requests of round ``rnd``: those that create or delete name a topic or group
    of the round's own."""
    rc, req = RequestCode, RemotingCommand.request
    now = int(time.time() * 1000)
    group, topic = "stall-group-1", BACKLOG
    new = f"stall-new-{rnd}" if rnd else "stall-new"
    return [
        ("GET_BROKER_RUNTIME_INFO", lambda: req(rc.GET_BROKER_RUNTIME_INFO)),
        ("GET_BROKER_CONFIG", lambda: req(rc.GET_BROKER_CONFIG)),
        ("GET_ALL_TOPIC_CONFIG", lambda: req(rc.GET_ALL_TOPIC_CONFIG)),
        ("GET_ALL_SUBSCRIPTIONGROUP_CONFIG", lambda: req(rc.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)),
        ("GET_ALL_CONSUMER_OFFSET", lambda: req(rc.GET_ALL_CONSUMER_OFFSET)),
        ("GET_ALL_DELAY_OFFSET", lambda: req(rc.GET_ALL_DELAY_OFFSET)),
        ("GET /metrics (Prometheus scrape)", lambda: _scrape(args.metrics_port)),
        ("GET_LMQ_METADATA offsets", lambda: req(rc.GET_LMQ_METADATA, {"kind": "offsets"})),
        ("GET_LMQ_METADATA tombstones",
         lambda: req(rc.GET_LMQ_METADATA, {"kind": "tombstones"})),
        ("GET_TOPIC_STATS_INFO (topicStatus)",
         lambda: req(rc.GET_TOPIC_STATS_INFO, {"topic": topic})),
        ("GET_CONSUME_STATS group+topic",
         lambda: req(rc.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})),
        ("GET_CONSUME_STATS group (consumerProgress)",
         lambda: req(rc.GET_CONSUME_STATS, {"consumerGroup": group})),
        ("QUERY_TOPIC_CONSUME_BY_WHO",
         lambda: req(rc.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})),
        ("VIEW_BROKER_STATS_DATA",
         lambda: req(rc.VIEW_BROKER_STATS_DATA, {"statsName": "BROKER_PUT_NUMS",
                                                "statsKey": "x"})),
        ("QUERY_MESSAGE (queryMsgByKey)",
         lambda: req(rc.QUERY_MESSAGE, {"topic": topic, "key": "k-77", "maxNum": "32",
                                       "beginTimestamp": "0", "endTimestamp": str(now * 2)})),
        ("QUERY_MESSAGE absent key",
         lambda: req(rc.QUERY_MESSAGE, {"topic": topic, "key": "nope", "maxNum": "32",
                                       "beginTimestamp": "0", "endTimestamp": str(now * 2)})),
        ("SEARCH_OFFSET_BY_TIMESTAMP",
         lambda: req(rc.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": topic, "queueId": "0",
                                                    "timestamp": str(now)})),
        ("INVOKE_BROKER_TO_RESET_OFFSET (resetOffsetByTime)",
         lambda: req(rc.INVOKE_BROKER_TO_RESET_OFFSET,
                     {"topic": topic, "group": f"stall-group-{1 + 100 * rnd}",
                      "timestamp": str(now),
                      "isForce": "true", "queueId": "-1"})),
        ("UPDATE_CONSUMER_OFFSET (cloneGroupOffset, a queue)",
         lambda: req(rc.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "stall-group-2",
                                                "topic": topic, "queueId": "0",
                                                "commitOffset": str(5 + rnd)})),
        ("(the periodic flush of the committed offsets)", lambda: _wait(args.flush_wait)),
        ("UPDATE_AND_CREATE_TOPIC",
         lambda: req(rc.UPDATE_AND_CREATE_TOPIC, CreateTopicRequestHeader(
             topic=new, default_topic="TBW102", read_queue_nums=QUEUES,
             write_queue_nums=QUEUES, perm=6, topic_filter_type="SINGLE_TAG").to_ext())),
        ("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
         lambda: req(rc.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(
             {"groupName": new, "consumeEnable": True}).encode())),
        ("GET_CONSUMER_CONNECTION_LIST",
         lambda: req(rc.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})),
        ("CLEAN_UNUSED_TOPIC", lambda: req(rc.CLEAN_UNUSED_TOPIC)),
        ("CLEAN_EXPIRED_CONSUMEQUEUE", lambda: req(rc.CLEAN_EXPIRED_CONSUMEQUEUE)),
        ("DELETE_SUBSCRIPTIONGROUP clean offsets",
         lambda: req(rc.DELETE_SUBSCRIPTIONGROUP, {"groupName": f"stall-group-{3 + rnd}",
                                                  "cleanOffset": "true"})),
        ("DELETE_TOPIC_IN_BROKER", lambda: req(rc.DELETE_TOPIC_IN_BROKER,
                                               {"topic": f"stall-topic-{5 + rnd}"})),
        ("DELETE_LMQ", lambda: req(rc.DELETE_LMQ, {"lmq": "%LMQ%0"})),
        ("GET_BROKER_RUNTIME_INFO again", lambda: req(rc.GET_BROKER_RUNTIME_INFO)),
    ]


async def _backlog(namesrv: str, n: int) -> None:
    config = ClientConfig(namesrv_addr=(namesrv,), send_msg_timeout=60.0)
    async with Producer("stall-backlog", config=config) as producer:
        for start in range(0, n, 256):
            batch = [Message(BACKLOG, b"x" * 100, {"KEYS": f"k-{i % 1000}"})
                     for i in range(start, min(n, start + 256))]
            await producer.send_batch(batch)


async def _run(args: argparse.Namespace, broker: BrokerProcess) -> list[dict[str, Any]]:
    namesrv = await broker.start(timeout=600)
    async with AdminClient(config=ClientConfig(namesrv_addr=(namesrv,))) as admin:
        addr = (await admin.cluster_list())[0].address
    if args.built is not None:
        await lmq_walk_done(broker.pid, time.perf_counter() + 600)
    await _backlog(namesrv, args.backlog)
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    probe = ctx.Process(target=_probe, args=(addr, theirs, 0.005), daemon=True)
    probe.start()
    assert ours.recv() == "ready"
    client = RemotingClient(request_timeout=600, max_frame_size=1 << 30)
    windows: list[tuple[str, float, float, int, float]] = []
    pid = broker.pid
    try:
        t0, cpu0 = time.monotonic(), _loop_cpu(pid)
        await asyncio.sleep(args.idle)  # the floor: the probe alone
        windows.append(("(idle)", t0, time.monotonic(), 0, _loop_cpu(pid) - cpu0))
        for rnd in range(args.repeat):
            for name, make in _requests(args, rnd):
                if args.only and name.split(" ")[0] not in args.only and name not in args.only:
                    continue
                await asyncio.sleep(0.3)  # let the probe settle between requests
                t0, cpu0 = time.monotonic(), _loop_cpu(pid)
                what = make()
                if isinstance(what, float):
                    await asyncio.sleep(what)
                    code = 0
                elif isinstance(what, RemotingCommand):
                    code = (await client.request(addr, what)).code
                else:
                    await what
                    code = 0
                windows.append((name, t0, time.monotonic(), code, _loop_cpu(pid) - cpu0))
    finally:
        ours.send("stop")
        ours.send("stop")
        samples: list[tuple[float, float]] = ours.recv()
        probe.join()
        await client.close()
    rows: list[dict[str, Any]] = []
    for name, start, end, code, cpu in windows:
        lats = [lat for sent, lat in samples if sent <= end and sent + lat >= start]
        lats.sort()
        row = {"request": name, "code": code, "ms": (end - start) * 1000,
               "probe_max_ms": max(lats, default=0) * 1000,
               "probe_p99_ms": lats[int(len(lats) * 0.99)] * 1000 if lats else 0,
               "probes": len(lats), "loop_cpu_ms": cpu * 1000}
        rows.append(row)
        print(f"{name:52s} code {code:3d} {row['ms']:9.1f} ms   probe max "
              f"{row['probe_max_ms']:8.1f} ms p99 {row['probe_p99_ms']:7.1f} ms "
              f"({len(lats)} probes)   loop CPU {row['loop_cpu_ms']:7.1f} ms", flush=True)
    if samples:
        print(f"probe overall median {statistics.median(s[1] for s in samples) * 1000:.2f} ms")
    if args.repeat > 1:
        print(f"medians over {args.repeat} rounds:")
        for name in dict.fromkeys(row["request"] for row in rows):
            mine = [row for row in rows if row["request"] == name]
            print(f"{name:52s} {statistics.median(r['ms'] for r in mine):9.1f} ms   probe max "
                  f"{statistics.median(r['probe_max_ms'] for r in mine):8.1f} ms   loop CPU "
                  f"{statistics.median(r['loop_cpu_ms'] for r in mine):7.1f} ms")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--built", type=Path, metavar="DIR",
                        help="copy the LMQ store benchmarks/lmq_wire.py keeps in DIR")
    parser.add_argument("--topics", type=int, default=5000)
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--group-topics", type=int, default=20)
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds of the floor")
    parser.add_argument("--flush-wait", type=float, default=6.0,
                        help="seconds after a commit: the broker's flush of the offsets"
                             " (flushConsumerOffsetInterval, 5 s) falls in them")
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="issue the requests N times over and give each one's medians")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    args.metrics_port = _free_port()
    settings = ["haListenPort=0", f"metricsPort={args.metrics_port}"]
    if args.built is not None:
        built = json.loads((args.built / "built.json").read_text())
        settings += ["enableLmq=true", "enableMultiDispatch=true",
                     f"mappedFileSizeCommitLog={built['segment_size']}"]
    broker = BrokerProcess(settings=settings)
    try:
        store = broker.data / "data" / "store"
        store.parent.mkdir(parents=True, exist_ok=True)
        if args.built is not None:
            subprocess.run(["cp", "-a", "--sparse=always", str(args.built / "store"),
                            str(store)], check=True)
        _write_state(store / "config", args)
        rows = asyncio.run(_run(args, broker))
    finally:
        asyncio.run(broker.stop())
        shutil.rmtree(broker.data, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
