"""A broker that returns with a stale logical-queue mapping writes nothing before it has
merged the current one (docs/logical-queues.md, "Migrating away from a dead broker").

broker-b, a ``tidemq broker`` process, leads logical queue 0 and is killed with SIGKILL;
the queue is cut out of it with a forced migration to broker-a (in-process). broker-b's
own copy of the mapping still says its segment is open. While it starts again, a client
connects to its port in a loop and sends to that physical queue (``lo=false``, as a
forwarding broker does): every send it gets an answer to must be refused, and the queue
must hold no more messages than before the kill.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.child_server import SMALL_SEGMENT

from tidemq.client import AdminClient
from tidemq.client.logical_admin import LogicalQueueAdmin
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, TideMQError
from tidemq.formats.logical_mapping import TopicMapping
from tidemq.net import RemotingClient
from tidemq.testing import Cluster

from .broker_process import BrokerProcess

TOPIC = "LQR"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path / "a", brokers=1) as c:
        yield c


def physical_send(body: bytes) -> RemotingCommand:
    cmd = wire.send(TOPIC, body, queue_id=0)
    cmd.ext_fields["lo"] = "false"
    return cmd


async def held_copy(client: RemotingClient, addr: str) -> TopicMapping | None:
    try:
        resp = await client.request(addr, RemotingCommand.request(
            RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": TOPIC}), 3.0)
    except TideMQError:
        return None
    if resp.code != ResponseCode.SUCCESS:
        return None
    return TopicMapping.from_json(json.loads(resp.full_body()))


async def physical_max(client: RemotingClient, addr: str) -> int:
    resp = await client.request(addr, RemotingCommand.request(
        RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0", "lo": "false"}), 3.0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["offset"])


@pytest.mark.timeout(120)
async def test_a_returning_cut_leader_takes_no_write_before_it_merged(
        tmp_path: Path, cluster: Cluster) -> None:
    b = BrokerProcess(tmp_path / "b", cluster.namesrv_addr,
                      {"brokerName": "broker-b", "logicalSyncInterval": "60000",
                       "mappedFileSizeCommitLog": SMALL_SEGMENT})
    await asyncio.to_thread(b.start)
    client = RemotingClient()
    try:
        async with AdminClient(cluster.namesrv_addr) as admin:
            lqa = LogicalQueueAdmin(admin)
            await lqa.create(TOPIC, 1, ["broker-b"])
            for body in (b"m0", b"m1"):  # acknowledged before the kill
                resp = await client.request(b.addr, physical_send(body), 3.0)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            stale = await held_copy(client, b.addr)
            assert stale is not None and stale.leader(0) is not None
            await asyncio.to_thread(b.kill9)
            cut = await lqa.migrate(TOPIC, 0, "broker-a", force=True, wait=0)
            assert cut.queues[0][0].forced and cut.leader(0) is not None

            answers: list[tuple[int, str]] = []
            attempts = 0
            started = asyncio.Event()

            async def hammer() -> None:
                """Connect and send in a loop while broker-b starts, then a little more."""
                nonlocal attempts
                after_start = 0
                while after_start < 20:
                    attempts += 1
                    try:
                        resp = await client.request(b.addr, physical_send(b"late"), 3.0)
                    except TideMQError:
                        await asyncio.sleep(0.002)  # refused: not listening yet
                        continue
                    answers.append((resp.code, resp.remark or ""))
                    if started.is_set():
                        after_start += 1

            sender = asyncio.ensure_future(hammer())
            try:
                await asyncio.to_thread(b.start)
                started.set()
                await asyncio.wait_for(sender, 60)
            finally:
                sender.cancel()
            assert attempts > len(answers) > 0  # it knocked while the port was closed
            assert all(code != ResponseCode.SUCCESS for code, _ in answers), answers
            assert all("moved" in remark for _, remark in answers), answers
            assert await physical_max(client, b.addr) == 2
            merged = await held_copy(client, b.addr)
            assert merged is not None and merged.queues[0] == cut.queues[0]
    finally:
        await client.close()
        await asyncio.to_thread(b.kill9)
