"""The store's part of an inner-batch send (RIP-26): user CPU of the append and of the
dispatch thread, a request.

Opens a store (1 GiB segments, key index on, as a broker's) with a BatchCQ topic of 8
queues and puts ``--requests`` inner batches of ``--batch`` messages of ``--size`` bytes
(one ~20 kB record each at the defaults), to queue ``i mod 8`` as ``tidemq bench batchcq``
sends them. After every ``--per-read`` puts it waits until the dispatch thread has taken
them, as in a broker, where that thread gets the GIL once the event loop has handled a
read (``tidemq bench batchcq`` reads about four requests at a time). Printed per request,
best of ``--rounds``: the user CPU of the putting thread (``RUSAGE_THREAD``, waits left
out) and of the dispatch thread (``/proc``, in clock ticks: keep ``--requests`` large).
User time only: a new page of the commit log costs kernel time wherever it is touched.

    .venv/bin/python benchmarks/inner_append.py --requests 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

from tidemq.formats.batch import encode_batch
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import HostAddr
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore

_TOPIC = "InnerAppend"
_QUEUES = 8


def _thread_user(native_id: int) -> float:
    """User CPU seconds of one of this process's threads."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK")


def _own_user() -> float:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_utime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--requests", type=int, default=20_000, help="puts a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-read", type=int, default=4, help="puts a dispatch round")
    args = parser.parse_args()
    body = bytes(encode_batch([(b"x" * args.size, encode_properties({"UNIQ_KEY": f"{i:032X}"}),
                                0) for i in range(args.batch)]))
    uniq = "7F0000010F3A18B4AAC2123456780000"
    props = encode_properties({"UNIQ_KEY": uniq, "WAIT": "true", "CLUSTER": "DefaultCluster"})
    born = HostAddr(b"\x7f\x00\x00\x01", 40000)
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore(StoreConfig(store_path_root_dir=root,
                                         mapped_file_size_commit_log=1 << 30))
        store.set_batch_topic(_TOPIC)
        store.start()
        try:
            dispatcher = store.dispatcher
            assert dispatcher is not None and dispatcher._thread is not None  # started
            tid = dispatcher._thread.native_id
            assert tid is not None

            def put(i: int) -> None:
                store.put_inner_batch(_TOPIC, i % _QUEUES, body, props, args.batch,
                                      keys=(uniq,), born_host=born, wait_flush=False)

            def settle() -> float:
                """Wait until everything put is dispatched; the putting thread's user CPU
                meanwhile (to leave out)."""
                before = _own_user()
                end = store.commitlog.max_offset
                deadline = time.monotonic() + 30
                while dispatcher.dispatched_offset < end:
                    if time.monotonic() > deadline:
                        raise SystemExit("the puts were not dispatched within 30 s")
                    time.sleep(0.0001)
                return _own_user() - before

            for i in range(200):  # files made, caches warm
                put(i)
            settle()
            puts, rounds = [], []
            for _ in range(args.rounds):
                waited = 0.0
                d0, p0 = _thread_user(tid), _own_user()
                for i in range(args.requests):
                    put(i)
                    if i % args.per_read == args.per_read - 1:
                        waited += settle()
                waited += settle()
                puts.append((_own_user() - p0 - waited) / args.requests * 1e6)
                rounds.append((_thread_user(tid) - d0) / args.requests * 1e6)
        finally:
            store.shutdown()
    print(f"inner batches of {args.batch} x {args.size} B, {args.per_read} puts a dispatch "
          f"round: put {min(puts):.2f} us of user CPU a request (rounds "
          f"{', '.join(f'{x:.2f}' for x in puts)}), dispatch thread {min(rounds):.2f} us "
          f"(rounds {', '.join(f'{x:.2f}' for x in rounds)})")


if __name__ == "__main__":
    main()
