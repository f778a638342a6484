"""Client registration over real TCP (remoting.md §2.6, §2.10): HEART_BEAT,
GET_CONSUMER_LIST_BY_GROUP, NOTIFY_CONSUMER_IDS_CHANGED to the members, UNREGISTER_CLIENT
and membership dropped with the connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.bodies import ConsumerListBody, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.net import Connection, RemotingClient
from tidemq.testing import Cluster


class Member:
    """A consumer connection that records the NOTIFY_CONSUMER_IDS_CHANGED it receives."""

    def __init__(self, addr: str, client_id: str) -> None:
        self.client_id = client_id
        self.notified: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        client = RemotingClient(request_timeout=10.0)
        client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_notify)
        self.peer = Peer(addr, client)

    def _on_notify(self, conn: Connection, cmd: RemotingCommand) -> None:
        self.notified.put_nowait(cmd)

    async def join(self, group: str, topic: str = "T") -> RemotingCommand:
        return await self.peer.ok(wire.heartbeat(self.client_id,
                                                 consumer_groups={group: {topic: "*"}}))

    async def next_notify(self) -> RemotingCommand:
        return await asyncio.wait_for(self.notified.get(), 5)


async def members(peer: Peer, group: str) -> list[str]:
    resp = await peer(wire.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=group))
    if resp.code == ResponseCode.SYSTEM_ERROR:
        return []
    assert resp.code == 0, resp.remark
    return decode_body(resp.body, ConsumerListBody).consumer_id_list


@pytest.fixture
async def pair(cluster: Cluster) -> AsyncIterator[tuple[Member, Member]]:
    addr = cluster.brokers[0].broker_addr
    a, b = Member(addr, "10.0.0.1@a"), Member(addr, "10.0.0.2@b")
    yield a, b
    await a.peer.close()
    await b.peer.close()


async def test_heartbeat_answers_like_a_5x_broker(peer: Peer) -> None:
    resp = await peer.ok(wire.heartbeat("c1", consumer_groups={"G": {"T": "*"}}))
    assert resp.ext_fields == {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"}
    assert resp.version >= 401


async def test_heartbeat_creates_the_retry_topic_and_routes_it(cluster: Cluster, peer: Peer,
                                                               namesrv: Peer) -> None:
    await peer.ok(wire.heartbeat("c1", consumer_groups={"Grp": {"T": "*"}}))
    tc = cluster.brokers[0].topics.get("%RETRY%Grp")
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, 6)
    assert cluster.brokers[0].subscription_groups.groups["Grp"]["retryMaxTimes"] == 16
    route = await wire.eventually_route(namesrv, "%RETRY%Grp")
    assert [q.broker_name for q in route.queue_datas] == ["broker-a"]


async def test_the_heartbeat_that_creates_a_retry_topic_answers_once_it_is_routed(
        peer: Peer, namesrv: Peer) -> None:
    """A consumer that starts finds its retry topic's route at once, as with RocketMQ's
    broker, which registers the new topic before it answers."""
    await peer.ok(wire.heartbeat("c1", consumer_groups={"Routed": {"T": "*"}}))
    resp = await namesrv(wire.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="%RETRY%Routed"))
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)


async def test_cpp_heartbeat_body_with_ordinals_and_newline(cluster: Cluster,
                                                            peer: Peer) -> None:
    body = json.dumps({
        "clientID": "4242-127.0.0.1@DEFAULT",
        "consumerDataSet": [{
            "groupName": "CppGroup", "consumeType": 1, "messageModel": 1,
            "consumeFromWhere": 0, "unitMode": False,
            "subscriptionDataSet": [{"topic": "T", "subString": "*", "tagsSet": [],
                                     "codeSet": [], "subVersion": 0, "classFilterMode": False,
                                     "expressionType": "TAG"}],
        }],
    }).encode() + b"\n"
    await peer.ok(RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
    assert await members(peer, "CppGroup") == ["4242-127.0.0.1@DEFAULT"]
    assert cluster.brokers[0].topics.get("%RETRY%CppGroup") is not None


async def test_producer_heartbeat_registers_the_producer_group(cluster: Cluster,
                                                               peer: Peer) -> None:
    await peer.ok(wire.heartbeat("p1", producer_groups=["PG"]))
    assert list(cluster.brokers[0].producers.groups["PG"]) == ["p1"]
    await peer.ok(wire.request(RequestCode.UNREGISTER_CLIENT, clientID="p1",
                               producerGroup="PG", consumerGroup=""))
    assert "PG" not in cluster.brokers[0].producers.groups


@pytest.mark.parametrize("body", [b"", b"{", b"[1,2]", b'{"clientID": 5}',
                                  b'{"clientID":"x","consumerDataSet":[{"groupName":"g"}]}'])
async def test_bad_heartbeat_bodies_are_invalid_parameter(peer: Peer, body: bytes) -> None:
    resp = await peer(RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
    assert resp.code == ResponseCode.INVALID_PARAMETER and resp.remark


async def test_consumer_list_of_an_unknown_group_is_system_error(peer: Peer) -> None:
    resp = await peer(wire.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="No"))
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark


async def test_new_member_is_announced_to_every_member(pair: tuple[Member, Member]) -> None:
    a, b = pair
    await a.join("G")
    assert (await a.next_notify()).ext_fields == {"consumerGroup": "G"}
    await b.join("G")
    for member in (a, b):
        note = await member.next_notify()
        assert note.ext_fields["consumerGroup"] == "G"
        assert note.is_oneway
    assert await members(a.peer, "G") == sorted([a.client_id, b.client_id])
    # A repeated heartbeat changes nothing and announces nothing.
    await b.join("G")
    assert await members(a.peer, "G") == sorted([a.client_id, b.client_id])
    assert a.notified.empty()


async def test_unregister_client_is_announced(pair: tuple[Member, Member]) -> None:
    a, b = pair
    await a.join("G")
    await b.join("G")
    await a.next_notify()
    await a.next_notify()
    await b.peer.ok(wire.request(RequestCode.UNREGISTER_CLIENT, clientID=b.client_id,
                                 consumerGroup="G"))
    assert (await a.next_notify()).ext_fields["consumerGroup"] == "G"
    assert await members(a.peer, "G") == [a.client_id]


async def test_closed_connection_drops_its_memberships(pair: tuple[Member, Member]) -> None:
    a, b = pair
    await a.join("G")
    await b.join("G")
    await b.join("Other")
    await a.next_notify()
    await a.next_notify()
    await b.peer.close()
    assert (await a.next_notify()).ext_fields["consumerGroup"] == "G"
    assert await members(a.peer, "G") == [a.client_id]
    assert await members(a.peer, "Other") == []


async def test_check_client_config_is_accepted(peer: Peer) -> None:
    await peer.ok(wire.request(RequestCode.CHECK_CLIENT_CONFIG, group="G"))
