"""What one dispatch round costs a record, each way of applying it, in instructions.

``tidemq bench dispatch``'s load (``put_multi_dispatch`` over 64 queues, each message
fanned out to 10 of 1,000 LMQs, its UNIQ_KEY indexed): after a warm-up that creates every
queue's files, ``--rounds`` rounds of ``--per-round`` puts are made with the dispatcher
paused, and each round is applied on this thread, directly, one of three ways:
``serial`` (:func:`~tidemq.store.dispatch.apply_batches`, the serial dispatcher's round),
``columns`` (the concurrent dispatcher's ``_prepare`` and ``_commit``: the fan-out one
RocksDB key per LMQ and round) or ``prepare`` (``_prepare`` alone). ``put`` counts the
round's puts instead (the producer's share of the GIL, the same for both dispatchers).
Printed: CPU µs a record (median of the rounds; moves with the machine's load).

Under callgrind, with ``--callgrind``, only the rounds are instrumented
(``callgrind_control -i on|off`` around each), so the total is the instructions of the
rounds alone, which do not move with load::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python benchmarks/dispatch_cost.py --way columns --per-round 512 \\
        --rounds 4 --callgrind
    callgrind_annotate /tmp/cg.out | grep 'PROGRAM TOTALS'   # / (per-round * rounds)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tidemq.bench.dispatch import DispatchBenchConfig, _Load, _open
from tidemq.broker.gc_settings import server_gc
from tidemq.store.concurrent_dispatch import ConcurrentDispatcher
from tidemq.store.dispatch import _fold, apply_batches

WARM = 3000  # puts before counting: every queue's (and most LMQs') files made
WAYS = ("serial", "columns", "prepare", "put")


def _instrument(on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
                   check=True, stdout=subprocess.DEVNULL)


def measure(way: str, per_round: int, rounds: int, callgrind: bool) -> list[float]:
    """CPU µs a record of each round."""
    cfg = DispatchBenchConfig()
    load = _Load(cfg, WARM + per_round * rounds)
    root = Path(tempfile.mkdtemp(prefix="dispatch-cost-"))
    out: list[float] = []
    try:
        with server_gc():
            store = _open(root / "store", cfg, "concurrent")
            d = store.dispatcher
            assert isinstance(d, ConcurrentDispatcher)
            try:
                load.put(store, 0, WARM)
                if not store.wait_dispatched(600):
                    raise SystemExit("the warm-up was not dispatched")
                d.pause()
                sent = WARM
                for _ in range(rounds):
                    if way == "put" and callgrind:
                        _instrument(True)
                    c0 = time.thread_time()
                    load.put(store, sent, per_round)
                    c1 = time.thread_time()
                    if way == "put" and callgrind:
                        _instrument(False)
                    sent += per_round
                    items = [d.pending.popleft() for _ in range(len(d.pending))]
                    batches = _fold(items, False, d._timed)
                    if way == "put":
                        apply_batches(d.queues, d.index, batches)
                        d.dispatched_offset = batches[-1].end
                        out.append((c1 - c0) * 1e6 / per_round)
                        continue
                    if callgrind:
                        _instrument(True)
                    c0 = time.thread_time()
                    if way == "serial":
                        apply_batches(d.queues, d.index, batches)
                    else:
                        prepared = d._prepare(d._next_seq, batches)
                        d._next_seq += 1
                        if way == "prepare" and callgrind:
                            _instrument(False)
                        d._commit(prepared)
                    c1 = time.thread_time()
                    if callgrind and way != "prepare":
                        _instrument(False)
                    d.dispatched_offset = batches[-1].end
                    out.append((c1 - c0) * 1e6 / per_round)
                d.resume()
            finally:
                store.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--way", choices=WAYS, default="columns")
    parser.add_argument("--per-round", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--callgrind", action="store_true",
                        help="instrument only the rounds (run under callgrind)")
    ns = parser.parse_args()
    cpu = measure(ns.way, ns.per_round, ns.rounds, ns.callgrind)
    print(f"{ns.way}: rounds of {ns.per_round} puts, {statistics.median(cpu):.2f} CPU µs "
          f"a record (median of {ns.rounds})")


if __name__ == "__main__":
    main()
