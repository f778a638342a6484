"""What one send costs the broker's event-loop thread, request by request.

Starts an in-process cluster (one name server, one broker), builds the SEND_BATCH_MESSAGE
frames a TideMQ producer sends -- ``--batch`` messages of ``--size`` bytes, to an
ordinary topic (``outer``: split into one record per message) and to a BatchCQ topic
(``inner``: one record per batch, RIP-26) -- or, for ``single``, a SEND_MESSAGE_V2 of one
message of ``--size`` bytes with tags and keys to an ordinary topic, or, for ``fanout``,
batches whose messages each name ``--fanout`` random LMQs of ``--lmqs``
(``INNER_MULTI_DISPATCH``, RIP-28; the broker runs with LMQ enabled and every frame
differs), or, for ``shared``, a batch-protocol parent in the shared send form whose
``--batch`` children each send one message to their own queue of a topic of ``--batch``
queues (``Producer.send_multi``'s request), and feeds them to
the broker's real server-side ``Connection`` ``--per-read`` frames at a time, as if read
from the socket. Answers go to a sink instead of the socket, so what is measured is the
whole path on the event-loop thread: frame and header decoding, the send processor, the
store append (commit log, hand-off to the dispatch thread) and the answer's encoding. Not
measured: the syscalls and the event loop itself. The dispatch thread runs meanwhile, as
in the broker; its CPU is read from ``/proc`` (10 ms ticks) until it has dispatched the
round's records, and reported apart.

Reported per request, median of ``--rounds`` rounds of ``--requests`` requests: wall
microseconds, the event-loop thread's CPU microseconds, user and kernel (steadier than
wall time when other processes compete for the cores) and, when ``perf stat`` works on
this machine, the event-loop thread's instructions and cycles -- instruction counts barely
move on a noisy machine where microseconds do. Ideal throughput = batch / wall time: what
the broker could take if this thread did nothing else.

    .venv/bin/python benchmarks/send_path.py --requests 2000 --rounds 3

Where neither the machine is quiet nor ``perf`` counts instructions (a VM), ``--callgrind``
makes the count exact: run the script under callgrind with instrumentation off, and it
turns instrumentation on for the measured rounds only (``callgrind_control``); each
thread's total is then in its own output file (the event-loop thread's is ``-01``, the
dispatch thread's is the other large one), to be divided by the requests measured
(``--rounds`` x ``--requests``, rounded down to whole reads), one mode per run::

    valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes \
        .venv/bin/python benchmarks/send_path.py --requests 400 --rounds 1 --modes inner --callgrind
    grep -H totals callgrind.out.*

``--opcodes`` counts instead the Python bytecodes each thread executes a request
(``sys.settrace`` with opcode events), by function: the event-loop thread's, and the
dispatch thread's with each read's round on its own (after each read the script waits
until the dispatch thread has taken it, as it takes the GIL in the broker once the loop
has handled a read). Counts do not move with the machine's load::

    .venv/bin/python benchmarks/send_path.py --requests 400 --rounds 1 --per-read 4 \
        --modes inner --opcodes --top 40
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemq.bench.process import thread_cpu_seconds
from tidemq.broker.gc_settings import server_gc
from tidemq.client import AdminClient, lmq_message
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.frame import encode_command
from tidemq.codec.send_batch import encode_send_batch, send_batch_request
from tidemq.codec.shared_send import encode_shared_send
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.formats.properties import encode_properties
from tidemq.net import Connection, RemotingClient
from tidemq.store.message_store import MessageStore
from tidemq.testing import Cluster
from tidemq.types import Message

#: A private request code: its processor hands the benchmark the server-side connection.
_GRAB = 29_901
_TOPICS = {"outer": "SendPathOuter", "inner": "SendPathInner", "single": "SendPathOuter",
           "fanout": "SendPathOuter", "shared": "SendPathShared"}
#: Distinct frames a ``fanout`` round cycles through.
_FANOUT_FRAMES = 256


class _Sink:
    """Stands in for the connection's transport: answers are dropped."""

    def writelines(self, parts: object) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


@dataclass
class _Counters:
    instructions: float
    cycles: float


class _Opcodes:
    """Opcodes by function of the event-loop thread (this one) while :attr:`on`, and of
    the store's dispatch thread (installed with ``threading.settrace`` before the store
    starts it)."""

    def __init__(self) -> None:
        self.on = {"loop": False, "dispatch": False}
        self.loop: collections.Counter[str] = collections.Counter()
        self.dispatch: collections.Counter[str] = collections.Counter()

    def trace(self, frame: types.FrameType, _event: str, _arg: Any) -> Any:
        thread = threading.current_thread()
        if thread is threading.main_thread():
            side, counts = "loop", self.loop
        elif thread.name == "tidemq-dispatch":
            side, counts = "dispatch", self.dispatch
        else:
            return None
        frame.f_trace_opcodes = True
        code = frame.f_code
        name = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"
        on = self.on

        def local(_frame: types.FrameType, event: str, _arg: Any) -> Any:
            if event == "opcode" and on[side]:
                counts[name] += 1
            return local

        return local


class _Perf:
    """``perf stat`` of one thread while a block runs; ``None`` where perf cannot count."""

    def __init__(self) -> None:
        self.available = shutil.which("perf") is not None and self._probe()

    @staticmethod
    def _probe() -> bool:
        try:
            out = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"],
                                 check=False, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return out.returncode == 0 and "not supported" not in out.stderr

    def start(self) -> subprocess.Popen[str] | None:
        if not self.available:
            return None
        proc = subprocess.Popen(
            ["perf", "stat", "-x,", "-e", "instructions:u,cycles:u", "-t",
             str(threading.get_native_id())], stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # perf attaches
        return proc

    @staticmethod
    def stop(proc: subprocess.Popen[str] | None) -> _Counters | None:
        if proc is None:
            return None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate()
        values: dict[str, float] = {}
        for line in err.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[0].strip().isdigit():
                values[fields[2].split(":")[0]] = float(fields[0])
        if "instructions" not in values or "cycles" not in values:
            return None
        return _Counters(values["instructions"], values["cycles"])


async def _server_connection(cluster: Cluster) -> tuple[Connection, RemotingClient]:
    app = cluster.brokers[0]
    grabbed: list[Connection] = []

    def grab(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        grabbed.append(conn)
        return cmd.response()

    app.server.register(_GRAB, grab)
    client = RemotingClient()
    await client.request(app.broker_addr, RemotingCommand.request(_GRAB))
    return grabbed[0], client


def _single(body: bytes) -> RemotingCommand:
    """A SEND_MESSAGE_V2 as a producer sends it: header in short keys, UNIQ_KEY, WAIT,
    TAGS and KEYS properties."""
    now = int(time.time() * 1000)
    uniq = UniqKeyGenerator("127.0.0.1", os.getpid()).next_key(now)
    props = encode_properties({"UNIQ_KEY": uniq, "WAIT": "true", "TAGS": "TagA",
                               "KEYS": "order-1"}).decode()
    ext = {"a": "send-path", "b": _TOPICS["single"], "c": "TBW102", "d": "4", "e": "0",
           "f": "0", "g": str(now), "h": "0", "i": props, "j": "0",
           "k": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)


def _shared(body: bytes, queues: int) -> RemotingCommand:
    """A batch-protocol parent in the shared send form, as ``Producer.send_multi`` sends
    it: one message to each of ``queues`` queues, each with its UNIQ_KEY and WAIT."""
    now = int(time.time() * 1000)
    keys = UniqKeyGenerator("127.0.0.1", os.getpid())
    template = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
        "a": "send-path", "b": _TOPICS["shared"], "c": "TBW102", "d": "4", "e": "0",
        "f": "0", "g": str(now), "h": "0", "j": "0", "k": "false"})
    return encode_shared_send(template, [
        (q, 0, now, 0, encode_properties({"UNIQ_KEY": keys.next_key(now), "WAIT": "true"}),
         body) for q in range(queues)])


def _frame(mode: str, batch: int, size: int, lmqs: int = 0, fanout: int = 0,
           rng: random.Random | None = None) -> bytes:
    body = (b"the quick brown fox jumps over the lazy dog " * (size // 44 + 1))[:size]
    if mode == "single":
        return b"".join(bytes(part) for part in encode_command(_single(body)))
    if mode == "shared":
        return b"".join(bytes(part) for part in encode_command(_shared(body, batch)))
    msgs = [Message(_TOPICS[mode], body) for _ in range(batch)]
    if mode == "fanout":
        assert rng is not None
        msgs = [lmq_message(m, [f"%LMQ%path{k:07d}" for k in rng.sample(range(lmqs), fanout)])
                for m in msgs]
    now = int(time.time() * 1000)
    encoded = encode_send_batch(msgs, keys=UniqKeyGenerator("127.0.0.1", os.getpid()), now_ms=now)
    cmd = send_batch_request(encoded, inner=mode == "inner", producer_group="send-path",
                             queue_id=0, now_ms=now)
    return b"".join(bytes(part) for part in encode_command(cmd))


def _callgrind(on: bool) -> None:
    """Turn callgrind's instrumentation of this process on or off."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
                   check=True, stdout=subprocess.DEVNULL)


def _count_opcodes(conn: Connection, store: MessageStore, frames: list[bytes],
                   per_read: int, requests: int, opcodes: _Opcodes, top: int = 8
                   ) -> dict[str, Any]:
    """Opcodes a request on each thread (see ``--opcodes``), and the ``top`` heaviest
    functions."""
    dispatcher = store.dispatcher
    assert dispatcher is not None  # a started store
    chunks = [b"".join(frames[(i + j) % len(frames)] for j in range(per_read))
              for i in range(0, len(frames), per_read)]
    reads = max(1, requests // per_read)
    sys.settrace(opcodes.trace)
    opcodes.on["dispatch"] = True  # the rounds run while the loop waits below
    try:
        for i in range(reads):
            opcodes.on["loop"] = True
            conn.data_received(chunks[i % len(chunks)])
            conn._flush()
            opcodes.on["loop"] = False
            end = store.commitlog.max_offset
            deadline = time.monotonic() + 30
            while dispatcher.dispatched_offset < end:  # the read's round, on its own
                if time.monotonic() > deadline:
                    raise RuntimeError("a read's records were not dispatched within 30 s")
                time.sleep(0.0002)
    finally:
        opcodes.on["loop"] = opcodes.on["dispatch"] = False
        sys.settrace(None)
    n = reads * per_read
    out: dict[str, Any] = {}
    for side, counts in (("loop", opcodes.loop), ("dispatch", opcodes.dispatch)):
        out[f"{side}_opcodes"] = sum(counts.values()) / n
        out[f"{side}_top"] = [(name, round(k / n, 1)) for name, k in counts.most_common(top)]
        counts.clear()
    return out


def _measure(conn: Connection, store: MessageStore, frames: list[bytes], batch: int,
             per_read: int, requests: int, perf: _Perf, callgrind: bool = False
             ) -> dict[str, float]:
    chunks = [b"".join(frames[(i + j) % len(frames)] for j in range(per_read))
              for i in range(0, len(frames), per_read)]
    reads = max(1, requests // per_read)
    stored = store.put_messages
    if callgrind:
        _callgrind(True)
    proc = perf.start()
    threads = thread_cpu_seconds(os.getpid())
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_THREAD)
    for i in range(reads):
        conn.data_received(chunks[i % len(chunks)])
        conn._flush()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_THREAD)
    store.wait_dispatched(60.0)
    dispatch = sum(thread_cpu_seconds(os.getpid()).get("tidemq-dispatch", (0.0, 0.0))) - sum(
        threads.get("tidemq-dispatch", (0.0, 0.0)))
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    counters = perf.stop(proc)
    if callgrind:
        _callgrind(False)
    n = reads * per_read
    if store.put_messages - stored != n * batch:  # every request must have been stored
        raise RuntimeError(f"{n} requests of {batch} stored {store.put_messages - stored} "
                           "messages: the broker refused some (see its log)")
    out = {"wall_us": wall / n * 1e6, "cpu_us": (user + system) / n * 1e6,
           "user_us": user / n * 1e6, "sys_us": system / n * 1e6,
           "dispatch_us": dispatch / n * 1e6}
    if counters is not None:
        out["instructions"] = counters.instructions / n
        out["cycles"] = counters.cycles / n
    return out


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    perf = _Perf()
    opcodes = _Opcodes() if args.opcodes else None
    if opcodes is not None:  # the dispatch thread starts with the store
        threading.settrace(opcodes.trace)
    root = Path(tempfile.mkdtemp(prefix="tidemq-send-path-"))
    results: dict[str, Any] = {"batch": args.batch, "size": args.size,
                               "per_read": args.per_read, "perf": perf.available}
    try:
        settings: dict[str, Any] = {"mapped_file_size_commit_log": 1 << 30}
        if "fanout" in args.modes:
            settings |= {"enable_lmq": True, "enable_multi_dispatch": True}
        async with Cluster(root, store=settings) as cluster:
            threading.settrace(None)  # type: ignore[arg-type,unused-ignore]
            async with AdminClient(cluster.namesrv_addr) as admin:
                await admin.create_topic(_TOPICS["outer"], read_queue_nums=1,
                                         write_queue_nums=1)
                await admin.create_topic(_TOPICS["inner"], read_queue_nums=1,
                                         write_queue_nums=1,
                                         attributes={"queue.type": "BatchCQ"})
                if "shared" in args.modes:
                    await admin.create_topic(_TOPICS["shared"], read_queue_nums=args.batch,
                                             write_queue_nums=args.batch)
            conn, client = await _server_connection(cluster)
            transport, check_flow = conn._transport, conn._check_flow
            conn._transport, conn._check_flow = _Sink(), None  # type: ignore[assignment]
            try:
                rng = random.Random(1)
                for mode in args.modes:
                    frames = ([_frame(mode, args.batch, args.size, args.lmqs, args.fanout, rng)
                               for _ in range(_FANOUT_FRAMES)] if mode == "fanout"
                              else [_frame(mode, args.batch, args.size)])
                    batch = 1 if mode == "single" else args.batch
                    measure = functools.partial(_measure, conn, cluster.brokers[0].store,
                                                frames, batch, args.per_read, perf=perf)
                    measure(args.requests // 4)  # warm-up
                    if opcodes is not None:
                        results[mode] = _count_opcodes(conn, cluster.brokers[0].store, frames,
                                                       args.per_read, args.requests, opcodes,
                                                       args.top)
                        continue
                    rounds = [measure(args.requests, callgrind=args.callgrind)
                              for _ in range(args.rounds)]
                    summary = {key: statistics.median(r[key] for r in rounds)
                               for key in rounds[0]}
                    summary["rounds_wall_us"] = [round(r["wall_us"], 1) for r in rounds]
                    for key in ("cpu_us", "user_us", "sys_us"):
                        summary[f"rounds_{key}"] = [round(r[key], 1) for r in rounds]
                    summary["ideal_msgs_per_s"] = batch / summary["wall_us"] * 1e6
                    summary["frame_bytes"] = len(frames[0])
                    results[mode] = summary
            finally:
                conn._transport, conn._check_flow = transport, check_flow
                await client.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=100,
                        help="messages per batch request (single: one)")
    parser.add_argument("--size", type=int, default=128, help="body bytes per message")
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-read", type=int, default=8,
                        help="frames handed over per data_received call")
    parser.add_argument("--modes", nargs="+", choices=sorted(_TOPICS), default=["outer", "inner"])
    parser.add_argument("--lmqs", type=int, default=100_000, help="fanout: LMQs named")
    parser.add_argument("--fanout", type=int, default=10, help="fanout: LMQs per message")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--opcodes", action="store_true",
                        help="count each thread's Python opcodes a request instead of timing")
    parser.add_argument("--top", type=int, default=8,
                        help="--opcodes: how many of the heaviest functions to list")
    parser.add_argument("--callgrind", action="store_true",
                        help="under callgrind (--instr-atstart=no): instrument the measured "
                             "rounds only")
    args = parser.parse_args()
    with server_gc():  # the broker's collector settings, as its process runs them
        results = asyncio.run(_run(args))
    if args.json:
        print(json.dumps(results))
        return
    print(f"send path: batches of {args.batch} x {args.size} B, {args.per_read} frames "
          f"per read, median of {args.rounds} x {args.requests} requests")
    for mode in args.modes:
        r = results[mode]
        if args.opcodes:
            print(f"  {mode:5s}: event loop {r['loop_opcodes']:,.0f} opcodes a request, "
                  f"dispatch thread {r['dispatch_opcodes']:,.0f}")
            for side in ("loop", "dispatch"):
                top = r[f"{side}_top"]
                print(f"    {side}: " + "; ".join(f"{name} {k:,.0f}" for name, k in top))
            continue
        counted = (f", {r['instructions']:,.0f} instructions, {r['cycles']:,.0f} cycles "
                   f"(IPC {r['instructions'] / r['cycles']:.2f})" if "instructions" in r
                   else " (perf unavailable: no counts)")
        print(f"  {mode:5s}: {r['wall_us']:6.1f} us/request (rounds {r['rounds_wall_us']}), "
              f"{r['cpu_us']:6.1f} us of the thread's CPU ({r['user_us']:.1f} user, "
              f"{r['sys_us']:.1f} kernel; rounds {r['rounds_cpu_us']})"
              f"{counted}; ideal {r['ideal_msgs_per_s']:,.0f} msgs/s; dispatch thread "
              f"{r['dispatch_us']:.1f} us (10 ms ticks)")


if __name__ == "__main__":
    main()
