"""A replica's copy of thousands of topics and groups takes a while to decode, compare
and index; the replica does that on a thread, its event loop serving every client
meanwhile. Each test holds one step until the replica has answered another request: on
the loop, nothing would answer it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.broker import wire
from tests.broker.held import Held, answered_meanwhile
from tests.broker.replication.test_group import caught_up
from tests.broker.replication.test_metadata_copy import STORE, synced
from tests.broker.test_lmq import fan_out
from tests.broker.wire import Peer

import tidemq.broker.replication.metadata as metadata_module
from tidemq.codec.command import RequestCode
from tidemq.testing import Cluster


def hold_step(monkeypatch: pytest.MonkeyPatch, step: str, held: Held) -> None:
    """The replica's ``step`` (a function of the metadata copy) held."""
    original = getattr(metadata_module, step)

    def slow(*args: Any) -> Any:
        held.hold()
        return original(*args)

    monkeypatch.setattr(metadata_module, step, slow)


@pytest.mark.parametrize("step", ["decode_topics", "_offset_table", "_examine",
                                  "_group_table", "_groups_differ", "_topics_differing"])
async def test_a_replica_takes_its_masters_tables_off_the_loop(
        tmp_path: Path, held: Held, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    async with Cluster(tmp_path) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        async with Peer(master.broker_addr) as peer, Peer(replica.broker_addr) as rpeer:
            await peer.ok(wire.create_topic("Copied", 2))
            for _ in range(3):
                await peer.ok(wire.send("Copied", queue_id=1))
            await wire.dispatched(master)
            await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic="Copied",
                                       queueId=1, consumerGroup="cg", commitOffset=0))
            await synced(replica)
            await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic="Copied",
                                       queueId=1, consumerGroup="cg", commitOffset=3))
            await peer.ok(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                       b'{"groupName": "cg", "retryMaxTimes": 5}'))
            hold_step(monkeypatch, step, held)
            await answered_meanwhile(rpeer, held)
            assert held.gave_up == [False]
            await synced(replica)
        assert replica.offsets.query("cg", "Copied", 1) == 3
        assert replica.topics.get("Copied") is not None
        assert replica.subscription_groups.groups["cg"]["retryMaxTimes"] == 5


@pytest.mark.parametrize("step", ["_lmq_tombstones_to_take", "_lmq_offsets_to_take"])
async def test_a_replica_takes_its_masters_lmq_pages_off_the_loop(
        tmp_path: Path, held: Held, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    async with Cluster(tmp_path, store=STORE) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        async with Peer(master.broker_addr) as peer, Peer(replica.broker_addr) as rpeer:
            await peer.ok(wire.create_topic("Parent", 1))
            for i in range(4):
                await peer.ok(fan_out("%LMQ%a,%LMQ%b", b"m%d" % i))
            await wire.dispatched(master)
            await caught_up(master, replica)
            await synced(replica)
            await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic="%LMQ%a",
                                       queueId=0, consumerGroup="g1", commitOffset=3))
            await peer.ok(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%b"))
            await caught_up(master, replica)
            hold_step(monkeypatch, step, held)
            await answered_meanwhile(rpeer, held)
            assert held.gave_up == [False]
            await synced(replica)
        lmq, theirs = replica.store.lmq, master.store.lmq
        assert lmq is not None and theirs is not None
        assert lmq.offsets_of("%LMQ%a") == {"g1": 3}
        assert lmq.floor("%LMQ%b") == theirs.floor("%LMQ%b") > 0
