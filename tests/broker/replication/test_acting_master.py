"""``slaveActingMaster``: while its group's master is down, the replica with the smallest
brokerId hands a message a consumer sends back (CONSUMER_SEND_MSG_BACK) to another group's
master, which parks it for the retry topic (or stores it in the DLQ) by its own rules, and
delivers a parked delayed message that falls due to its topic on another group's master.
In-process brokers and name server over real TCP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.broker.replication.test_group import SMALL, caught_up
from tests.broker.wire import Peer, create_topic, eventually_route, props, send

from tidemq.broker.acting_master import acting_for, other_masters
from tidemq.broker.app import BrokerApp
from tidemq.client import MessageExt
from tidemq.codec.bodies import BrokerData, ClusterInfo
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ConsumerSendMsgBackRequestHeader
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.testing import Cluster

LADDER = "100ms 100ms 100ms 100ms 100ms"


def send_back(offset: int, delay_level: int) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(offset=offset, group="cg",
                                              delay_level=delay_level, origin_topic="T",
                                              max_reconsume_times=16)
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext())


async def stored(broker: BrokerApp, topic: str, queue_id: int = 0) -> list[MessageExt]:
    async with Peer(broker.broker_addr) as peer:
        deadline = asyncio.get_running_loop().time() + 30
        while broker.store.max_offset(topic, queue_id) < 1:  # delayed: no event to await
            assert asyncio.get_running_loop().time() < deadline, f"nothing in {topic}"
            await asyncio.sleep(0.05)
        return await peer.messages(topic, queue_id)


async def test_a_replica_acting_for_its_master_hands_send_backs_to_another_master(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=2, broker={"message_delay_level": LADDER},
                       store=SMALL) as group:
        master_a, master_b = group.brokers
        replica = await group.add_replica(master_a, slave_metadata_sync_interval=100,
                                          slave_acting_master=True)
        async with Peer(master_a.broker_addr) as peer:
            await peer.ok(create_topic("T", 1))
            sent = await peer.ok(send("T", b"fails"))
        _, offset = decode_offset_msg_id(sent.ext_fields["msgId"])
        await caught_up(master_a, replica)
        while replica.topics.get("T") is None:
            replica.metadata_sync.synced.clear()
            await asyncio.wait_for(replica.metadata_sync.synced.wait(), 10)
        async with Peer(group.namesrv_addr) as ns:  # the replica registered T too
            await eventually_route(ns, "T", lambda r: any(
                1 in bd.broker_addrs for bd in r.broker_datas), timeout=30)
        async with Peer(replica.broker_addr) as rpeer:
            # the master is listed: the replica does not act for it
            refused = await rpeer(send_back(offset, 1))
            assert refused.code == ResponseCode.SYSTEM_ERROR
            assert "does not act for its master" in (refused.remark or "")
            await master_a.stop()  # unregisters: broker-a has only its replica now
            async with Peer(group.namesrv_addr) as ns:
                await eventually_route(ns, "T", lambda r: all(
                    0 not in bd.broker_addrs for bd in r.broker_datas
                    if bd.broker_name == "broker-a"), timeout=30)
            await rpeer.ok(send_back(offset, 1))
            (retried,) = await stored(master_b, "%RETRY%cg")
            assert bytes(retried.body) == b"fails" and retried.reconsume_times == 1
            assert retried.properties["RETRY_TOPIC"] == "T"
            await rpeer.ok(send_back(offset, -1))  # straight to the dead-letter queue
            (dead,) = await stored(master_b, "%DLQ%cg")
            assert bytes(dead.body) == b"fails"
        assert replica.ctx.store.replica  # it stored nothing itself


def cluster(**groups: dict[int, str]) -> ClusterInfo:
    return ClusterInfo(
        broker_addr_table={name: BrokerData(cluster="c", broker_name=name, broker_addrs=addrs)
                           for name, addrs in groups.items()},
        cluster_addr_table={"c": sorted(groups)})


def test_the_smallest_replica_listed_acts_only_while_no_master_is() -> None:
    down = cluster(a={1: "r1", 2: "r2"}, b={0: "mb"})
    assert acting_for(down, "a", 1) and not acting_for(down, "a", 2)
    up = cluster(a={0: "ma", 1: "r1"}, b={0: "mb"})
    assert not acting_for(up, "a", 1)
    assert not acting_for(up, "unknown", 1)


def test_the_other_groups_masters_take_the_escaped_messages() -> None:
    info = cluster(a={1: "r1"}, b={0: "mb", 1: "rb"}, c={1: "rc"})
    assert other_masters(info, "c", "a") == ["mb"]
    assert other_masters(info, "elsewhere", "a") == []


@pytest.mark.parametrize("parking", [{"DELAY": "1"}, {"TIMER_DELAY_MS": "500"}],
                         ids=["delay level", "timer"])
async def test_a_replica_acting_for_its_master_delivers_due_delayed_messages_elsewhere(
        tmp_path: Path, parking: dict[str, str]) -> None:
    async with Cluster(tmp_path, brokers=2, broker={"message_delay_level": "500ms"},
                       store=SMALL) as group:
        master_a, master_b = group.brokers
        replica = await group.add_replica(master_a, slave_metadata_sync_interval=100,
                                          slave_acting_master=True)
        # master-a delivers nothing, however soon the message falls due: only the
        # replica, acting for it once it is down, can deliver it
        master_a.ctx.schedule.hold()
        async with Peer(master_b.broker_addr) as peer:
            await peer.ok(create_topic("T", 2))  # broker-b serves T too
        async with Peer(master_a.broker_addr) as peer:
            await peer.ok(create_topic("T", 2))
            await peer.ok(send("T", b"later", queue_id=1,
                               properties=props(**parking)))  # parked for 500 ms
        await caught_up(master_a, replica)
        await master_a.stop()
        assert master_a.ctx.schedule.delivered == 0
        (delivered,) = await stored(master_b, "T", queue_id=1)
        assert bytes(delivered.body) == b"later"
        assert delivered.properties["REAL_TOPIC"] == "T"
        # the replica's schedule thread counts the delivery just after handing it to the
        # event loop, which may store it on broker-b first
        deadline = asyncio.get_running_loop().time() + 10
        while replica.ctx.schedule.delivered < 1:
            assert asyncio.get_running_loop().time() < deadline, "the replica counted nothing"
            await asyncio.sleep(0.01)
        assert replica.ctx.schedule.delivered == 1
