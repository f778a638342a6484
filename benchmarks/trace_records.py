"""The CPU cost of message-trace records, without the network: what a traced producer's
tracer does per message, and what a broker does per record of a trace message's keys.

``client``: ``--batches`` prepared batches of ``--batch`` messages of 128 B (100 by
default), as a producer loop sends them; for each, the ``Pub`` records
(``pub_records``), their placement into trace messages of at most 128,000 bytes (the
tracer's builder), and the encoding of each 8-message trace send
(``prepare_send_batch``). ``--batch 1`` is a traced single send (``Producer.send``, and
the auto-batching producer's batches of one): its message and msgId as a tuple.

``broker``: one trace message of 750 records' keys (its ``KEYS`` property, 24 KB): the
property string's check, its parse, the index keys' split and the keys' hashes -- what
the send path and the key index do with it.

Each part runs ``--repeat`` times; the median and the fastest CPU time per message (or
record) are printed. Both parts use interfaces that older checkouts have too, so the
script runs against one (``PYTHONPATH=<checkout>/src``), alternating with this one to
compare::

    .venv/bin/python benchmarks/trace_records.py client
    .venv/bin/python benchmarks/trace_records.py broker
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tidemq.broker.processors.message_facts import index_keys
from tidemq.client.sending import BatchCompression, prepare_send_batch
from tidemq.client.stamps import new_uniq_keys
from tidemq.client.tracer import BATCH_MESSAGES, _MessageBuilder, pub_records
from tidemq.formats.properties import parse_property_text, property_text_error
from tidemq.store.index_keys import index_hashes
from tidemq.types import Message, MessageQueue, SendResult, SendStatus

BATCH = 100
RECORDS = 750


def client(batches: int, batch: int = BATCH) -> Callable[[], float]:
    keys = new_uniq_keys("127.0.0.1")
    msgs = [Message("BenchTopic", b"x" * 128) for _ in range(batch)]
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
            builder.extend(pub_records("bench_producer_0", msgs, ids, result, 1, 2))
            if len(builder.messages) >= BATCH_MESSAGES:
                prepare_send_batch([m for m, _ in builder.take()], max_size=4 << 20,
                                   keys=keys, now_ms=1, compression=BatchCompression(None))
        builder.close()
        return (time.process_time() - started) / (batches * batch) * 1e9

    return run


def broker(messages: int) -> Callable[[], float]:
    ids = [f"7F000001{i * 7919:024X}" for i in range(RECORDS)]
    text = "".join(f"{k}\x01{v}\x02" for k, v in {
        "KEYS": " ".join(ids), "UNIQ_KEY": "A" * 32, "WAIT": "true"}.items())

    def run() -> float:
        started = time.process_time()
        for _ in range(messages):
            assert property_text_error(text) is None
            keys = index_keys(parse_property_text(text))
            index_hashes([f"RMQ_SYS_TRACE_TOPIC#{k}" for k in keys])
        return (time.process_time() - started) / (messages * RECORDS) * 1e9

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("client", "broker"))
    parser.add_argument("--batches", type=int, default=2000, help="client: batches per run")
    parser.add_argument("--batch", type=int, default=BATCH, help="client: messages per batch")
    parser.add_argument("--messages", type=int, default=300,
                        help="broker: trace messages per run")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    run = (client(args.batches, args.batch) if args.part == "client"
           else broker(args.messages))
    runs = [run() for _ in range(args.repeat)]
    unit = "message" if args.part == "client" else "record"
    print(f"{args.part}: CPU ns per {unit}, median {statistics.median(runs):.0f}, "
          f"fastest {min(runs):.0f} ({args.repeat} runs)")


if __name__ == "__main__":
    main()
