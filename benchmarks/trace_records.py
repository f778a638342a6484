"""The CPU cost of message-trace records, without the network: what a traced producer's
tracer does per message, and what a broker does per record of a trace message's keys.

``client``: ``--batches`` prepared batches of ``--batch`` messages of 128 B (100 by
default), as a producer loop sends them; for each, the ``Pub`` records
(``pub_records``), their placement into trace messages of at most 128,000 bytes (the
tracer's builder), and the encoding (and compression) of each trace send. ``--batch 1``
is a traced single send (``Producer.send``, and the auto-batching producer's batches of
one): its message and msgId as a tuple.
``--produce``: the batches are ``AutoBatchProducer.produce``'s, bodies without properties,
whose messages the tracer is handed as well (a list in older checkouts).

``broker``: one trace message of 750 records' keys (its ``KEYS`` property, 24 KB): the
property string's check and parse, the index keys and their hashes -- what the send
path and the key index do with it, as the checkout does it (older checkouts split the
keys into a str each).

``send``: a broker's whole work for a traced producer's load, in this process, without
the network: ``--sends`` SEND_BATCH_MESSAGE requests of 85 messages of 128 B (a
``--linger-ms 0`` load's average batch) to an 8-queue topic through the broker's send
processor, and, for each ~730 of those messages, the trace send their ``Pub`` records
make (one compressed trace message; in older checkouts a batch of 8 for each 8 x ~730);
then the dispatch and the key index catch up. Printed
per message sent: the CPU time of the whole process, user and kernel, the part spent by
threads the broker did not start (a math library's workers), and minor page faults.
``--no-trace`` leaves the trace sends out; ``--trace-only`` sends only them (a broker
that serves only the trace topic; figures are still per traced message).

Each part runs ``--repeat`` times; the median and the fastest CPU time per message (or
record) are printed. Both parts use interfaces that older checkouts have too, so the
script runs against one (``PYTHONPATH=<checkout>/src``), alternating with this one to
compare::

    .venv/bin/python benchmarks/trace_records.py client
    .venv/bin/python benchmarks/trace_records.py broker
    .venv/bin/python benchmarks/trace_records.py send [--no-trace]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tidemq.client import ClientConfig
from tidemq.client.sending import BatchCompression, prepare_send_batch, prepare_send_bodies
from tidemq.client.stamps import UniqKeyGenerator, new_uniq_keys
from tidemq.client.tracer import BATCH_MESSAGES, _MessageBuilder, pub_records
from tidemq.codec.bodies import TopicConfig
from tidemq.codec.command import RemotingCommand
from tidemq.codec.message import SendOptions, batch_send_request, send_request
from tidemq.formats.properties import index_keys, parse_property_text, property_text_error
from tidemq.inprocess import Cluster
from tidemq.store.index_keys import index_hashes
from tidemq.types import Message, MessageQueue, SendResult, SendStatus

BATCH = 100
RECORDS = 750


def _produced(bodies: list[bytes]) -> Sequence[Message]:
    """The messages a traced ``produce()`` batch hands the tracer, as this checkout does."""
    try:
        from tidemq.client.batching import _SharedMessages
    except ImportError:  # older checkouts: a message made per body
        return [Message("BenchTopic", b, {}) for b in bodies]
    return _SharedMessages("BenchTopic", bodies, None)


def client(batches: int, batch: int = BATCH, produce: bool = False) -> Callable[[], float]:
    keys = new_uniq_keys("127.0.0.1")
    bodies = [b"x" * 128] * batch
    msgs: Sequence[Message] = [Message("BenchTopic", b) for b in bodies]
    if produce:
        prepared = prepare_send_bodies("BenchTopic", bodies, max_size=4 << 20, keys=keys,
                                       now_ms=1, compression=BatchCompression(None),
                                       properties=None)
    else:
        prepared = prepare_send_batch(msgs, max_size=4 << 20, keys=keys, now_ms=1,
                                      compression=BatchCompression(None))
    offsets = ",".join(f"7F00000100002A9F{i * 200:016X}" for i in range(batch))
    result = SendResult(SendStatus.SEND_OK, ",".join(prepared.keys), offsets,
                        MessageQueue("BenchTopic", "broker-a", 0), 0, message_count=batch)
    ids = (prepared.keys[0],) if batch == 1 else prepared

    def run() -> float:
        started = time.process_time()
        builder = _MessageBuilder("RMQ_SYS_TRACE_TOPIC")
        for _ in range(batches):
            # a produce() batch's messages are made for the tracer with each batch
            traced = _produced(bodies) if produce else msgs
            builder.extend(pub_records("bench_producer_0", traced, ids, result, 1, 2))
            if len(builder.messages) >= BATCH_MESSAGES:
                _trace_sends([m for m, _ in builder.take(BATCH_MESSAGES)], keys, 1)
        builder.close()
        return (time.process_time() - started) / (batches * batch) * 1e9

    return run


def _key_hashes() -> Callable[[Sequence[str]], object]:
    """How this checkout's key index hashes a trace message's keys."""
    try:
        from tidemq.store.index_keys import prefixed_hashes
    except ImportError:  # older checkouts: a ``topic#key`` string per key
        return lambda keys: index_hashes([f"RMQ_SYS_TRACE_TOPIC#{k}" for k in keys])
    return lambda keys: prefixed_hashes(["RMQ_SYS_TRACE_TOPIC#"], [len(keys)], keys)


def _indexed() -> Callable[[str], object]:
    """What this checkout's send path and key index do with a trace message's property
    text: check and parse it, take the index keys, hash them."""
    try:
        from tidemq.formats.properties import parse_checked_property_text
    except ImportError:  # older checkouts: checked, then parsed
        def parse_checked_property_text(text: str) -> dict[str, str] | str:
            return property_text_error(text) or parse_property_text(text)
    try:
        from tidemq.store.index_keys import KeyWords, record_hashes
    except ImportError:  # older checkouts: the keys split into a str each
        hashes = _key_hashes()

        def split(text: str) -> object:
            props = parse_checked_property_text(text)
            assert isinstance(props, dict)
            return hashes(index_keys(props))

        return split

    def words(text: str) -> object:
        props = parse_checked_property_text(text)
        assert isinstance(props, dict)
        keys = KeyWords.of(props.get("UNIQ_KEY", ""), props["KEYS"])
        return record_hashes(["RMQ_SYS_TRACE_TOPIC#"], [keys])

    return words


def broker(messages: int) -> Callable[[], float]:
    ids = [f"7F000001{i * 7919:024X}" for i in range(RECORDS)]
    text = "".join(f"{k}\x01{v}\x02" for k, v in {
        "KEYS": " ".join(ids), "UNIQ_KEY": "A" * 32, "WAIT": "true"}.items())

    indexed = _indexed()

    def run() -> float:
        started = time.process_time()
        for _ in range(messages):
            indexed(text)
        return (time.process_time() - started) / (messages * RECORDS) * 1e9

    return run


SEND_BATCH = 85


class _Peer:
    remote_address = "127.0.0.1:40000"


def _send_load(sends: int, trace: bool, business: bool = True
               ) -> tuple[list[RemotingCommand], int]:
    """The requests of ``sends`` batches (unless not ``business``) and, when ``trace``, the
    trace sends their records fill, in the order a traced producer issues them; and the
    messages the records are of."""
    keys = new_uniq_keys("127.0.0.1")
    now = int(time.time() * 1000)
    builder = _MessageBuilder("RMQ_SYS_TRACE_TOPIC")
    out: list[RemotingCommand] = []
    phys = 0
    for i in range(sends):
        msgs = [Message("BenchTopic", b"x" * 128) for _ in range(SEND_BATCH)]
        prepared = prepare_send_batch(msgs, max_size=4 << 20, keys=keys, now_ms=now,
                                      compression=BatchCompression(None))
        if business:
            out.append(batch_send_request(msgs, SendOptions("bench_producer_0"),
                                          queue_id=i % 8, now_ms=now, keys=keys))
        if not trace:
            continue
        offsets = ",".join(f"7F00000100002A9F{phys + j * 200:016X}" for j in range(SEND_BATCH))
        phys += SEND_BATCH * 200
        result = SendResult(SendStatus.SEND_OK, ",".join(prepared.keys), offsets,
                            MessageQueue("BenchTopic", "broker-a", i % 8), 0,
                            message_count=SEND_BATCH)
        builder.extend(pub_records("bench_producer_0", msgs, prepared, result, now, 2))
        if len(builder.messages) >= BATCH_MESSAGES:
            out += _trace_sends([m for m, _ in builder.take(BATCH_MESSAGES)], keys, now)
    return out, sends * SEND_BATCH


def _trace_sends(trace_msgs: list[Message], keys: UniqKeyGenerator, now: int
                 ) -> list[RemotingCommand]:
    """The requests a tracer sends ``trace_msgs`` in, as this checkout does: each alone,
    compressed as by default; a batch in older checkouts."""
    opts = _trace_options()
    if opts is None:
        return [batch_send_request(trace_msgs, SendOptions("trace_producer"), queue_id=0,
                                   now_ms=now, keys=keys)]
    return [send_request(m, opts, queue_id=0, now_ms=now, keys=keys) for m in trace_msgs]


@functools.cache
def _trace_options() -> SendOptions | None:
    """A tracer's send options, made once as a tracer makes them once (a client
    configuration looks up the host's address: not part of a trace send); ``None`` in
    older checkouts, which send trace messages as a batch."""
    try:
        from tidemq.client.tracer import trace_send_options
    except ImportError:
        return None
    return trace_send_options(SendOptions("trace_producer"), ClientConfig().trace_compression)


def _foreign_thread_seconds(started: set[int]) -> float:
    """CPU seconds of this process's threads that Python did not start."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        if int(tid) in started:
            continue
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def send(sends: int, trace: bool, business: bool = True) -> Callable[[], float]:
    requests, messages = _send_load(sends, trace, business)

    async def once() -> tuple[float, float, float, float]:
        with tempfile.TemporaryDirectory() as root:
            async with Cluster(Path(root), broker={"trace_topic_enable": True},
                               store={"mapped_file_size_commit_log": 1 << 30}) as cluster:
                app = cluster.brokers[0]
                app.ctx.topics.upsert(TopicConfig("BenchTopic", read_queue_nums=8,
                                                  write_queue_nums=8))
                process, store, peer = app.send.process, app.ctx.store, _Peer()
                ours = {t.native_id for t in threading.enumerate()
                        if t.native_id is not None}
                ours.add(os.getpid())
                foreign = _foreign_thread_seconds(ours)
                before = resource.getrusage(resource.RUSAGE_SELF)
                for cmd in requests:
                    answer = process(peer, cmd)  # type: ignore[arg-type]
                    assert answer is not None and answer.code == 0, answer
                assert store.wait_dispatched(120)
                assert store.index is not None
                store.index.drain()
                after = resource.getrusage(resource.RUSAGE_SELF)
                foreign = _foreign_thread_seconds(ours) - foreign
        per = 1e9 / messages
        return ((after.ru_utime - before.ru_utime) * per,
                (after.ru_stime - before.ru_stime) * per, foreign * per,
                (after.ru_minflt - before.ru_minflt) * 1000 / messages)

    def run() -> float:
        user, system, foreign, faults = asyncio.run(once())
        print(f"  user {user:.0f} ns, kernel {system:.0f} ns (foreign threads {foreign:.0f}), "
              f"{faults:.1f} minor faults per 1000 messages")
        return user + system

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("client", "broker", "send"))
    parser.add_argument("--batches", type=int, default=2000, help="client: batches per run")
    parser.add_argument("--batch", type=int, default=BATCH, help="client: messages per batch")
    parser.add_argument("--produce", action="store_true",
                        help="client: produce()'s batches of bodies")
    parser.add_argument("--messages", type=int, default=300,
                        help="broker: trace messages per run")
    parser.add_argument("--sends", type=int, default=2000, help="send: batches sent per run")
    parser.add_argument("--no-trace", action="store_true", help="send: no trace sends")
    parser.add_argument("--trace-only", action="store_true",
                        help="send: only the trace sends")
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs (default 7; send: 3)")
    args = parser.parse_args()
    if args.part == "client":
        run = client(args.batches, args.batch, args.produce)
    elif args.part == "broker":
        run = broker(args.messages)
    else:
        run = send(args.sends, not args.no_trace, not args.trace_only)
    repeat = args.repeat or (3 if args.part == "send" else 7)
    runs = [run() for _ in range(repeat)]
    unit = "record" if args.part == "broker" else "message"
    print(f"{args.part}: CPU ns per {unit}, median {statistics.median(runs):.0f}, "
          f"fastest {min(runs):.0f} ({repeat} runs)")


if __name__ == "__main__":
    main()
