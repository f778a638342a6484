"""A replica deletes a topic where its master did: it copies the master's topic-deletion
marks (GET_DELETED_TOPICS, 20202) with the topic configs and applies each at the master's
commit-log offset. A topic deleted and created again with new messages between two copies
keeps the new messages on the replica, and a replica whose log lags the deletion gives
none of the old records that reach it later a queue -- so neither loses nor brings back a
message once the replica is elected master. In-process, a master and its replica over
real TCP; the replica copies only when told (a long ``slaveMetadataSyncInterval``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.broker import wire
from tests.broker.replication.test_group import caught_up
from tests.broker.replication.test_metadata_push import pair, until
from tests.broker.wire import Peer, dispatched
from tests.store.conftest import records

from tidemq.broker.app import BrokerApp
from tidemq.codec.command import RequestCode
from tidemq.inprocess import Cluster
from tidemq.store.append import MessageInput

__all__ = ["pair"]  # fixture

STORE = {"mapped_file_size_commit_log": 64 * 1024}


def bodies(broker: BrokerApp, topic: str, queue_id: int = 0) -> list[bytes]:
    got = broker.store.get(topic, queue_id, 0, max_count=1000)
    assert broker.store.min_offset(topic, queue_id) == 0
    return [bytes(r.body) for r in records(got)]


async def elect(replica: BrokerApp, master: BrokerApp) -> None:
    """The master gone, the replica becomes master as a controller orders it."""
    await master.stop()
    await replica.role.become_master(replica.role.state.epoch + 1, sync=False)


async def test_a_topic_deleted_and_created_again_between_two_copies_keeps_its_new_messages(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, store=STORE) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=600_000)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("T", 1))
            for i in range(3):
                await peer.ok(wire.send("T", b"old%d" % i))
            await caught_up(master, replica)
            await replica.metadata_sync.copy_now()
            assert bodies(replica, "T") == [b"old0", b"old1", b"old2"]

            await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="T"))
            mark = master.store.topic_deletion_marks()["T"]
            await peer.ok(wire.create_topic("T", 1))
            for i in range(2):
                await peer.ok(wire.send("T", b"new%d" % i))
            await caught_up(master, replica)
            await replica.metadata_sync.copy_now()
            served = json.loads((await peer.ok(wire.request(
                RequestCode.GET_DELETED_TOPICS))).body)
            assert served == {"topics": {"T": mark}}

        assert replica.topics.get("T") is not None
        assert bodies(replica, "T") == [b"new0", b"new1"]
        assert replica.store.topic_deletion_marks() == {"T": mark}
        await elect(replica, master)
        async with Peer(replica.broker_addr) as peer:
            sent = await peer.ok(wire.send("T", b"new2"))
            assert sent.ext_fields["queueOffset"] == "2"
        assert bodies(replica, "T") == [b"new0", b"new1", b"new2"]


async def test_a_replica_lagging_the_deletion_holds_no_old_message_once_elected(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, store=STORE) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=600_000)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("T", 2))
            await peer.ok(wire.create_topic("K", 1))
            for i in range(4):
                await peer.ok(wire.send("T", b"old%d" % i, queue_id=i % 2))
            await caught_up(master, replica)
            await replica.metadata_sync.copy_now()

            client = replica.ctx.replication.client
            assert client is not None
            await client.stop()  # the replica's log falls behind
            for i in range(4, 10):
                await peer.ok(wire.send("T", b"old%d" % i, queue_id=i % 2))
            await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="T"))
            await peer.ok(wire.send("K", b"after"))
            await replica.metadata_sync.copy_now()
            mark = master.store.topic_deletion_marks()["T"]
            assert replica.store.commitlog.max_offset < mark
            assert replica.topics.get("T") is None

            client.start()  # the old records arrive after the deletion
            await caught_up(master, replica)
        assert replica.store.max_offset("T", 0) == replica.store.max_offset("T", 1) == 0
        assert replica.store.topic_deletion_marks() == {"T": mark}
        assert bodies(replica, "K") == [b"after"]
        await elect(replica, master)
        assert replica.topics.get("T") is None  # nothing of the old topic is adopted
        assert "T" not in replica.store.topics()


async def test_an_elected_replica_serves_the_topic_created_again_from_the_master_s_offsets(
        pair: tuple[BrokerApp, BrokerApp]) -> None:
    """Controller mode: the deletion and the creation reach the replica with the
    master's notices; the controller elects it when the master stops, and the topic
    created again goes on from the master's offsets, without an old message."""
    master, replica = pair
    async with Peer(master.broker_addr) as peer:
        await peer.ok(wire.create_topic("T", 1))
        for i in range(3):
            await peer.ok(wire.send("T", b"old%d" % i))
        await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="T"))
        await peer.ok(wire.create_topic("T", 1))
        await peer.ok(wire.send("T", b"new0"))
    await caught_up(master, replica)
    assert replica.store.topic_deletion_marks() == master.store.topic_deletion_marks()
    await master.stop()
    await until(lambda: replica.role.is_master)
    async with Peer(replica.broker_addr) as peer:
        assert [m.body for m in await peer.messages("T")] == [b"new0"]
    # a put of the new master (alone in its group, a send waits for a replica in vain)
    assert replica.store.put("T", 0, MessageInput(b"new1")).queue_offset == 1
    await dispatched(replica)
    assert bodies(replica, "T") == [b"new0", b"new1"]
