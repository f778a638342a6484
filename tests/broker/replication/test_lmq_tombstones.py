"""A replica deletes an LMQ where its master did (RIP-28): it copies the master's LMQ
tombstones (GET_LMQ_METADATA, 20201) and drops the LMQ's entries of the records below
each floor only. An LMQ deleted and re-created with new messages between two copies keeps
the new messages on the replica, at the master's offsets, also once the replica is
elected master. In-process, a master and its replica over real TCP; the replica copies
only when told (a long ``slaveMetadataSyncInterval``)."""

from __future__ import annotations

from pathlib import Path

from tests.broker import wire
from tests.broker.replication.test_deletion_marks import elect
from tests.broker.replication.test_group import caught_up
from tests.broker.test_lmq import LMQ_STORE, fan_out
from tests.broker.wire import Peer, dispatched
from tests.store.conftest import records

from tidemq.broker.app import BrokerApp
from tidemq.codec.command import RequestCode
from tidemq.inprocess import Cluster

STORE = {**LMQ_STORE, "mapped_file_size_commit_log": 64 * 1024}


def lmq_bodies(broker: BrokerApp, name: str) -> tuple[int, list[bytes]]:
    """The LMQ's min offset and the bodies from there."""
    low = broker.store.min_offset(name, 0)
    got = broker.store.get(name, 0, low, max_count=1000)
    return low, [bytes(r.body) for r in records(got)]


async def test_an_lmq_deleted_and_created_again_between_two_copies_keeps_its_new_messages(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, store=STORE) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=600_000)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Parent", 1))
            for i in range(3):
                await peer.ok(fan_out("%LMQ%a,%LMQ%b", b"old%d" % i))
            await caught_up(master, replica)
            await replica.metadata_sync.copy_now()
            assert lmq_bodies(replica, "%LMQ%a") == (0, [b"old0", b"old1", b"old2"])

            await peer.ok(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%a"))
            for i in range(2):  # the LMQ created again: offsets 0 and 1 on the master
                await peer.ok(fan_out("%LMQ%a,%LMQ%b", b"new%d" % i))
            await caught_up(master, replica)  # dispatched here before the tombstone
            await replica.metadata_sync.copy_now()

        lmq = replica.store.lmq
        assert lmq is not None and master.store.lmq is not None
        assert lmq.floor("%LMQ%a") == master.store.lmq.floor("%LMQ%a") > 0
        assert lmq_bodies(replica, "%LMQ%a") == lmq_bodies(master, "%LMQ%a") == (
            0, [b"new0", b"new1"])
        assert replica.store.max_offset("%LMQ%a", 0) == 2
        assert lmq_bodies(replica, "%LMQ%b") == (
            0, [b"old0", b"old1", b"old2", b"new0", b"new1"])

        await elect(replica, master)
        async with Peer(replica.broker_addr) as peer:
            await peer.ok(fan_out("%LMQ%a", b"new2"))
        await dispatched(replica)
        assert lmq_bodies(replica, "%LMQ%a") == (0, [b"new0", b"new1", b"new2"])
