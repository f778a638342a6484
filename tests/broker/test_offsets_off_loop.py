"""Writing and serving the committed offsets of thousands of groups takes a while; the
broker does it on a thread, its event loop serving every client meanwhile: the periodic
flush, resetOffsetByTime's write, an offline group's commit and GET_ALL_CONSUMER_OFFSET's
body (encoded from the live table, a slice of keys at a time, never copied whole). Each
test holds the slow part until the test has been answered another request: on the loop,
nothing would answer it, and the slow part would give up waiting."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.broker import wire
from tests.broker.held import Held, answered_meanwhile, slow_writes
from tests.broker.test_group_admin import reset
from tests.broker.wire import Peer

import tidemq.broker.offsets as offsets_module
from tidemq.broker import offset_json
from tidemq.broker.offsets import OffsetManager
from tidemq.codec.command import RequestCode
from tidemq.store.layout import StoreLayout
from tidemq.testing import Cluster


async def test_reset_offset_writes_the_offsets_off_the_loop(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    await peer.ok(wire.create_topic("R", 2))
    for _ in range(3):
        await peer.ok(wire.send("R"))
    await wire.dispatched(cluster.brokers[0])
    await peer.ok(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                               json.dumps({"groupName": "RG"}).encode()))
    slow_writes(monkeypatch, offsets_module, held)
    async with Peer(cluster.brokers[0].broker_addr) as resetter:
        task = asyncio.create_task(resetter.ok(reset("R", "RG", 0)))
        await answered_meanwhile(peer, held)
        await task
    assert held.gave_up == [False]
    saved = json.loads(cluster.brokers[0].offsets.path.read_text())
    assert saved == {"offsetTable": {"R@RG": {"0": 0, "1": 0}}}


async def test_the_periodic_flush_writes_the_offsets_off_the_loop(
        tmp_path: Path, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Cluster(tmp_path, broker={"flush_consumer_offset_interval": 50}) as cluster, \
            Peer(cluster.brokers[0].broker_addr) as peer:
        await peer.ok(wire.create_topic("F", 1))
        await peer.ok(wire.send("F"))
        await wire.dispatched(cluster.brokers[0])
        await peer.ok(wire.heartbeat("fg-1", consumer_groups={"FG": {"F": "*"}}))
        slow_writes(monkeypatch, offsets_module, held)
        # an online group's commit is answered at once; the flush writes it
        await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="FG",
                                   topic="F", queueId=0, commitOffset=1))
        await answered_meanwhile(peer, held)
        assert held.gave_up == [False]


async def test_a_commit_of_an_offline_group_is_written_off_the_loop_before_its_answer(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """No consumer of the group online (an admin tool writing, as cloneGroupOffset
    does): nobody would commit the offset again, so it is on disk when answered."""
    await peer.ok(wire.create_topic("C", 1))
    await peer.ok(wire.send("C"))
    await wire.dispatched(cluster.brokers[0])
    slow_writes(monkeypatch, offsets_module, held)
    async with Peer(cluster.brokers[0].broker_addr) as admin:
        task = asyncio.create_task(admin.ok(wire.request(
            RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="CG", topic="C", queueId=0,
            commitOffset=1)))
        await held.entered_soon()
        assert not task.done()  # answered once written
        await answered_meanwhile(peer, held)
        await task
    assert held.gave_up == [False]
    saved = json.loads(cluster.brokers[0].offsets.path.read_text())
    assert saved == {"offsetTable": {"C@CG": {"0": 1}}}


async def test_all_consumer_offsets_are_encoded_off_the_loop(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    await peer.ok(wire.create_topic("A", 2))
    for _ in range(4):
        await peer.ok(wire.send("A", queue_id=1))
    await wire.dispatched(cluster.brokers[0])
    await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="AG",
                               topic="A", queueId=1, commitOffset=4))
    encode = offset_json.offset_entries

    def slow(*args: Any) -> bytes:
        held.hold()
        return encode(*args)

    monkeypatch.setattr(offset_json, "offset_entries", slow)
    async with Peer(cluster.brokers[0].broker_addr) as replica:
        task = asyncio.create_task(replica.ok(wire.request(RequestCode.GET_ALL_CONSUMER_OFFSET)))
        await answered_meanwhile(peer, held)
        resp = await task
    assert held.gave_up == [False]
    assert resp.full_body() == b'{"offsetTable":{"A@AG":{"1":4}}}'


def test_a_commit_during_a_write_is_written_by_the_next(tmp_path: Path, held: Held,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = OffsetManager(StoreLayout(tmp_path))
    offsets.commit("g", "T", 0, 1)
    slow_writes(monkeypatch, offsets_module, held)
    writer = threading.Thread(target=offsets.persist)
    writer.start()
    assert held.entered.wait(10)
    offsets.commit("g", "T", 1, 7)  # the loop commits while the thread writes
    held.release.set()
    writer.join(10)
    saved: dict[str, Any] = json.loads(offsets.path.read_text())
    assert saved["offsetTable"]["T@g"] == {"0": 1}  # copied before the commit
    offsets.persist()
    assert json.loads(offsets.path.read_text()) == {"offsetTable": {"T@g": {"0": 1, "1": 7}}}
