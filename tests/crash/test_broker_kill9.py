"""kill -9 a broker process while a real client has acknowledged sends, restart it on the
same store, and read every queue back over the wire: every acknowledged message is there
exactly once, at the offset its acknowledgement named, in the order it was sent.

Both flush modes: with SYNC_FLUSH an acknowledgement means fdatasync; with ASYNC_FLUSH it
means the record is in the mapped commit log, that is in the page cache, which a process
crash (unlike a machine crash) leaves intact -- so neither mode may lose anything here.

Each queue has one sender (the Python client, sends and batches, some bodies large enough
to be compressed) that sends its next message only after the previous one was
acknowledged, so a queue's order is its sender's order. Sends are never retried (a retry
after a lost response could store a message twice, which is the client's at-least-once,
not the broker's doing).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.namesrv import NameServerApp
from tidemq.types import MessageQueue, SendStatus

from .broker_process import BrokerProcess
from .kill_round import KillRound

TOPIC = "Acked"
QUEUES = 4
ROUNDS = 3
STORE = {  # small files, so that sends roll commit-log and consume-queue segments
    "mappedFileSizeCommitLog": str(256 * 1024),
    "mappedFileSizeConsumeQueue": str(200 * 20),
    "flushIntervalConsumeQueue": "100",
}


def body_for(body_id: int) -> bytes:
    """A body that is a function of its id; every seventh one is 6-12 KB of repeated text,
    which the client compresses (compress_msg_body_over_howmuch 4096)."""
    rng = random.Random(body_id)
    head = f"{body_id:08d}:".encode()
    if body_id % 7 == 0:
        return head + b"compressible " * rng.randint(500, 1000)
    return head + rng.randbytes(rng.randint(1, 800))


def body_id(body: bytes) -> int:
    return int(body[:8])


class Round(KillRound):
    """One life of the broker: senders until the kill, what was acknowledged."""

    def __init__(self, namesrv: str, ids: Iterator[int], rng: random.Random,
                 kill_after: int, batch_protocol: bool) -> None:
        super().__init__(ClientConfig(namesrv_addr=(namesrv,), retry_times_when_send_failed=0,
                                      send_msg_timeout=60.0, request_timeout=60.0,
                                      batch_protocol_enable=batch_protocol),
                         ids, rng, kill_after, QUEUES)

    async def sender(self, producer: Producer, queue_id: int) -> None:
        mq = MessageQueue(TOPIC, "broker-a", queue_id)
        while True:
            batch = [next(self.ids) for _ in range(self.rng.choice((1, 1, 1, 2, 5)))]
            msgs = [Message(TOPIC, body_for(i)) for i in batch]
            try:
                if len(msgs) == 1:
                    result = await producer.send(msgs[0], queue=mq)
                else:
                    result = await producer.send_batch(msgs, queue=mq)
            except Exception:
                if self.killed:
                    return  # the broker is gone: this send is not acknowledged
                raise
            if result.status is not SendStatus.SEND_OK:
                assert self.killed, result
                return
            assert result.queue == mq and result.message_count == len(batch), result
            self.acknowledged(queue_id, result, batch)


async def read_queues(addr: str) -> dict[int, list[int]]:
    """The body ids of every queue of TOPIC, in queue-offset order, from offset 0."""
    out: dict[int, list[int]] = {}
    async with Peer(addr) as peer:
        for queue_id in range(QUEUES):
            ids: list[int] = []
            end = await peer.max_offset(TOPIC, queue_id)
            while len(ids) < end:
                msgs = await peer.messages(TOPIC, queue_id, len(ids))
                assert msgs, (queue_id, len(ids), end)
                for m in msgs:
                    assert (m.topic, m.queue_id, m.queue_offset) == (TOPIC, queue_id, len(ids))
                    assert m.body == body_for(body_id(m.body)), (queue_id, m.queue_offset)
                    ids.append(body_id(m.body))
            out[queue_id] = ids
    return out


def check(stored: dict[int, list[int]], acked: dict[int, list[tuple[int, int]]],
          issued: int) -> None:
    every = Counter(i for ids in stored.values() for i in ids)
    twice = sorted(i for i, n in every.items() if n > 1)
    assert not twice, f"stored more than once: {twice[:20]}"
    assert all(0 <= i < issued for i in every), "a body nobody sent"
    for queue_id, pairs in acked.items():
        ids = stored[queue_id]
        lost = [(offset, i) for offset, i in pairs if offset >= len(ids) or ids[offset] != i]
        assert not lost, f"queue {queue_id}: acknowledged (offset, id) not found: {lost[:20]}"
        assert ids == sorted(ids), f"queue {queue_id} is out of its sender's order"


@pytest.fixture
def broker(tmp_path: Path, namesrv: NameServerApp,
           request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "store", namesrv.address,
                            {**STORE, "flushDiskType": request.param})
    yield process
    process.stop()


async def routed(namesrv: str) -> None:
    async with Peer(namesrv) as ns:
        await wire.eventually_route(ns, TOPIC, timeout=30)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("batch_protocol", [True, False], ids=["batch-rpc", "send-v2"])
@pytest.mark.parametrize("broker", ["SYNC_FLUSH", "ASYNC_FLUSH"], indirect=True)
async def test_kill9_of_the_broker_loses_no_acknowledged_message(
        broker: BrokerProcess, namesrv: NameServerApp, batch_protocol: bool) -> None:
    """``batch_protocol``: the client coalesces sends into batch-protocol RPCs (its
    default), or sends each with SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE as other clients do."""
    rng = random.Random(20261128)
    await asyncio.to_thread(broker.start)  # the name server answers meanwhile
    async with AdminClient(namesrv.address) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
    ids = itertools.count()
    acked: dict[int, list[tuple[int, int]]] = {q: [] for q in range(QUEUES)}
    for round_ in range(ROUNDS):
        await routed(namesrv.address)
        life = Round(namesrv.address, ids, rng, kill_after=rng.randint(100, 400),
                     batch_protocol=batch_protocol)
        await life.run(broker)
        for queue_id, pairs in life.acked.items():
            acked[queue_id] += pairs
        issued = next(ids)
        await asyncio.to_thread(broker.start)  # recovery, same port, same store
        stored = await read_queues(broker.addr)
        check(stored, acked, issued)
        assert sum(map(len, acked.values())) >= 100 * (round_ + 1)
