"""Python work of the store's dispatch thread for a round of one put, counted exactly.

With ``dispatchOnAppendRecords=0`` every append wakes the dispatch thread for a round of
one record, and that round's Python holds the GIL that the broker's event loop needs for
the next request (by default the put applies such a round itself, with the same steps).
This script opens such a store (1 GiB segments, key index on, as a broker's), puts
``--puts`` single 128-byte messages with a ``UNIQ_KEY`` over 8 queues, waiting after
each until it is dispatched (watching the dispatched offset, as nothing drains a broker's
rounds) -- so every round holds exactly one put -- and counts the
opcodes the dispatch thread executes (``threading.settrace`` with opcode events, from
the thread's start, counted only over the measured puts). Printed: opcodes a round and
the functions that execute the most.

    .venv/bin/python benchmarks/dispatch_round.py --puts 500
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

from tidemq.bench.opcodes import OpcodeCount, function_name, thread_named
from tidemq.formats.properties import encode_properties
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=500)
    parser.add_argument("--top", type=int, default=15)
    ns = parser.parse_args()
    counter = OpcodeCount(thread_named("tidemq-dispatch", function_name))
    props = encode_properties({"UNIQ_KEY": "7F000001" * 4, "WAIT": "true",
                               "CLUSTER": "DefaultCluster"})
    msg = MessageInput(body=b"x" * 128, properties=props, keys=("7F000001" * 4,))
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore(StoreConfig(store_path_root_dir=root, dispatch_on_append_records=0))
        threading.settrace(counter.trace)
        store.start()
        threading.settrace(None)  # type: ignore[arg-type,unused-ignore]
        dispatcher = store.dispatcher
        assert dispatcher is not None  # a started store
        try:
            for i in range(8 + ns.puts):  # the first round of each queue makes its files
                counter.on = i >= 8
                put = store.put("DispatchRound", i % 8, msg, wait_flush=False)
                end = put.phys_offsets[-1] + put.sizes[-1]
                deadline = time.monotonic() + 30
                # Not drain(): nobody drains a broker's rounds, and a drainer is notified.
                while dispatcher.dispatched_offset < end:
                    if time.monotonic() > deadline:
                        raise SystemExit("a put was not dispatched within 30 s")
                    time.sleep(0.0002)
        finally:
            counter.on = False
            store.shutdown()
    total = counter.total()
    print(f"dispatch thread: {total / ns.puts:,.0f} opcodes a round of one put")
    for name, count in counter.counts.most_common(ns.top):
        print(f"  {count / ns.puts:8,.1f}  {name}")


if __name__ == "__main__":
    main()
