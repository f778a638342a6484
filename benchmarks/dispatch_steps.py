"""The dispatch thread's work a round, serial against concurrent dispatcher, counted.

``tidemq bench dispatch``'s load (``put_multi_dispatch`` over 64 queues, each message
fanned out to 10 of 1,000 LMQs, its UNIQ_KEY indexed), in rounds of ``--per-round``
puts, each drained before the next: one put wakes the dispatcher itself; several are
made with the dispatcher paused, so that each round holds exactly those puts. Counted
over ``--rounds`` rounds, after a warm-up that creates every queue's files: the
bytecodes every store thread executes a round (``threading.settrace`` with opcode
events), then, in a second store without the tracer, each thread's voluntary context
switches (each one a sleep and a wake-up: a hand-off) and CPU a round, from
``/proc/self/task``. Nothing here is timed by the wall clock. Every round is the dispatch
thread's (``dispatchOnAppendRecords=0``): a round applied by the put itself would be
counted in no store thread.

    .venv/bin/python benchmarks/dispatch_steps.py --per-round 1
    .venv/bin/python benchmarks/dispatch_steps.py --per-round 16 --rounds 100
    .venv/bin/python benchmarks/dispatch_steps.py --per-round 2048 --rounds 4 --top 20
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import types
from pathlib import Path

from tidemq.bench.dispatch import MODES, DispatchBenchConfig, _Load, _open
from tidemq.bench.opcodes import OpcodeCount, function_name
from tidemq.broker.gc_settings import server_gc
from tidemq.store.message_store import MessageStore

WARM = 1000  # puts before counting: every queue's (and most LMQs') files made


def _tasks() -> dict[str, tuple[int, float]]:
    """Thread name -> (voluntary context switches, CPU seconds) of this process."""
    out: dict[str, tuple[int, float]] = {}
    for tid in os.listdir("/proc/self/task"):
        task = Path(f"/proc/self/task/{tid}")
        try:
            name = (task / "comm").read_text().strip()
            status = (task / "status").read_text()
            on_cpu_ns = int((task / "schedstat").read_text().split()[0])
        except FileNotFoundError:
            continue
        switches = int(next(line.split()[1] for line in status.splitlines()
                            if line.startswith("voluntary_ctxt_switches")))
        old = out.get(name, (0, 0.0))
        out[name] = (old[0] + switches, old[1] + on_cpu_ns / 1e9)
    return out


def _store_thread(_frame: types.FrameType) -> str | None:
    name = threading.current_thread().name
    return name if name.startswith("tidemq-") else None


def _store_function(frame: types.FrameType) -> str | None:
    """``thread file.py:function`` in the store's threads (``--top``)."""
    name = _store_thread(frame)
    return None if name is None else f"{name} {function_name(frame)}"


def _rounds(store: MessageStore, load: _Load, first: int, rounds: int, per_round: int,
            on: OpcodeCount | None = None) -> int:
    dispatcher = store.dispatcher
    assert dispatcher is not None  # a started store
    sent = first
    for _ in range(rounds):
        if on is not None:
            on.on = True
        if per_round > 1:
            dispatcher.pause()
        load.put(store, sent, per_round)  # one put wakes the dispatcher itself
        sent += per_round
        if per_round > 1:
            dispatcher.resume()
        if not store.wait_dispatched(60):
            raise SystemExit("a round was not dispatched within 60 s")
        if on is not None:
            on.on = False
    return sent


def measure(mode: str, per_round: int, rounds: int, warm: int = WARM,
            by_function: bool = False) -> dict[str, dict[str, float]]:
    cfg = DispatchBenchConfig()
    load = _Load(cfg, warm + per_round * rounds)
    root = Path(tempfile.mkdtemp(prefix="dispatch-steps-"))
    out: dict[str, dict[str, float]] = {}
    try:
        with server_gc():
            opcodes = OpcodeCount(_store_function if by_function else _store_thread)
            threading.settrace(opcodes.trace)
            store = _open(root / "traced", cfg, mode, dispatch_on_append_records=0)
            threading.settrace(None)  # type: ignore[arg-type,unused-ignore]
            try:
                _rounds(store, load, _rounds(store, load, 0, warm, 1), rounds, per_round,
                        opcodes)
            finally:
                store.shutdown()
            out["opcodes"] = {str(k): v / rounds for k, v in opcodes.counts.items()}
            store = _open(root / "counted", cfg, mode, dispatch_on_append_records=0)
            try:
                first = _rounds(store, load, 0, warm, 1)
                before = _tasks()
                _rounds(store, load, first, rounds, per_round)
                after = _tasks()
            finally:
                store.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    names = [n for n in after if n.startswith("tidemq-")]
    out["switches"] = {n: (after[n][0] - before.get(n, (0, 0.0))[0]) / rounds for n in names}
    out["cpu_us"] = {n: (after[n][1] - before.get(n, (0, 0.0))[1]) * 1e6 / rounds
                     for n in names}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-round", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--warm", type=int, default=WARM, help="single puts first")
    parser.add_argument("--top", type=int, default=0,
                        help="list the functions that execute the most opcodes a round")
    ns = parser.parse_args()
    for mode in ns.modes.split(","):
        got = measure(mode, ns.per_round, ns.rounds, ns.warm, ns.top > 0)
        if ns.top:
            functions = got["opcodes"]
            by_thread: dict[str, float] = {}
            for key, count in functions.items():
                thread = key.split(" ", 1)[0]
                by_thread[thread] = by_thread.get(thread, 0.0) + count
            got["opcodes"] = by_thread
            print(f"{mode}: the functions that execute the most opcodes a round")
            for key, count in sorted(functions.items(), key=lambda kv: -kv[1])[:ns.top]:
                print(f"  {count:9,.0f}  {key}")
        print(f"{mode}: rounds of {ns.per_round} put(s), a round:")
        for name in sorted(got["switches"]):
            print(f"  {name:18} {got['opcodes'].get(name, 0):9,.0f} opcodes  "
                  f"{got['switches'][name]:6.2f} wake-ups  {got['cpu_us'][name]:8,.0f} µs CPU")


if __name__ == "__main__":
    main()
