"""What a fan-out message sent over the wire costs the broker, thread by thread (RIP-28).

Builds a store holding ``--lmqs`` light message queues (in a child process, as ``tidemq
bench lmq`` does), compacts its LMQ database (so that no compaction the build left
behind runs during the measured rounds), starts ``tidemq standalone`` on it and sends,
``--rounds`` times for each of ``--modes``, ``--messages`` fan-out messages, each to
``--fanout`` random existing LMQs: ``raw`` (one SEND_MESSAGE_V2 each, 64 in flight), ``single``
(``Producer.send``, 64 in flight, coalesced by the client) or ``batched`` (an
``AutoBatchProducer``). For each round it prints the broker's CPU microseconds a message
(all threads, from ``/proc``), the busiest threads' share of it, the rate of the sends
(until the last one is answered) and the rate through dispatch. A send is answered
before its message is dispatched, so each round waits until the broker reports no
dispatch lag (``dispatchBehindBytes``) before it reads the CPU: what dispatch still had
to do when the last send was answered is counted too. CPU time a message is the figure
to compare on a shared machine: the rates depend on what else runs.

    .venv/bin/python benchmarks/lmq_wire.py --modes batched --rounds 3

``--profile out.txt`` runs the broker under ``py-spy record`` (raw format) for the whole
run; ``--pause`` waits for Enter before the first round (attach a profiler by pid).
``--built DIR`` keeps the built and compacted store in ``DIR`` (built there on first use,
for the same ``--lmqs`` and ``--fanout``) and gives each run a copy of it, so that old
and new code are measured on the same store without building it again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict

from tidemq.bench.lmq import (
    PARENT,
    WIRE_MODES,
    LmqBenchConfig,
    _batched_sends,
    _child,
    _first_found,
    _producer_sends,
    _raw_sends,
    _wire_messages,
    lmq_walk_done,
    parent_dispatched,
    until_dispatched,
)
from tidemq.bench.process import BrokerProcess, thread_cpu_seconds, thread_cpu_split
from tidemq.client import AdminClient, ClientConfig, Producer
from tidemq.net.client import RemotingClient


async def _rounds(args: argparse.Namespace, cfg: LmqBenchConfig,
                  broker: BrokerProcess) -> list[dict[str, Any]]:
    namesrv = await broker.start(timeout=300)
    async with AdminClient(config=ClientConfig(namesrv_addr=(namesrv,))) as admin:
        addr = (await admin.cluster_list())[0].address
        await admin.create_topic(PARENT, broker_addr=addr, read_queue_nums=cfg.parent_queues,
                                 write_queue_nums=cfg.parent_queues)
    client = RemotingClient(request_timeout=60)
    config = ClientConfig(namesrv_addr=(namesrv,), send_msg_timeout=60.0,
                          request_timeout=60.0)
    out: list[dict[str, Any]] = []
    try:
        await _first_found(client, addr, cfg, time.perf_counter() + 120)
        await lmq_walk_done(broker.pid, time.perf_counter() + 600)
        async with Producer("lmq-wire", config=config) as producer:
            await _producer_sends(producer, _wire_messages(cfg, 99)[:200], 8)  # warm-up
            if args.pause:
                await asyncio.get_running_loop().run_in_executor(
                    None, input, f"broker pid {broker.pid}; Enter to start ")
            seed = 1000
            for r in range(args.rounds):
                for mode in args.modes:
                    seed += 1
                    msgs = _wire_messages(cfg, seed)
                    target = await parent_dispatched(client, addr, cfg) + len(msgs)
                    before = thread_cpu_seconds(broker.pid)
                    t0 = time.perf_counter()
                    if mode == "raw":
                        await _raw_sends(client, addr, msgs, cfg.in_flight, cfg.parent_queues)
                    elif mode == "single":
                        await _producer_sends(producer, msgs, cfg.in_flight)
                    else:
                        await _batched_sends(producer, msgs)
                    seconds = time.perf_counter() - t0
                    await until_dispatched(client, addr, cfg, target, time.perf_counter() + 300)
                    drained = time.perf_counter() - t0
                    split = thread_cpu_split(before, thread_cpu_seconds(broker.pid), drained,
                                             len(msgs))
                    row = {"round": r, "mode": mode, "msgs_per_s": len(msgs) / seconds,
                           "dispatched_msgs_per_s": len(msgs) / drained,
                           "cpu_us_per_msg": (split["user_ns_per_msg"]
                                              + split["sys_ns_per_msg"]) / 1000,
                           "threads": {t["thread"]: round(t["ns_per_msg"] / 1000, 1)
                                       for t in split["threads"]},
                           "threads_sys": {t["thread"]: round(t["sys_ns_per_msg"] / 1000, 1)
                                           for t in split["threads"]}}
                    out.append(row)
                    print(f"round {r} {mode:8s} {row['cpu_us_per_msg']:6.1f} us CPU/msg "
                          f"{row['msgs_per_s']:8,.0f} msgs/s (dispatched "
                          f"{row['dispatched_msgs_per_s']:,.0f})  threads {row['threads']} "
                          f"of which system {row['threads_sys']}",
                          flush=True)
    finally:
        await client.close()
    return out


def _build_store(cfg: LmqBenchConfig, store: Path) -> None:
    """Build ``cfg``'s LMQs into ``store`` and compact its LMQ database."""
    _child("build", cfg, store)
    db = Rdict(str(store / "lmq"), Options(raw_mode=True))
    try:
        db.compact_range(None, None)
    finally:
        db.close()


def _built_store(cfg: LmqBenchConfig, directory: Path) -> Path:
    """The store of ``cfg``'s LMQs kept in ``directory``, built there if it is not."""
    store, mark = directory / "store", directory / "built.json"
    shape = {"lmqs": cfg.lmqs, "fanout": cfg.fanout, "segment_size": cfg.segment_size}
    if mark.exists():
        held = json.loads(mark.read_text())
        if held != shape:
            raise SystemExit(f"{directory} holds a store of {held}, not {shape}")
        return store
    if store.exists():
        shutil.rmtree(store)
    directory.mkdir(parents=True, exist_ok=True)
    _build_store(cfg, store)
    mark.write_text(json.dumps(shape))
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lmqs", type=int, default=100_000)
    parser.add_argument("--fanout", type=int, default=10)
    parser.add_argument("--messages", type=int, default=5000, help="per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=WIRE_MODES, default=["batched"])
    parser.add_argument("--profile", help="py-spy raw output file for the broker")
    parser.add_argument("--native", action="store_true",
                        help="with --profile: sample native frames too (C, RocksDB)")
    parser.add_argument("--pause", action="store_true")
    parser.add_argument("--built", type=Path, metavar="DIR",
                        help="reuse the store built in DIR (build it there first if absent)")
    parser.add_argument("--json", help="write the rounds to this file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another broker setting (repeatable)")
    args = parser.parse_args()
    cfg = LmqBenchConfig(lmqs=args.lmqs, fanout=args.fanout, wire_messages=args.messages,
                         dispatch_messages=1, pulls=1, skip_compare=True)
    cfg.check()
    broker = BrokerProcess(settings=["enableLmq=true", "enableMultiDispatch=true",
                                     "messageIndexEnable=false",
                                     f"mappedFileSizeCommitLog={cfg.segment_size}",
                                     *args.set],
                           profile=args.profile, native=args.native)
    try:
        store = broker.data / "data" / "store"
        if args.built is None:
            _build_store(cfg, store)
        else:
            store.parent.mkdir(parents=True, exist_ok=True)
            # cp's holes for the zeros past the log's end: not a full segment's copy a run
            subprocess.run(["cp", "-a", "--sparse=always", str(_built_store(cfg, args.built)),
                            str(store)], check=True)
        rounds = asyncio.run(_rounds(args, cfg, broker))
    finally:
        asyncio.run(broker.stop())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rounds, f)


if __name__ == "__main__":
    main()
