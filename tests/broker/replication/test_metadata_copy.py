"""What a replica's metadata copy carries besides the tables it takes whole: the LMQ
consumer offsets and tombstones (GET_LMQ_METADATA, 20201) -- an LMQ deleted on the master
is deleted on the replica at the same commit-log offset, and the replica serves the
groups' LMQ offsets -- and the deletion of topics (their queues go too) and of
subscription groups."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.replication.test_group import caught_up
from tests.broker.test_lmq import LMQ_STORE, fan_out
from tests.broker.wire import Peer, dispatched

from tidemq.broker.app import BrokerApp
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster

STORE = {**LMQ_STORE, "mapped_file_size_commit_log": 64 * 1024}


async def synced(replica: BrokerApp) -> None:
    """Wait for one complete metadata copy that began after now."""
    sync = replica.metadata_sync
    start = sync.syncs
    while sync.syncs < start + 2:
        sync.synced.clear()
        await asyncio.wait_for(sync.synced.wait(), 10)


def lmq_page(kind: str, **ext: object) -> object:
    return wire.request(RequestCode.GET_LMQ_METADATA, kind=kind, **ext)


async def test_lmq_offsets_and_deletions_reach_the_replica(tmp_path: Path) -> None:
    async with Cluster(tmp_path, store=STORE) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        async with Peer(master.broker_addr) as peer, Peer(replica.broker_addr) as rpeer:
            await peer.ok(wire.create_topic("Parent", 1))
            for i in range(6):
                await peer.ok(fan_out("%LMQ%a,%LMQ%b", b"m%d" % i))
            await dispatched(master)
            for name, offset in (("%LMQ%a", 4), ("%LMQ%b", 2)):
                for group_name in ("g1", "g2"):
                    await peer.ok(wire.request(
                        RequestCode.UPDATE_CONSUMER_OFFSET, topic=name, queueId=0,
                        consumerGroup=group_name, commitOffset=offset))
            await peer.ok(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%b"))
            await caught_up(master, replica)
            await synced(replica)

            lmq = replica.store.lmq
            assert lmq is not None and master.store.lmq is not None
            assert lmq.offsets_of("%LMQ%a") == {"g1": 4, "g2": 4}
            assert lmq.offsets_of("%LMQ%b") == {}
            assert lmq.floor("%LMQ%b") == master.store.lmq.floor("%LMQ%b") > 0
            assert await rpeer.max_offset("%LMQ%b") == 0
            assert await rpeer.max_offset("%LMQ%a") == 6
            query = await rpeer.ok(wire.request(
                RequestCode.QUERY_CONSUMER_OFFSET, topic="%LMQ%a", queueId=0,
                consumerGroup="g2"))
            assert query.ext_fields["offset"] == "4"

            # the master serves them a page at a time
            first = json.loads((await peer.ok(lmq_page("offsets", maxCount=1))).body)
            assert first == {"rows": [["%LMQ%a", "g1", 4]], "more": True}
            second = json.loads((await peer.ok(lmq_page(
                "offsets", maxCount=1, afterLmq="%LMQ%a", afterGroup="g1"))).body)
            assert second == {"rows": [["%LMQ%a", "g2", 4]], "more": True}
            last = json.loads((await peer.ok(lmq_page(
                "offsets", maxCount=1, afterLmq="%LMQ%a", afterGroup="g2"))).body)
            assert last == {"rows": [], "more": False}
            tombs = json.loads((await peer.ok(lmq_page("tombstones"))).body)
            assert tombs == {"rows": [["%LMQ%b", master.store.lmq.floor("%LMQ%b")]],
                             "more": False}

            # bad requests are answered, not fatal
            for bad in (lmq_page("everything"), lmq_page("offsets", maxCount=0),
                        lmq_page("offsets", maxCount="x"), lmq_page("offsets", afterLmq="a")):
                resp = await peer(bad)  # type: ignore[arg-type]
                assert resp.code == ResponseCode.INVALID_PARAMETER, resp.remark
                assert resp.remark


async def test_deleted_topics_and_groups_are_deleted_on_the_replica(tmp_path: Path) -> None:
    async with Cluster(tmp_path, store=STORE) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Gone", 1))
            await peer.ok(wire.create_topic("Kept", 1))
            for topic in ("Gone", "Kept"):
                for i in range(3):
                    await peer.ok(wire.send(topic, b"m%d" % i))
                await dispatched(master)
                await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic=topic,
                                           queueId=0, consumerGroup="cg", commitOffset=2))
            await peer.ok(wire.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                json.dumps({"groupName": "cg2"}).encode()))
            await caught_up(master, replica)
            await synced(replica)
            assert replica.store.max_offset("Gone", 0) == 3
            assert "cg2" in replica.ctx.subscription_groups.groups

            await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="Gone"))
            await peer.ok(wire.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="cg2",
                                       cleanOffset="true"))
            await synced(replica)
            assert replica.topics.get("Gone") is None
            assert replica.store.max_offset("Gone", 0) == 0  # its queues are gone too
            assert ("Gone", 0) not in set(replica.store.queues.queue_keys())
            assert replica.ctx.offsets.query("cg", "Gone", 0) is None
            assert replica.store.max_offset("Kept", 0) == 3
            assert replica.ctx.offsets.query("cg", "Kept", 0) == 2
            assert "cg2" not in replica.ctx.subscription_groups.groups


async def test_timer_progress_reaches_the_replica(tmp_path: Path) -> None:
    """The timer checkpoint travels with the delay offsets (GET_ALL_DELAY_OFFSET): a
    replica elected master starts its timer heap where its master's was, instead of
    delivering again every timer message its master had delivered."""
    async with Cluster(tmp_path, store=STORE) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Dl", 1))
            for i in range(3):
                await peer.ok(wire.send("Dl", b"t%d" % i, properties=wire.props(
                    TIMER_DELAY_MS="50")))
            async with asyncio.timeout(30):  # delivered, and the progress written
                while master.schedule.timer_progress().enqueue_offset < 3:
                    await asyncio.sleep(0.05)
            await caught_up(master, replica)
            await synced(replica)
        expected = master.schedule.timer_progress()
        assert replica.schedule.timer_progress() == expected
        assert replica.schedule.timers.checkpoint().enqueue_offset == 3
        on_disk = json.loads(replica.schedule.timer_path.read_text())
        assert on_disk == expected.to_json()


async def test_lmq_offsets_a_replica_took_reach_the_returning_master(tmp_path: Path) -> None:
    """LMQ commits a replica took while its master was down are carried to the master
    when it is back (where the master's are lower), not replaced by its older copy."""
    async with Cluster(tmp_path, store=STORE,
                       broker={"register_name_server_period": 200}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Parent", 1))
            for i in range(6):
                await peer.ok(fan_out("%LMQ%a,%LMQ%b", b"m%d" % i))
            await dispatched(master)
            for name in ("%LMQ%a", "%LMQ%b"):
                await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic=name,
                                           queueId=0, consumerGroup="g", commitOffset=2))
        await caught_up(master, replica)
        await synced(replica)
        await master.stop()
        async with Peer(replica.broker_addr) as rpeer:  # a consumer commits to the replica
            await rpeer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic="%LMQ%a",
                                        queueId=0, consumerGroup="g", commitOffset=5))
            await rpeer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic="%LMQ%b",
                                        queueId=0, consumerGroup="h", commitOffset=4))
        back = await group.restart_broker(0)
        assert back.store.lmq is not None and replica.store.lmq is not None
        async with asyncio.timeout(30):
            while (back.store.lmq.committed_offset("g", "%LMQ%a"),
                   back.store.lmq.committed_offset("h", "%LMQ%b")) != (5, 4):
                await asyncio.sleep(0.05)
        await synced(replica)
        assert replica.store.lmq.committed_offset("g", "%LMQ%a") == 5
        assert replica.store.lmq.committed_offset("g", "%LMQ%b") == 2
        assert len(replica.ctx.carried_offsets) == 0


async def test_a_commit_taken_while_the_replica_carries_offsets_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer's commit that reaches the replica while the replica's copy is sending
    the master the offsets it took is neither lost from the replica's table by that copy
    nor left behind: the next copy carries it."""
    async with Cluster(tmp_path, store={"mapped_file_size_commit_log": 64 * 1024}) as group:
        (master,) = group.brokers
        replica = await group.add_replica(master, slave_metadata_sync_interval=60_000)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("T", 1))
            for i in range(12):
                await peer.ok(wire.send("T", b"m%d" % i))
        await caught_up(master, replica)
        await asyncio.wait_for(replica.metadata_sync.synced.wait(), 30)
        replica.ctx.commit_offset("cg", "T", 0, 10)  # taken while the master was away
        send = replica.ctx.client.request

        async def meanwhile(addr: str, cmd: RemotingCommand, timeout: float
                            ) -> RemotingCommand:
            if cmd.code == RequestCode.UPDATE_CONSUMER_OFFSET:
                replica.ctx.commit_offset("cg", "T", 0, 12)  # the consumer's next commit
            return await send(addr, cmd, timeout)

        monkeypatch.setattr(replica.ctx.client, "request", meanwhile)
        await replica.metadata_sync.copy_now()
        assert master.ctx.offsets.query("cg", "T", 0) == 10
        assert replica.ctx.offsets.query("cg", "T", 0) == 12
        monkeypatch.undo()
        await replica.metadata_sync.copy_now()
        assert master.ctx.offsets.query("cg", "T", 0) == 12
        assert replica.ctx.offsets.query("cg", "T", 0) == 12
