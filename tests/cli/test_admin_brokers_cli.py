"""``tidemq admin getConsumerConfig``, ``haStatus``, ``producer`` and ``queryCq`` against a
real cluster: each answer is checked against what the brokers hold."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin, create
from tests.cli.test_admin_groups_cli import human

from tidemq.client import Message, MessageQueue, Producer


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedCluster]:
    """One master (broker-a) with a replica that copied a message from it."""
    running = ThreadedCluster(tmp_path_factory.mktemp("ha-cluster"), brokers=1).start()
    try:
        master = running.cluster.brokers[0]
        admin(running, "updateTopic", "-t", "HaViewTopic", "-b", master.broker_addr)

        async def add() -> None:
            replica = await running.cluster.add_replica(master)
            client = replica.ctx.replication.client
            assert client is not None
            producer = Producer("HaViewProducer", running.namesrv)
            await producer.start()
            try:
                await producer.send(Message("HaViewTopic", b"copied"))
            finally:
                await producer.close()
            server = master.ctx.replication.server
            assert server is not None
            reported = asyncio.Event()
            server.on_report.append(reported.set)
            end = master.store.commitlog.max_offset
            await asyncio.wait_for(client.reached(end), 20)
            while server.acked_offsets() != [end]:  # the master heard of the copy
                reported.clear()
                await asyncio.wait_for(reported.wait(), 20)
            server.on_report.remove(reported.set)

        running.call(add(), timeout=60)
        yield running
    finally:
        running.stop()


def test_get_consumer_config(cluster: ThreadedCluster) -> None:
    admin(cluster, "updateSubGroup", "-g", "CfgViewGroup", "-c", "DefaultCluster", "-r", "7",
          "-o", "true")
    got = admin(cluster, "getConsumerConfig", "-g", "CfgViewGroup")
    assert sorted((g["clusterName"], g["brokerName"]) for g in got) == [
        ("DefaultCluster", "broker-a"), ("DefaultCluster", "broker-b")]
    for g in got:
        cfg = g["subscriptionGroupConfig"]
        assert cfg["groupName"] == "CfgViewGroup"
        assert cfg["retryMaxTimes"] == 7 and cfg["consumeMessageOrderly"] is True
    lines = human(cluster, "getConsumerConfig", "-g", "CfgViewGroup")
    assert ["=============================DefaultCluster:broker-a"
            "============================="] in lines
    assert ["retryMaxTimes", "=", "7"] in lines
    assert ["consumeMessageOrderly", "=", "true"] in lines
    # only the brokers that hold it
    admin(cluster, "deleteSubGroup", "-g", "CfgViewGroup", "-b", cluster.broker_addrs[1])
    got = admin(cluster, "getConsumerConfig", "-g", "CfgViewGroup")
    assert [g["brokerName"] for g in got] == ["broker-a"]
    assert admin(cluster, "getConsumerConfig", "-g", "NoSuchViewGroup") == []


def test_producer_lists_each_connected_instance(cluster: ThreadedCluster) -> None:
    create(cluster, "ProducerViewTopic")
    producer = Producer("ProducerViewGroup", cluster.namesrv)
    cluster.call(producer.start())
    try:
        cluster.call(producer.send(Message("ProducerViewTopic", b"x")))
        addr = cluster.broker_addrs[0]
        assert not cluster.call(producer.instance.send_heartbeat([addr]))
        data = admin(cluster, "producer", "-b", addr)
        (one,) = data["ProducerViewGroup"]
        assert one["clientId"] == producer.instance.client_id
        assert one["language"] == "PYTHON" and one["lastUpdateTimestamp"] > 0
        assert one["remoteIP"].startswith("127.0.0.1:")
        result = human(cluster, "producer", "-b", addr)
        line = next(" ".join(words) for words in result
                    if words[:3] == ["producer", "group", "(ProducerViewGroup)"])
        assert re.fullmatch(
            r"producer group \(ProducerViewGroup\) instance : clientId=\S+,remoteIP=127\.0\.0"
            r"\.1:\d+, language=PYTHON, version=\d+, lastUpdateTimestamp=\d+", line), line
    finally:
        cluster.call(producer.close())


def test_query_cq_shows_the_queue_entries(cluster: ThreadedCluster) -> None:
    create(cluster, "CqViewTopic", 1)
    producer = Producer("CqViewProducer", cluster.namesrv)
    cluster.call(producer.start())
    try:
        queue = MessageQueue("CqViewTopic", "broker-a", 0)
        sent = [cluster.call(producer.send(Message("CqViewTopic", b"x" * (10 + i), {"TAGS": "T"}),
                                           queue=queue)) for i in range(3)]
    finally:
        cluster.call(producer.close())
    assert [s.queue_offset for s in sent] == [0, 1, 2]
    addr = cluster.broker_addrs[0]
    body = admin(cluster, "queryCq", "-t", "CqViewTopic", "-q", "0", "-i", "1", "-c", "5",
                 "-b", addr)
    assert body["minQueueIndex"] == 0 and body["maxQueueIndex"] == 3
    broker = cluster.cluster.brokers[0]
    want = [broker.store.queues.get("CqViewTopic", 0).entry(i) for i in (1, 2)]  # type: ignore[union-attr]
    assert [(e["physicOffset"], e["physicSize"], e["tagsCode"]) for e in body["queueData"]] == want
    assert want[1][1] == want[0][1] + 1  # one byte more body each
    lines = [" ".join(w) for w in human(cluster, "queryCq", "-t", "CqViewTopic", "-q", "0",
                                          "-i", "1", "-b", addr, "-g", "NobodyCq")]
    assert "Filter data:" in lines and "NobodyCq@CqViewTopic is not online!" in lines
    assert "max: 3, min: 0" in lines
    assert "idx: 1" in lines and "idx: 2" in lines and "idx: 3" not in lines
    assert (f"ConsumeQueueData{{physicOffset={want[0][0]}, physicSize={want[0][1]}, "
            f"tagsCode={want[0][2]}, extendDataJson='null', bitMap='null', eval=false, "
            "msg='null'}") in lines  # as Java concatenates a null
    missing = admin(cluster, "queryCq", "-t", "NoSuchCqTopic", "-q", "0", "-i", "0", "-b",
                    addr, code=1)
    assert "0@NoSuchCqTopic is not exist!" in missing.stderr


def test_ha_status_of_a_master_and_of_its_replica(replicated: ThreadedCluster) -> None:
    master, replica = replicated.cluster.brokers
    status = admin(replicated, "haStatus", "-b", master.broker_addr)[master.broker_addr]
    end = master.store.commitlog.max_offset
    assert status["master"] is True and status["masterCommitLogMaxOffset"] == end
    (link,) = status["haConnectionInfo"]
    assert link["addr"] == replica.ctx.replication.client.local_address  # type: ignore[union-attr]
    assert link["slaveAckOffset"] == end and link["diff"] == 0 and link["inSync"] is True
    assert 0 <= link["transferFromWhere"] < end
    assert status["inSyncSlaveNums"] == 1
    same = admin(replicated, "haStatus", "-c", "DefaultCluster")
    assert list(same) == [master.broker_addr]
    lines = human(replicated, "haStatus", "-b", master.broker_addr)
    assert ["#MasterAddr", master.broker_addr] in lines and ["#SlaveNum", "1"] in lines
    assert ["#InSyncSlaveNum", "1"] in lines
    header = ["#SlaveAddr", "#SlaveAckOffset", "#Diff", "#TransferSpeed(KB/s)", "#Status",
              "#TransferFromWhere", "#Authenticated"]
    row = lines[lines.index(header) + 1]
    assert row[0] == link["addr"] and row[4] == "OK" and row[1] == str(link["slaveAckOffset"])
    assert (link["authenticated"], row[6]) == (False, "no")  # a master without ACL

    mine = admin(replicated, "haStatus", "-b", replica.broker_addr)[replica.broker_addr]
    assert mine["master"] is False
    client = mine["haClientRuntimeInfo"]
    assert client["masterAddr"] == master.ctx.replication.ha_address
    assert client["isActivated"] is True and client["lastReadTimestamp"] > 0
    assert client["lastWriteTimestamp"] >= client["lastReadTimestamp"] - 1000  # its report
    assert client["transferredByteInSecond"] >= 0
    lines = human(replicated, "haStatus", "-b", replica.broker_addr)
    assert ["#MasterAddr", master.ctx.replication.ha_address] in lines
    assert ["#CommitLogMaxOffset", str(client["maxOffset"])] in lines
    assert any(w[0] == "#LastReadTime" for w in lines if w)
    # a TideMQ replica cannot know upstream's master flush offset: unknown, not 0
    assert client["masterFlushOffset"] == -1
    assert ["#MasterFlushOffset", "unknown"] in lines
