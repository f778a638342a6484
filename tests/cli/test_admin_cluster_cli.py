"""``tidemq admin`` statsAll, allocateMQ, the send probes, the housekeeping commands and
updateOrderConf against a real two-broker cluster."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin, create
from tests.cli.test_admin_groups_cli import human

from tidemq.client import ConsumeFromWhere, Message, MessageQueue, Producer, PullConsumer


def test_stats_all(cluster: ThreadedCluster) -> None:
    create(cluster, "StatsTopic")
    create(cluster, "StatsQuiet")

    async def traffic() -> int:
        async with Producer("stats-p", cluster.namesrv) as producer:
            for i in range(3):
                await producer.send(Message("StatsTopic", b"s%d" % i),
                                    queue=MessageQueue("StatsTopic", "broker-a", 0))
        consumer = PullConsumer("StatsGroup", cluster.namesrv,
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.assign([MessageQueue("StatsTopic", "broker-a", 0)])
        await consumer.start()
        try:
            got = []
            while len(got) < 3:
                batch = await consumer.poll(timeout=5)
                assert batch, "the three messages did not arrive"
                got.extend(batch)
            await consumer.commit({MessageQueue("StatsTopic", "broker-a", 0): 1})
            return len(got)
        finally:
            await consumer.close(commit=False)

    assert cluster.call(traffic()) == 3
    lines = admin(cluster, "statsAll", "-t", "StatsTopic")
    assert lines == [{"topic": "StatsTopic", "group": "StatsGroup", "accumulation": 2,
                      "inTps": lines[0]["inTps"], "outTps": lines[0]["outTps"],
                      "inMsg24Hour": 3, "outMsg24Hour": 3}]
    quiet = admin(cluster, "statsAll", "-t", "StatsQuiet")
    assert quiet == [{"topic": "StatsQuiet", "group": "", "accumulation": 0, "inTps": 0.0,
                      "outTps": None, "inMsg24Hour": 0, "outMsg24Hour": None}]
    active = {(s["topic"], s["group"]) for s in admin(cluster, "statsAll", "-a")}
    assert ("StatsTopic", "StatsGroup") in active
    assert not any(t == "StatsQuiet" for t, _ in active)
    assert not any(t.startswith("%RETRY%") for t, _ in active)
    table = human(cluster, "statsAll", "-t", "StatsTopic")
    assert table[0][:3] == ["#Topic", "#Consumer", "Group"]
    assert table[1][:3] == ["StatsTopic", "StatsGroup", "2"] and table[1][-2:] == ["3", "3"]


def test_allocate_mq(cluster: ThreadedCluster) -> None:
    create(cluster, "AllocTopic", 2)
    got = admin(cluster, "allocateMQ", "-t", "AllocTopic", "-i", "10.0.0.1,10.0.0.2")
    first = [(q["brokerName"], q["queueId"]) for q in got["result"]["10.0.0.1"]]
    second = [(q["brokerName"], q["queueId"]) for q in got["result"]["10.0.0.2"]]
    assert first == [("broker-a", 0), ("broker-a", 1)]
    assert second == [("broker-b", 0), ("broker-b", 1)]


def test_send_probes(cluster: ThreadedCluster) -> None:
    status = admin(cluster, "sendMsgStatus", "-b", "broker-a", "-c", "3", "-s", "64")
    assert len(status) == 3 and all(p["ok"] and p["brokerName"] == "broker-a"
                                    for p in status)
    offsets = [p["queueOffset"] for p in status]
    assert offsets == sorted(offsets) and len(set(offsets)) == 3
    lines = human(cluster, "sendMsgStatus", "-b", "broker-b", "-c", "2")
    assert len(lines) == 2 and all(line[0].startswith("rt=") and "sendStatus=SEND_OK,"
                                   in line[1:][1] for line in lines)
    # mqadmin's SendResult: the queue as Java prints a MessageQueue
    assert all("messageQueue=MessageQueue [topic=broker-b, brokerName=broker-b, queueId="
               in " ".join(line) for line in lines)

    create(cluster, "ProbeTopic", 2)
    checked = admin(cluster, "checkMsgSendRT", "-t", "ProbeTopic", "-a", "4")
    assert [(s["brokerName"], s["queueId"]) for s in checked["sends"]] == [
        ("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
    assert all(s["ok"] for s in checked["sends"]) and checked["avgRtMs"] > 0
    table = human(cluster, "checkMsgSendRT", "-t", "ProbeTopic", "-a", "2")
    assert table[0] == ["#Broker", "Name", "#QID", "#Send", "Result", "#RT"]
    assert table[1][:3] == ["broker-a", "0", "true"] and table[-1][:2] == ["Avg", "RT:"]

    rows = admin(cluster, "clusterRT", "-a", "2")
    assert [(r["cluster"], r["brokerName"], r["successCount"], r["failCount"])
            for r in rows] == [("DefaultCluster", "broker-a", 2, 0),
                               ("DefaultCluster", "broker-b", 2, 0)]
    log_lines = human(cluster, "clusterRT", "-a", "2", "-p", "true", "-m", "room1")
    assert [line[-1].split("|")[1:4] for line in log_lines] == [
        ["room1", "DefaultCluster", "broker-a"], ["room1", "DefaultCluster", "broker-b"]]
    missing = admin(cluster, "clusterRT", "-a", "2", "-c", "NoCluster", code=1)
    assert "cluster [NoCluster] not exist" in missing.stderr


def test_clean_unused_topic_and_expired_cq(cluster: ThreadedCluster) -> None:
    create(cluster, "LeftBehind")

    async def send() -> Any:
        async with Producer("clean-p", cluster.namesrv) as producer:
            return await producer.send(Message("LeftBehind", b"x"),
                                       queue=MessageQueue("LeftBehind", "broker-a", 0))

    cluster.call(send())
    broker = cluster.cluster.brokers[0]
    assert broker.store.wait_dispatched()
    assert ("LeftBehind", 0) in broker.store.queues.queue_keys()
    broker.topics.delete("LeftBehind")  # the table forgets it; its queues stay behind

    got = admin(cluster, "cleanUnusedTopic", "-b", cluster.broker_addrs[0])
    assert got == {cluster.broker_addrs[0]: 1}
    assert not any(t == "LeftBehind" for t, _ in broker.store.queues.queue_keys())
    again = human(cluster, "cleanUnusedTopic", "-c", "DefaultCluster")
    assert sorted(again[:-1]) == sorted([[f"{a}:", "0", "unused", "topics"]
                                         for a in cluster.broker_addrs])
    assert again[-1] == ["success"]

    expired = admin(cluster, "cleanExpiredCQ", "-c", "DefaultCluster")
    assert expired == {a: 0 for a in cluster.broker_addrs}  # nothing lies below the start


def test_update_order_conf(cluster: ThreadedCluster) -> None:
    admin(cluster, "updateOrderConf", "-t", "OrderedT", "-m", "put", "-v",
          "broker-a:4;broker-b:4")
    assert cluster.cluster.namesrv.kv_config.get("ORDER_TOPIC_CONFIG", "OrderedT") == (
        "broker-a:4;broker-b:4")
    assert admin(cluster, "updateOrderConf", "-t", "OrderedT", "-m", "get") == {
        "topic": "OrderedT", "orderConf": "broker-a:4;broker-b:4"}
    lines = human(cluster, "updateOrderConf", "-t", "OrderedT", "-m", "delete")
    assert lines == [["delete", "orderConf", "success.", "topic=[OrderedT]"]]
    assert cluster.cluster.namesrv.kv_config.get("ORDER_TOPIC_CONFIG", "OrderedT") is None
    bad = admin(cluster, "updateOrderConf", "-t", "OrderedT", "-m", "put", code=2)
    assert "-v" in bad.output
