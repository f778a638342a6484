"""A broker process started on a store with damaged records: it starts, serves every
other message over the wire (the queue goes on past the damage), answers topic status,
and exports the skips as a metric."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.codec.message import decode_messages
from tidemq.formats.record import Record, decode_record
from tidemq.namesrv import NameServerApp
from tidemq.store.inspect import dump_records
from tidemq.store.layout import StoreLayout
from tidemq.types import MessageQueue

from .broker_process import BrokerProcess, free_port

TOPIC = "Damaged"
N = 60
SEGMENT = 64 * 1024
STORE = {"mappedFileSizeCommitLog": str(SEGMENT), "mappedFileSizeConsumeQueue": str(100 * 20)}


@pytest.fixture
def broker(tmp_path: Path, namesrv: NameServerApp) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "store", namesrv.address,
                            {**STORE, "metricsPort": str(free_port())})
    yield process
    process.stop()


def flip_properties(root: Path, index: int) -> int:
    """Make the properties of the ``index``-th record of TOPIC invalid UTF-8; its offset."""
    recs = [r for r in dump_records(root, None, 10_000).records if r.topic == TOPIC]
    phys, size = recs[index].phys, recs[index].size
    path = StoreLayout(root).commitlog_segment(phys - phys % SEGMENT)
    with path.open("r+b") as f:
        f.seek(phys % SEGMENT)
        rec = decode_record(f.read(size))
        assert isinstance(rec, Record)
        f.seek(phys % SEGMENT + size - len(rec.properties) + 1)
        f.write(b"\xff")
    return phys


async def read_all(addr: str) -> tuple[list[bytes], int]:
    """Every body of TOPIC/0 over the wire, and pulls that found nothing to serve."""
    bodies: list[bytes] = []
    offset, empty = 0, 0
    async with Peer(addr) as peer:
        end = await peer.max_offset(TOPIC, 0)
        while offset < end:
            resp = await peer(wire.pull(TOPIC, 0, offset, max_nums=8))
            nxt = int(resp.ext_fields["nextBeginOffset"])
            assert nxt > offset, (resp.code, resp.remark, offset)
            if resp.code == 0:
                bodies += [m.body for m in decode_messages(resp.full_body())]
            else:
                empty += 1
            offset = nxt
    return bodies, empty


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", [N // 2, N - 1], ids=["middle", "last"])
async def test_a_broker_serves_past_a_damaged_record(
        broker: BrokerProcess, namesrv: NameServerApp, victim: int) -> None:
    await asyncio.to_thread(broker.start)
    async with AdminClient(namesrv.address) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                 write_queue_nums=1)
    async with Peer(namesrv.address) as ns:
        await wire.eventually_route(ns, TOPIC, timeout=30)
    config = ClientConfig(namesrv_addr=(namesrv.address,))
    async with Producer("damage-producer", config=config) as producer:
        for i in range(N):
            await producer.send(Message(TOPIC, b"body-%03d" % i),
                                queue=MessageQueue(TOPIC, "broker-a", 0))
    await asyncio.to_thread(broker.stop)
    flip_properties(broker.root, victim)

    await asyncio.to_thread(broker.start)
    bodies, empty = await read_all(broker.addr)
    assert bodies == [b"body-%03d" % i for i in range(N) if i != victim]
    assert empty <= 1
    async with AdminClient(namesrv.address) as admin:
        status = await admin.topic_status(TOPIC)
    assert [(s.min_offset, s.max_offset) for s in status] == [(0, N)]
    port = broker.settings["metricsPort"]
    text = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read())
    skipped = [line for line in text.decode().splitlines()
               if line.startswith("tidemq_broker_damaged_records_skipped_total ")]
    assert skipped and float(skipped[0].split()[1]) >= 1
    assert "damaged commit-log record" in broker.log(400)
