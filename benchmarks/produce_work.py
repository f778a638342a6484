"""The client's work per message of ``AutoBatchProducer.produce`` and ``send``, alone.

The auto-batcher sends through a stand-in producer that builds each batch's real
SEND_BATCH_MESSAGE frame (``PreparedBatch.request`` and ``encode_command``) and answers
it at once with the result a broker would give (one offset message id per record), so
what is measured is the client's work only: queueing, encoding, handing out results,
calling the callbacks or waking the futures. Modes:

==========  ==========================================================================
``cb``      ``produce(topic, body, on_delivery=cb)``, one callback for all messages
``nocb``    ``produce(topic, body)``, no callback
``send``    ``await send(msg)`` per message, then every future awaited
==========  ==========================================================================

``--tags`` gives every message those tags. ``--window`` messages are queued, then the
loop yields until they are answered (as ``tidemq bench produce --produce --in-flight
WINDOW``); batches hold at most 10,000 messages and 1 MiB. Printed: CPU microseconds a
message (``time.process_time``) and the requests made. CPU time moves with the
machine's load; the instruction count does not: run the script under callgrind for two
message counts and divide the difference of the totals by the difference of the counts
(start-up cancels out)::

    .venv/bin/python benchmarks/produce_work.py cb --messages 300000
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/produce_work.py cb --messages 8000 2>&1 | grep Collected
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/produce_work.py cb --messages 48000 2>&1 | grep Collected
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from tidemq.client import AutoBatchProducer, ClientConfig, Message, MessageQueue
from tidemq.client.queue_types import QueueType
from tidemq.client.sending import BatchCompression, PreparedBatch, new_send_result, send_options
from tidemq.client.topic_route import TopicRoute
from tidemq.codec.frame import encode_command
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.types import SendResult, SendStatus

TOPIC = "Work"
QUEUES = [MessageQueue(TOPIC, "broker-a", i) for i in range(8)]


class _Route:
    """What the auto-batcher reads of a route: its topic and writable queues."""

    topic = TOPIC
    publish_queues: Sequence[MessageQueue] = QUEUES


class _Routes:
    def ready(self, topic: str, allow_default: bool = False) -> TopicRoute | None:
        return _Route()  # type: ignore[return-value]

    async def get(self, topic: str, allow_default: bool = False) -> TopicRoute:
        return _Route()  # type: ignore[return-value]


class _Instance:
    def __init__(self) -> None:
        self.routes = _Routes()
        self.uniq_keys = UniqKeyGenerator("127.0.0.1", 1)


class _InstantProducer:
    """A producer whose broker answers every batch at once."""

    def __init__(self) -> None:
        self.config = ClientConfig(namesrv_addr=("127.0.0.1:9876",))
        self.batch_compression = BatchCompression()
        self.instance = _Instance()
        self.tracer = None
        self.requests = 0
        self._opts = send_options(self.config, "work")
        self._offset = 0
        self._record_ids: dict[int, str] = {}

    def _ids(self, n: int) -> str:
        ids = self._record_ids.get(n)
        if ids is None:
            ids = self._record_ids[n] = ",".join(f"7F00000100002A9F{i:016X}"
                                                 for i in range(n))
        return ids

    async def send_prepared_batch(self, prepared: PreparedBatch, first: Message,
                                  queue: MessageQueue | None = None,
                                  messages: Sequence[Message] | None = None) -> SendResult:
        mq = queue or QUEUES[0]
        encode_command(prepared.request(self._opts, mq, QueueType.SIMPLE, now_ms=1))
        await asyncio.sleep(0)
        n = prepared.count
        self.requests += 1
        self._offset += n
        return new_send_result(SendStatus.SEND_OK, prepared.msg_id(QueueType.SIMPLE),
                               self._ids(n), mq, self._offset - n, None, n)

    async def send(self, msg: Message, queue: MessageQueue | None = None) -> SendResult:
        self.requests += 1
        self._offset += 1
        return new_send_result(SendStatus.SEND_OK, "key", self._ids(1), queue or QUEUES[0],
                               self._offset - 1, None)


async def _run(mode: str, messages: int, window: int, tags: str | None
               ) -> tuple[float, int]:
    producer = _InstantProducer()
    batcher = AutoBatchProducer(producer, max_batch_messages=10_000,  # type: ignore[arg-type]
                                max_batch_bytes=1 << 20)
    body = b"x" * 128
    delivered = [0]

    def on_delivery(error: BaseException | None, result: SendResult | None) -> None:
        delivered[0] += 1

    callback = on_delivery if mode == "cb" else None
    msg = Message(TOPIC, body, {"TAGS": tags} if tags else {})
    start = time.process_time()
    sent = 0
    while sent < messages:
        if mode == "send":
            futures = [await batcher.send(msg) for _ in range(window)]
            for future in futures:
                await future
        else:
            for _ in range(window):
                batcher.produce(TOPIC, body, tags=tags, on_delivery=callback)
            await batcher.drain(0)
        sent += window
    await batcher.flush()
    return (time.process_time() - start) / sent * 1e6, producer.requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("cb", "nocb", "send"))
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--window", type=int, default=4000)
    parser.add_argument("--tags", help="tags of every message (default: none)")
    args = parser.parse_args()
    us, requests = asyncio.run(_run(args.mode, args.messages, args.window, args.tags))
    print(f"{args.mode}: {us:.3f} µs of CPU a message, {requests} requests")


if __name__ == "__main__":
    main()
