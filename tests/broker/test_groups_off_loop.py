"""The subscription-group table of thousands of groups takes a while to encode; the
broker writes and encodes it on a thread, its event loop serving every client meanwhile.
Each test holds the write until the test has been answered another request: on the
loop, nothing would answer it."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.held import Held, answered_meanwhile, slow_writes
from tests.broker.wire import Peer

import tidemq.broker.groups as groups_module
from tidemq.broker.groups import SubscriptionGroupManager
from tidemq.codec.command import RequestCode
from tidemq.store.layout import StoreLayout
from tidemq.testing import Cluster


def group_config(name: str, retry_max_times: int) -> bytes:
    return json.dumps({"groupName": name, "retryMaxTimes": retry_max_times}).encode()


async def test_an_admins_group_change_is_written_off_the_loop_before_the_answer(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = cluster.brokers[0]
    slow_writes(monkeypatch, groups_module, held)
    async with Peer(broker.broker_addr) as admin:
        task = asyncio.create_task(admin.ok(wire.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, group_config("Adm", 7))))
        await answered_meanwhile(peer, held)
        await task
    assert held.gave_up == [False]
    saved = json.loads(broker.subscription_groups.path.read_text())
    assert saved["subscriptionGroupTable"]["Adm"]["retryMaxTimes"] == 7


async def test_a_deleted_group_is_gone_from_the_file_before_the_answer(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = cluster.brokers[0]
    await peer.ok(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                               group_config("Del", 3)))
    slow_writes(monkeypatch, groups_module, held)
    async with Peer(broker.broker_addr) as admin:
        task = asyncio.create_task(admin.ok(wire.request(
            RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="Del")))
        await answered_meanwhile(peer, held)
        await task
    assert held.gave_up == [False]
    saved = json.loads(broker.subscription_groups.path.read_text())
    assert "Del" not in saved["subscriptionGroupTable"]


async def test_a_group_a_heartbeat_creates_is_written_without_holding_the_heartbeat(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = cluster.brokers[0]
    written = threading.Event()
    write = groups_module.atomic_write

    def slow(path: Path, data: bytes) -> None:
        held.hold()
        write(path, data)
        written.set()

    monkeypatch.setattr(groups_module, "atomic_write", slow)
    await held_entered_after(peer.ok(wire.heartbeat("c1", consumer_groups={"Beat": {}})),
                             held)
    assert broker.subscription_groups.groups["Beat"]["retryMaxTimes"] == 16
    held.release.set()
    assert await asyncio.to_thread(written.wait, 20)
    saved = json.loads(broker.subscription_groups.path.read_text())
    assert "Beat" in saved["subscriptionGroupTable"]


async def held_entered_after(answer: object, held: Held) -> None:
    """``answer`` (a request) comes back while the write it started is still held."""
    await asyncio.wait_for(answer, 5)  # type: ignore[arg-type]
    await held.entered_soon()
    assert not held.left.is_set()


async def test_all_group_configs_are_the_bytes_of_one_dumps(
        cluster: Cluster, peer: Peer) -> None:
    for i in range(3):
        await peer.ok(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                   group_config(f"G{i}", i)))
    groups = cluster.brokers[0].subscription_groups
    resp = await peer.ok(wire.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    whole = {"subscriptionGroupTable": groups.groups, "dataVersion": groups.data_version}
    assert bytes(resp.body) == json.dumps(whole, sort_keys=True,
                                          separators=(",", ":")).encode()


def test_the_file_is_the_bytes_of_one_dumps_and_loads_back(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path)
    groups = SubscriptionGroupManager(layout, auto_create=True, retry_max_times=16)
    for i in range(1200):  # more than one slice
        groups.ensure(f"g{i:04d}")
    groups.upsert("g0001", {"retryMaxTimes": 3})
    whole = {"subscriptionGroupTable": groups.groups, "dataVersion": groups.data_version}
    assert groups.path.read_bytes() == json.dumps(whole, sort_keys=True).encode()
    again = SubscriptionGroupManager(layout, auto_create=True, retry_max_times=16)
    again.load()
    assert again.groups == groups.groups and again.groups["g0001"]["retryMaxTimes"] == 3
