"""A master and a replica in one process: real TCP on loopback, real stores.

Sends reach the replica's queues; a replica refuses sends and serves pulls; a
SYNC_MASTER answers SEND_OK once the replica holds the message, SLAVE_NOT_AVAILABLE
without a replica, FLUSH_SLAVE_TIMEOUT when the replica does not confirm in time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker.wire import Peer, create_topic, dispatched, request, send, send_batch

from tidemq.broker.app import BrokerApp
from tidemq.broker.metrics import BrokerMetrics
from tidemq.broker.replication.role import BrokerRole
from tidemq.cli.commands.admin import _cluster_rows
from tidemq.client import AdminClient
from tidemq.codec.bodies import TopicRouteData, decode_body
from tidemq.codec.command import RequestCode
from tidemq.codec.ha import encode_report
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster

SMALL = {"mapped_file_size_commit_log": 64 * 1024}


@pytest.fixture
async def group(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.SYNC_MASTER},
                       store=SMALL) as c:
        yield c


async def caught_up(master: BrokerApp, replica: BrokerApp) -> None:
    client = replica.ctx.replication.client
    assert client is not None
    await asyncio.wait_for(client.reached(master.store.commitlog.max_offset), 30)
    await dispatched(replica)


def queue_bytes(broker: BrokerApp, topic: str, queue_id: int) -> bytes:
    got = broker.store.get(topic, queue_id, 0, max_count=100_000, max_bytes=1 << 30)
    return b"".join(bytes(b) for b in got.buffers)


async def test_sync_master_answers_once_the_replica_holds_the_message(group: Cluster) -> None:
    master = group.brokers[0]
    replica = await group.add_replica(master, slave_metadata_sync_interval=100)
    async with Peer(master.broker_addr) as peer, Peer(replica.broker_addr) as rpeer:
        await peer.ok(create_topic("T", 2))
        await asyncio.wait_for(replica.ctx.replication.client.connected.wait(), 10)  # type: ignore[union-attr]
        for i in range(200):
            resp = await peer(send("T", b"m%d" % i, queue_id=i % 2))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            # acknowledged means the replica's log holds it (sends are one at a time)
            assert replica.store.commitlog.max_offset == master.store.commitlog.max_offset
        batch = await peer(send_batch("T", [(b"b%d" % i, "") for i in range(50)]))
        assert batch.code == ResponseCode.SUCCESS
        assert replica.store.commitlog.max_offset == master.store.commitlog.max_offset
        await dispatched(replica)
        await dispatched(master)
        for qid in (0, 1):
            assert queue_bytes(replica, "T", qid) == queue_bytes(master, "T", qid)
        # the replica copies the master's topics, serves pulls, refuses sends
        while replica.topics.get("T") != master.topics.get("T"):
            replica.metadata_sync.synced.clear()
            await asyncio.wait_for(replica.metadata_sync.synced.wait(), 10)
        pulled = await rpeer.messages("T", 0, max_nums=32)
        assert [m.body for m in pulled] == [b"m%d" % i for i in range(0, 64, 2)]
        refused = await rpeer(send("T", b"no"))
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "replica" in (refused.remark or "")
        # name servers list both members of the group
        async with Peer(group.namesrv_addr) as ns:
            route_resp = await ns.ok(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T"))
        route = decode_body(route_resp.body, TopicRouteData)
        addrs = route.broker_datas[0].broker_addrs
        assert addrs == {0: master.broker_addr, 1: replica.broker_addr}


async def test_sync_master_without_replica_answers_slave_not_available(group: Cluster) -> None:
    master = group.brokers[0]
    async with Peer(master.broker_addr) as peer:
        await peer.ok(create_topic("T", 1))
        resp = await peer(send("T", b"alone"))
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert resp.ext_fields["msgId"]  # stored all the same, as upstream
        await dispatched(master)
        assert master.store.max_offset("T", 0) == 1


async def test_a_replica_that_does_not_confirm_times_sends_out(tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.SYNC_MASTER,
                                         "slave_timeout": 300}, store=SMALL) as group:
        master = group.brokers[0]
        host, _, port = master.ctx.replication.ha_address.rpartition(":")
        # a replica that reports once and then never again: it never confirms anything
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(encode_report(master.store.commitlog.max_offset))
        await writer.drain()
        try:
            async with Peer(master.broker_addr) as peer:
                await peer.ok(create_topic("T", 1))
                server = master.ctx.replication.server
                assert server is not None
                reported = asyncio.Event()
                server.on_report.append(reported.set)
                while not server.links:
                    reported.clear()
                    await asyncio.wait_for(reported.wait(), 10)
                sends = [peer(send("T", b"m%d" % i)) for i in range(20)]
                answers = await asyncio.gather(*sends)
                assert {a.code for a in answers} == {ResponseCode.FLUSH_SLAVE_TIMEOUT}
                assert all(a.ext_fields["msgId"] for a in answers)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def test_a_far_behind_replica_catches_up_while_the_master_takes_writes(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.ASYNC_MASTER},
                       store=SMALL) as group:
        master = group.brokers[0]
        async with Peer(master.broker_addr) as peer:
            await peer.ok(create_topic("T", 4))
            for i in range(60):  # several segments before the replica exists
                await peer.ok(send_batch("T", [(b"x%d" % i * 40, "") for _ in range(40)]))
            assert len(master.store.commitlog.segments) > 3
            replica = await group.add_replica(master)

            async def write_more() -> None:
                for i in range(100):
                    await peer.ok(send("T", b"late%d" % i, queue_id=i % 4))

            await write_more()
            await caught_up(master, replica)
            await dispatched(master)
            for qid in range(4):
                assert queue_bytes(replica, "T", qid) == queue_bytes(master, "T", qid)
            assert replica.store.max_offset("T", 0) == master.store.max_offset("T", 0)


async def test_cluster_list_and_metrics_show_roles_and_replication_lag(group: Cluster) -> None:
    master = group.brokers[0]
    replica = await group.add_replica(master)
    async with Peer(master.broker_addr) as peer:
        await peer.ok(create_topic("T", 1))
        await asyncio.wait_for(replica.ctx.replication.client.connected.wait(), 10)  # type: ignore[union-attr]
        await peer.ok(send("T", b"x"))
    async with AdminClient(group.namesrv_addr) as admin:
        rows = {r["brokerId"]: r for r in await _cluster_rows(admin)}
    assert rows[0]["role"] == "SYNC_MASTER" and rows[0]["replicationLagBytes"] == "0"
    assert rows[1]["role"] == "SLAVE" and rows[1]["address"] == replica.broker_addr
    # a replica that stops confirming shows as lag on its master
    server = master.ctx.replication.server
    assert server is not None
    reported = asyncio.Event()
    server.on_report.append(reported.set)
    host, _, port = master.ctx.replication.ha_address.rpartition(":")
    _, silent = await asyncio.open_connection(host, int(port))
    silent.write(encode_report(master.store.commitlog.max_offset))  # and never again
    await silent.drain()
    try:
        while len(server.links) < 2:
            reported.clear()
            await asyncio.wait_for(reported.wait(), 10)
        await master.ctx.replication.role.become_master(sync=False)  # sends do not wait
        async with Peer(master.broker_addr) as peer:
            await peer.ok(send("T", b"y" * 1000))
        assert max(master.ctx.replication.lag_bytes().values()) > 1000
        text = BrokerMetrics(master.ctx).render().decode()
        assert 'tidemq_broker_role{epoch="0",role="ASYNC_MASTER"} 1.0' in text
        assert "tidemq_broker_replicas_in_sync 2.0" in text  # 1000 B is within the gap
        assert "tidemq_broker_replication_lag_bytes{replica=" in text

        def series(name: str) -> dict[str, float]:
            return {line.split('"')[1]: float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines() if line.startswith(name + "{")}

        # each replica's lag in time too: the age of the oldest record it lacks, 0 if none
        by_bytes = series("tidemq_broker_replication_lag_bytes")
        by_age = series("tidemq_broker_replication_lag_seconds")
        assert by_age.keys() == by_bytes.keys() and len(by_age) == 2, text
        assert all(by_age[r] == 0 for r, lag in by_bytes.items() if lag == 0), text
    finally:
        silent.close()


async def test_a_replica_that_reports_more_than_it_was_sent_is_disconnected(
        tmp_path: Path) -> None:
    """A report is the replica's log end; beyond what this master has sent it, the report
    is false (a broken or hostile peer), and a SYNC_MASTER must not count it as a copy."""
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.SYNC_MASTER,
                                         "slave_timeout": 300}, store=SMALL) as group:
        master = group.brokers[0]
        server = master.ctx.replication.server
        assert server is not None
        reported = asyncio.Event()
        server.on_report.append(reported.set)
        host, _, port = master.ctx.replication.ha_address.rpartition(":")
        _, writer = await asyncio.open_connection(host, int(port))
        try:
            start = master.store.commitlog.max_offset
            writer.write(encode_report(start))
            await writer.drain()
            while not server.links:
                reported.clear()
                await asyncio.wait_for(reported.wait(), 10)
            writer.write(encode_report(start + (1 << 30)))
            await writer.drain()
            while server.links:
                reported.clear()
                await asyncio.wait_for(reported.wait(), 10)
            async with Peer(master.broker_addr) as peer:
                await peer.ok(create_topic("T", 1))
                answer = await peer(send("T", b"not copied"))
                assert answer.code == ResponseCode.SLAVE_NOT_AVAILABLE, answer.remark
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
