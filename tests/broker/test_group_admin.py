"""Consumer-group administration over real TCP: subscription group create/read/delete
(200, 201, 207) and reset-offset-by-time (222), which commits the new offsets and tells
every connected consumer of the group (RESET_CONSUMER_CLIENT_OFFSET, 220)."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.broker import wire
from tests.broker.delivery import stored
from tests.broker.wire import Peer

from tidemq.broker.groups import GROUP_DEFAULTS, validate_group_config
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ResetOffsetRequestHeader
from tidemq.errors import ResponseCode
from tidemq.net import Connection, RemotingClient
from tidemq.testing import Cluster


def update_group(**config: object) -> RemotingCommand:
    return wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                        json.dumps(config).encode())


async def all_groups(peer: Peer) -> dict[str, dict[str, object]]:
    resp = await peer.ok(wire.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    table: dict[str, dict[str, object]] = json.loads(resp.body)["subscriptionGroupTable"]
    return table


def reset(topic: str, group: str, timestamp: int, *, force: bool = True,
          **extra: object) -> RemotingCommand:
    ext = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp,
                                   is_force=force).to_ext()
    ext.update({k: str(v) for k, v in extra.items()})
    return RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)


async def committed(peer: Peer, group: str, topic: str, queue_id: int) -> int:
    resp = await peer.ok(wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group,
                                      topic=topic, queueId=queue_id, setZeroIfNotFound="false"))
    return int(resp.ext_fields["offset"])


def rows(body: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    return [(r["queueId"], r["offset"]) for r in json.loads(bytes(body))["offsetTable"]]


# ---------------------------------------------------------------- subscription groups


def test_validation_fills_defaults_and_refuses_wrong_types() -> None:
    cfg = validate_group_config({"groupName": "G", "retryMaxTimes": "3", "consumeEnable": "false",
                                 "unknown": 1})
    assert cfg == {**GROUP_DEFAULTS, "groupName": "G", "retryMaxTimes": 3,
                   "consumeEnable": False}
    for bad in ([], {"groupName": ""}, {"groupName": "a b"}, {"groupName": "G", "brokerId": -1},
                {"groupName": "G", "retryQueueNums": True}, {"groupName": "G", "attributes": []},
                {"groupName": "G", "consumeEnable": 1}, {"groupName": "G", "retryMaxTimes": 2**40},
                {"groupName": "G", "subscriptionDataSet": {}}):
        assert isinstance(validate_group_config(bad), str), bad


async def test_subscription_group_create_read_update_delete(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(update_group(groupName="Gx", retryMaxTimes=3, consumeMessageOrderly=True,
                               attributes={"a": "1"}))
    cfg = (await all_groups(peer))["Gx"]
    assert (cfg["retryMaxTimes"], cfg["consumeMessageOrderly"], cfg["retryQueueNums"]) == (
        3, True, 1)
    assert cfg["attributes"] == {"a": "1"} and cfg["consumeEnable"] is True
    # An update replaces the whole config.
    await peer.ok(update_group(groupName="Gx", retryQueueNums=2))
    cfg = (await all_groups(peer))["Gx"]
    assert (cfg["retryMaxTimes"], cfg["retryQueueNums"], cfg["consumeMessageOrderly"]) == (
        16, 2, False)
    resp = await peer.ok(wire.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert json.loads(resp.body)["dataVersion"]["counter"] >= 2
    saved = json.loads(cluster.brokers[0].layout.config_file("subscriptionGroup.json").read_text())
    assert saved["subscriptionGroupTable"]["Gx"]["retryQueueNums"] == 2

    await peer.ok(wire.create_topic("T", 1))
    for _ in range(5):
        await peer.ok(wire.send("T"))
    await wire.dispatched(cluster.brokers[0])
    await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="Gx",
                               topic="T", queueId=0, commitOffset=5))
    await peer.ok(wire.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="Gx"))
    assert "Gx" not in await all_groups(peer)
    assert await committed(peer, "Gx", "T", 0) == 5  # offsets stay unless asked
    await peer.ok(update_group(groupName="Gx"))
    assert (await peer(wire.pull("T", 0, 0, group="Gx"))).code == ResponseCode.SUCCESS
    stats = cluster.brokers[0].ctx.stats
    assert "Gx" in stats.group_get and "T@Gx" in stats.topic_group_get
    await peer.ok(wire.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="Gx",
                               cleanOffset="true"))
    assert "Gx" not in stats.group_get and "T@Gx" not in stats.topic_group_get
    resp = await peer(wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="Gx",
                                   topic="T", queueId=0, setZeroIfNotFound="false"))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    # Deleting what is not there is fine.
    await peer.ok(wire.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="Gx"))


@pytest.mark.parametrize("body", [b"", b"{", b"[1]", b'{"groupName":"a b"}',
                                  b'{"groupName":"G","retryMaxTimes":"many"}'])
async def test_bad_group_configs_are_invalid_parameter(peer: Peer, body: bytes) -> None:
    resp = await peer(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body))
    assert resp.code == ResponseCode.INVALID_PARAMETER and resp.remark


# ---------------------------------------------------------------- reset offset by time


async def test_reset_by_time_commits_and_notifies_connected_consumers(
        cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("Rz", 2))
    msgs = [await stored(peer, "Rz", f"m{i}".encode()) for i in range(5)]
    await wire.dispatched(cluster.brokers[0])  # a reset searches the consume queue
    target = msgs[2].store_timestamp
    expected = min(i for i, m in enumerate(msgs) if m.store_timestamp >= target)
    for qid, offset in ((0, 5), (1, 0)):
        await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="rg",
                                   topic="Rz", queueId=qid, commitOffset=offset))

    notices: asyncio.Queue[RemotingCommand] = asyncio.Queue()

    def on_reset(conn: Connection, cmd: RemotingCommand) -> None:
        notices.put_nowait(cmd)

    consumer = RemotingClient()
    consumer.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, on_reset)
    async with Peer(cluster.brokers[0].broker_addr, consumer) as member:
        await member.ok(wire.heartbeat("c1", consumer_groups={"rg": {"Rz": "*"}}))
        resp = await peer.ok(reset("Rz", "rg", target))
        assert rows(resp.body) == [(0, expected), (1, 0)]
        notice = await asyncio.wait_for(notices.get(), 5)
    assert notice.is_oneway
    assert (notice.ext_fields["topic"], notice.ext_fields["group"]) == ("Rz", "rg")
    assert (notice.ext_fields["timestamp"], notice.ext_fields["isForce"]) == (str(target), "true")
    table = json.loads(bytes(notice.body))["offsetTable"]
    assert table[0] == {"topic": "Rz", "brokerName": "broker-a", "queueId": 0,
                        "offset": expected}
    assert await committed(peer, "rg", "Rz", 0) == expected
    saved = json.loads(cluster.brokers[0].layout.config_file("consumerOffset.json").read_text())
    assert saved["offsetTable"]["Rz@rg"]["0"] == expected


async def test_reset_without_force_only_moves_back(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("Rf", 1))
    for i in range(4):
        await stored(peer, "Rf", f"m{i}".encode())
    await wire.dispatched(cluster.brokers[0])  # the max offset is the consume queue's
    await peer.ok(wire.heartbeat("c2", consumer_groups={"fg": {"Rf": "*"}}))
    await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="fg",
                               topic="Rf", queueId=0, commitOffset=1))
    resp = await peer.ok(reset("Rf", "fg", -1, force=False))  # -1: the max offset
    assert rows(resp.body) == [(0, 1)]
    resp = await peer.ok(reset("Rf", "fg", -1))
    assert rows(resp.body) == [(0, 4)]
    resp = await peer.ok(reset("Rf", "fg", 0, force=False))
    assert rows(resp.body) == [(0, 0)]
    resp = await peer.ok(reset("Rf", "fg", -1, queueId=0, offset=2))
    assert rows(resp.body) == [(0, 2)] and await committed(peer, "fg", "Rf", 0) == 2


async def test_reset_errors(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("Re", 1))
    await peer.ok(update_group(groupName="eg"))
    resp = await peer(reset("Nope", "eg", 0))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.remark
    resp = await peer(reset("Re", "nobody", 0))
    assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and resp.remark
    for extra in ({"queueId": 5}, {"queueId": 0, "offset": 9}):
        resp = await peer(reset("Re", "eg", 0, **extra))
        assert resp.code == ResponseCode.INVALID_PARAMETER and resp.remark
    assert resp.remark == "offset 9 is outside 0..0 of queue 0"
