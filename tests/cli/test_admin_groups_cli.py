"""``tidemq admin`` group commands (consumerProgress, consumerConnection, ...) against a
real two-broker cluster; every mutation is read back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner
from tests.cli.test_admin_cli import admin, create, eventually, runner

from tidemq.cli.main import app
from tidemq.client import (
    ConsumeStatus,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from tidemq.client.pull import pull_request, read_pull_response
from tidemq.client.subscription import Subscription
from tidemq.codec.command import RemotingCommand, RequestCode

__all__ = ["runner"]


def human(cluster: ThreadedCluster, *args: str) -> list[list[str]]:
    """``tidemq admin ARGS`` without --json: its lines, split on runs of blanks."""
    result = CliRunner().invoke(app, ["admin", *args, "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    return [line.split() for line in result.stdout.splitlines()]


class Online:
    """A producer and a subscribed pull consumer kept open on the cluster's loop."""

    def __init__(self, cluster: ThreadedCluster, topic: str, group: str,
                 producer_group: str) -> None:
        self.cluster = cluster
        self.topic, self.group, self.producer_group = topic, group, producer_group
        self.producer = Producer(producer_group, cluster.namesrv)
        self.consumer = PullConsumer(group, cluster.namesrv)
        self.consumer.subscribe(topic, "tagA || tagB")
        cluster.call(self.producer.start())
        cluster.call(self.consumer.start())
        assert not cluster.call(self.consumer.instance.send_heartbeat(cluster.broker_addrs))

    def send(self, queue: MessageQueue, n: int, **props: str) -> list[Any]:
        async def go() -> list[Any]:
            return [await self.producer.send(Message(queue.topic, b"m%d" % i, props),
                                             queue=queue) for i in range(n)]
        results = self.cluster.call(go())
        for broker in self.cluster.cluster.brokers:  # a commit may not pass the queue's end
            assert broker.store.wait_dispatched()
        return results

    def commit(self, offsets: dict[MessageQueue, int]) -> None:
        self.cluster.call(self.consumer.commit(offsets))

    def close(self) -> None:
        self.cluster.call(self.consumer.close(commit=False))
        self.cluster.call(self.producer.close())


@pytest.fixture
def online(cluster: ThreadedCluster, request: pytest.FixtureRequest) -> Iterator[Online]:
    """A topic and groups of the test's own (the cluster serves the whole module)."""
    n = request.node.name.split("_", 1)[1][:40]
    create(cluster, f"GrpTopic-{n}", 2)
    running = Online(cluster, f"GrpTopic-{n}", f"GrpConsumer-{n}", f"GrpProducer-{n}")
    try:
        yield running
    finally:
        running.close()


def _queue(online: Online, broker: str, qid: int) -> MessageQueue:
    return MessageQueue(online.topic, broker, qid)


def pulled(cluster: ThreadedCluster, online: Online, queue: MessageQueue, offset: int,
           max_nums: int) -> int:
    """A bare pull of ``online.group`` (no commit): the nextBeginOffset it got."""
    async def go() -> int:
        inst = online.consumer.instance
        addr = await inst.master_address(queue)
        sub = Subscription.parse(queue.topic)
        result = read_pull_response(
            await inst.request(addr, pull_request(online.group, queue, offset,
                                                  max_nums=max_nums, subscription=sub)),
            queue, sub, address=addr, offset=offset)
        return result.next_offset
    return cluster.call(go())


def test_consumer_progress_rows_and_totals(cluster: ThreadedCluster, online: Online) -> None:
    online.send(_queue(online, "broker-a", 0), 5)
    online.send(_queue(online, "broker-b", 1), 3)
    online.commit({_queue(online, "broker-a", 0): 2, _queue(online, "broker-b", 1): 3})
    assert pulled(cluster, online, _queue(online, "broker-a", 0), 0, 4) == 4  # 2 in flight

    got = admin(cluster, "consumerProgress", "-g", online.group, "-t", online.topic)
    rows = {(q["brokerName"], q["queueId"]): q for q in got["queues"]}
    assert set(rows) == {(b, q) for b in ("broker-a", "broker-b") for q in (0, 1)}
    a0, b1 = rows[("broker-a", 0)], rows[("broker-b", 1)]
    assert (a0["brokerOffset"], a0["consumerOffset"], a0["diff"]) == (5, 2, 3)
    assert (a0["pullOffset"], a0["inflight"]) == (4, 2)
    assert (b1["brokerOffset"], b1["consumerOffset"], b1["diff"]) == (3, 3, 0)
    assert (b1["pullOffset"], b1["inflight"]) == (3, 0)  # never pulled: its commit
    assert a0["lastTimestamp"] > 0 and rows[("broker-a", 1)]["lastTimestamp"] == 0
    assert (got["diffTotal"], got["inflightTotal"]) == (3, 2)

    lines = human(cluster, "consumerProgress", "-g", online.group, "-t", online.topic)
    assert lines[0] == ["#Topic", "#Broker", "Name", "#QID", "#Broker", "Offset",
                        "#Consumer", "Offset", "#Diff", "#Inflight", "#LastTime"]
    assert lines[1][:7] == [online.topic, "broker-a", "0", "5", "2", "3", "2"]
    assert ["Consume", "Diff", "Total:", "3"] in lines
    assert ["Consume", "Inflight", "Total:", "2"] in lines

    # a commit past the pulls leaves nothing in flight; a reset forgets the pulls
    online.commit({_queue(online, "broker-a", 0): 5})
    got = admin(cluster, "consumerProgress", "-g", online.group, "-t", online.topic)
    assert got["inflightTotal"] == 0
    assert pulled(cluster, online, _queue(online, "broker-a", 0), 0, 5) == 5
    admin(cluster, "resetOffsetByTime", "-g", online.group, "-t", online.topic, "-s", "0")
    got = admin(cluster, "consumerProgress", "-g", online.group, "-t", online.topic)
    assert got["inflightTotal"] == 0


def test_consumer_progress_without_a_group_lists_groups(cluster: ThreadedCluster,
                                                        online: Online) -> None:
    online.send(_queue(online, "broker-a", 1), 4)
    online.commit({_queue(online, "broker-a", 1): 1})
    groups = {g["group"]: g for g in admin(cluster, "consumerProgress")}
    mine = groups[online.group]
    assert mine["count"] == 1 and mine["diffTotal"] == 3
    assert mine["consumeType"] == "CONSUME_ACTIVELY"
    assert mine["messageModel"] == "CLUSTERING"
    lines = human(cluster, "consumerProgress")
    assert lines[0][0] == "#Group"
    row = next(r for r in lines if r[0] == online.group)
    # mqadmin's #Type is PULL or PUSH, and #Model is shown for a push group only
    assert row[:4] == [online.group, "1", "V5_3_3", "PULL"] and "CLUSTERING" not in row, row
    # a group with offsets and no consumer online: mqadmin's OFFLINE in #Version
    admin(cluster, "updateSubGroup", "-g", "CliNobodyOnline", "-c", "DefaultCluster")
    admin(cluster, "resetOffsetByTime", "-g", "CliNobodyOnline", "-t", online.topic, "-s", "0")
    lines = human(cluster, "consumerProgress")
    assert next(r for r in lines if r[0] == "CliNobodyOnline")[:3] == [
        "CliNobodyOnline", "0", "OFFLINE"]


def test_consumer_and_producer_connections(cluster: ThreadedCluster, online: Online) -> None:
    online.send(_queue(online, "broker-a", 0), 1)
    conns = admin(cluster, "consumerConnection", "-g", online.group)
    assert [c["clientId"] for c in conns["connections"]] == [
        online.consumer.instance.client_id]
    assert conns["connections"][0]["clientAddr"].startswith("127.0.0.1:")
    assert conns["subscriptions"] == {online.topic: "tagA || tagB"}
    assert conns["messageModel"] == "CLUSTERING"
    one_broker = admin(cluster, "consumerConnection", "-g", online.group,
                       "-b", cluster.broker_addrs[1])
    assert len(one_broker["connections"]) == 1

    lines = human(cluster, "consumerConnection", "-g", online.group)
    assert lines[0] == ["#ClientId", "#ClientAddr", "#Language", "#Version"]
    assert lines[1][0] == online.consumer.instance.client_id
    assert lines[1][-1] == "V5_3_3"  # the version's name, as mqadmin prints it
    assert [online.topic, "tagA", "||", "tagB"] in lines
    assert ["MessageModel:", "CLUSTERING"] in lines

    prods = admin(cluster, "producerConnection", "-g", online.producer_group, "-t", online.topic)
    assert [c["clientId"] for c in prods["connections"]] == [
        online.producer.instance.client_id]
    lines = human(cluster, "producerConnection", "-g", online.producer_group, "-t", online.topic)
    assert lines[1][:2] == ["0001", online.producer.instance.client_id]
    assert lines[1][-1] == "V5_3_3"

    offline = admin(cluster, "consumerConnection", "-g", "NobodyHere", code=1)
    assert "not online" in offline.stderr


def test_reset_offset_by_time_and_skip(cluster: ThreadedCluster, online: Online) -> None:
    q = _queue(online, "broker-b", 0)
    online.send(q, 3)
    time.sleep(0.01)  # store times are in ms: the next send must be in a later one
    cut = int(time.time() * 1000)
    time.sleep(0.01)
    online.send(q, 2)
    online.commit({q: 5})

    got = admin(cluster, "resetOffsetByTime", "-g", online.group, "-t", online.topic,
                "-s", str(cut))
    rows = {(r["brokerName"], r["queueId"]): r["offset"] for r in got["offsets"]}
    assert rows[("broker-b", 0)] == 3
    assert set(rows) == {(b, i) for b in ("broker-a", "broker-b") for i in (0, 1)}
    assert online.cluster.call(online.consumer.committed(q)) == 3

    skipped = admin(cluster, "skipAccumulatedMessage", "-g", online.group, "-t", online.topic)
    assert {(r["brokerName"], r["queueId"]): r["offset"]
            for r in skipped["offsets"]}[("broker-b", 0)] == 5
    assert online.cluster.call(online.consumer.committed(q)) == 5

    one = admin(cluster, "resetOffsetByTime", "-g", online.group, "-t", online.topic,
                "-b", cluster.broker_addrs[1], "-q", "0", "-o", "1")
    assert [(r["brokerName"], r["queueId"], r["offset"]) for r in one["offsets"]] == [
        ("broker-b", 0, 1)]
    assert online.cluster.call(online.consumer.committed(q)) == 1

    lines = human(cluster, "resetOffsetByTime", "-g", online.group, "-t", online.topic,
                  "-s", "now")
    assert lines[0] == ["#brokerName", "#queueId", "#offset"]
    assert ["broker-b", "0", "5"] in lines

    bad = runner.invoke(app, ["admin", "resetOffsetByTime", "-g", online.group, "-t",
                              online.topic, "-s", "yesterday", "-n", cluster.namesrv])
    assert bad.exit_code == 2 and "yyyy-MM-dd#HH:mm:ss:SSS" in bad.output


def test_clone_group_offset(cluster: ThreadedCluster, online: Online) -> None:
    online.send(_queue(online, "broker-a", 1), 4)
    online.commit({_queue(online, "broker-a", 1): 4, _queue(online, "broker-b", 1): 0})
    got = admin(cluster, "cloneGroupOffset", "-s", online.group, "-d", "GrpClone",
                "-t", online.topic)
    assert {(r["brokerName"], r["queueId"], r["offset"]) for r in got["offsets"]} >= {
        ("broker-a", 1, 4), ("broker-b", 1, 0)}
    progress = admin(cluster, "consumerProgress", "-g", "GrpClone", "-t", online.topic)
    cloned = {(q["brokerName"], q["queueId"]): q["consumerOffset"]
              for q in progress["queues"]}
    assert cloned[("broker-a", 1)] == 4


def test_clone_group_offset_of_a_topic_the_online_group_left(cluster: ThreadedCluster,
                                                             online: Online) -> None:
    """mqadmin's ``-o``: an online source group that no longer subscribes to the topic
    has stale offsets of it; they are cloned only with ``-o true``."""
    old_topic = f"{online.topic}-old"
    create(cluster, old_topic, 1)
    online.send(MessageQueue(old_topic, "broker-a", 0), 3)
    online.commit({MessageQueue(old_topic, "broker-a", 0): 2})
    refused = admin(cluster, "cloneGroupOffset", "-s", online.group, "-d", "GrpCloneOld",
                    "-t", old_topic, code=1)
    assert "does not subscribe to" in refused.stderr and "-o true" in refused.stderr
    assert admin(cluster, "cloneGroupOffset", "-s", online.group, "-d", "GrpCloneOld",
                 "-t", old_topic, "-o", "false", code=1)
    got = admin(cluster, "cloneGroupOffset", "-s", online.group, "-d", "GrpCloneOld",
                "-t", old_topic, "-o", "true")
    assert {(r["brokerName"], r["queueId"], r["offset"]) for r in got["offsets"]} == {
        ("broker-a", 0, 2)}
    # the topic the online group subscribes to needs no -o
    admin(cluster, "cloneGroupOffset", "-s", online.group, "-d", "GrpCloneOld",
          "-t", online.topic)


def test_broker_consume_stats(cluster: ThreadedCluster, online: Online) -> None:
    online.send(_queue(online, "broker-a", 0), 6)
    online.commit({_queue(online, "broker-a", 0): 1})
    addr = cluster.broker_addrs[0]
    got = admin(cluster, "brokerConsumeStats", "-b", addr)
    mine = next(g for g in got["groups"] if g["group"] == online.group)
    row = next(q for q in mine["queues"] if q["topic"] == online.topic and q["queueId"] == 0)
    assert (row["brokerOffset"], row["consumerOffset"], row["diff"]) == (6, 1, 5)
    assert all(q["brokerName"] == "broker-a" for g in got["groups"] for q in g["queues"])
    high = admin(cluster, "brokerConsumeStats", "-b", addr, "-l", "1000000")
    assert high["groups"] == [] and high["totalDiff"] == got["totalDiff"]
    lines = human(cluster, "brokerConsumeStats", "-b", addr)
    assert lines[0][:3] == ["#Topic", "#Group", "#Broker"]
    assert ["Diff", "Total:", str(got["totalDiff"])] in lines


def test_broker_consume_stats_of_ordered_topics(cluster: ThreadedCluster,
                                                online: Online) -> None:
    """mqadmin's ``-o true``: only the topics the broker holds as ordered; ``-t`` bounds
    each request."""
    ordered = f"{online.topic}-ord"
    create(cluster, ordered, 2, "-o", "true")
    online.send(_queue(online, "broker-a", 0), 2)
    online.send(MessageQueue(ordered, "broker-a", 0), 3)
    online.commit({_queue(online, "broker-a", 0): 1, MessageQueue(ordered, "broker-a", 0): 1})
    addr = cluster.broker_addrs[0]

    def topics(*flags: str) -> set[str]:
        got = admin(cluster, "brokerConsumeStats", "-b", addr, "-t", "20000", *flags)
        mine = [g for g in got["groups"] if g["group"] == online.group]
        return {q["topic"] for g in mine for q in g["queues"]}

    assert topics() == {online.topic, ordered}
    assert topics("-o", "false") == {online.topic, ordered}
    assert topics("-o", "true") == {ordered}
    bad = admin(cluster, "brokerConsumeStats", "-b", addr, "-t", "0", code=2)
    assert "timeoutMillis" in bad.output or "-t" in bad.output


def test_update_and_delete_sub_group(cluster: ThreadedCluster) -> None:
    out = admin(cluster, "updateSubGroup", "-g", "GrpMade", "-c", "DefaultCluster",
                "-r", "3", "-q", "2", "-o", "true", "--attributes", "+lite.bind=on")
    assert sorted(out["brokers"]) == sorted(cluster.broker_addrs)
    for broker in cluster.cluster.brokers:
        cfg = broker.subscription_groups.groups["GrpMade"]
        assert (cfg["retryMaxTimes"], cfg["retryQueueNums"],
                cfg["consumeMessageOrderly"], cfg["consumeBroadcastEnable"]) == (
                    3, 2, True, False)
        assert cfg["attributes"] == {"lite.bind": "on"}

    lines = human(cluster, "deleteSubGroup", "-g", "GrpMade", "-b", cluster.broker_addrs[0])
    assert lines == [["delete", "subscription", "group", "[GrpMade]", "from", "broker",
                      f"[{cluster.broker_addrs[0]}]", "success."]]
    assert "GrpMade" not in cluster.cluster.brokers[0].subscription_groups.groups
    assert "GrpMade" in cluster.cluster.brokers[1].subscription_groups.groups

    refused = admin(cluster, "updateSubGroup", "-g", "Bad Name", "-b",
                    cluster.broker_addrs[0], code=1)
    assert "groupName" in refused.stderr
    both = admin(cluster, "deleteSubGroup", "-g", "GrpMade", code=2)
    assert "-b" in both.output


def test_consumer_status(cluster: ThreadedCluster, online: Online) -> None:
    online.send(_queue(online, "broker-a", 1), 2)

    async def poll() -> None:  # a subscribed pull consumer takes its queues on a poll
        await online.consumer.poll(timeout=0.5)

    def status() -> Any:
        cluster.call(poll())
        return admin(cluster, "consumerStatus", "-g", online.group)

    got = eventually(status, lambda s: s["rebalanceOk"] is True)
    client = online.consumer.instance.client_id
    assert got["sameSubscription"] is True and got["problems"] == []
    info = got["consumers"][client]
    assert {(q["brokerName"], q["queueId"]) for q in info["mqTable"]} == {
        (b, i) for b in ("broker-a", "broker-b") for i in (0, 1)}
    assert [s["topic"] for s in info["subscriptionSet"]] == [online.topic]
    assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_ACTIVELY"

    lines = human(cluster, "consumerStatus", "-g", online.group)
    assert lines[0] == ["#Index", "#ClientId", "#Version", "#Queues"]
    assert lines[1][1] == client and lines[1][-2:] == ["V5_3_3", "4"]
    assert ["Rebalance", "OK"] in lines
    detail = human(cluster, "consumerStatus", "-g", online.group, "-i", client)
    assert ["#Consumer", "Offset#"] in detail
    assert [online.topic, "broker-a", "1"] == next(
        line[:3] for line in detail if line[:3] == [online.topic, "broker-a", "1"])

    with_ip = admin(cluster, "consumerProgress", "-g", online.group, "-s", "true")
    assert {q["clientIp"] for q in with_ip["queues"] if q["topic"] == online.topic} == {
        "127.0.0.1"}
    table = human(cluster, "consumerProgress", "-g", online.group, "-s", "true")
    assert table[0][8:10] == ["#Client", "IP"] and table[1][5] == "127.0.0.1"

    nobody = admin(cluster, "consumerStatus", "-g", online.group, "-i", "1.2.3.4@x", code=1)
    assert "not online" in nobody.stderr


def test_split_check_names_overlaps_and_gaps() -> None:
    from tidemq.cli.commands.admin_groups import _split_check

    row = {"topic": "T", "brokerName": "b", "queueId": 0}
    infos = {"c1": {"mqTable": [row]}, "c2": {"mqTable": [row]}}
    same, ok, problems = _split_check(infos, {("T", "b", 0), ("T", "b", 1)})
    assert same and not ok
    assert problems == ["T/b/0 held by c1, c2", "T/b/1 held by nobody"]


def test_consumer_status_of_a_push_consumer(cluster: ThreadedCluster) -> None:
    create(cluster, "GrpPushTopic", 2)
    consumer = PushConsumer("GrpPushGroup", cluster.namesrv, listener=_consumed)
    consumer.subscribe("GrpPushTopic")
    cluster.call(consumer.start())
    try:
        got = eventually(lambda: admin(cluster, "consumerStatus", "-g", "GrpPushGroup"),
                         lambda s: s["rebalanceOk"] is True)
        [info] = got["consumers"].values()
        held = {(q["brokerName"], q["queueId"]) for q in info["mqTable"]}
        assert held == {(b, i) for b in ("broker-a", "broker-b") for i in (0, 1)}
        assert all({"commitOffset", "nextPullOffset", "cachedMsgCount", "locked"} <= set(q)
                   for q in info["mqTable"])
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert info["jstack"] == ""  # only asked for with -s

        # -s: the consumer's threads and asyncio tasks, as mqadmin's jstack
        cid = consumer.instance.client_id
        text = CliRunner().invoke(app, ["admin", "consumerStatus", "-g", "GrpPushGroup",
                                        "-i", cid, "-s", "-n", cluster.namesrv])
        assert text.exit_code == 0, text.output
        dump = text.stdout.split("#Consumer jstack#", 1)[1]
        assert '"cli-cluster" thread' in dump  # the thread the consumer runs on
        assert "push_consumer.py" in dump and " task " in dump  # its pull loops
        got = admin(cluster, "consumerStatus", "-g", "GrpPushGroup", "-s")
        assert '"cli-cluster" thread' in got["consumers"][cid]["jstack"]
    finally:
        cluster.call(consumer.close())


def test_consumer_status_of_a_java_consumer(cluster: ThreadedCluster) -> None:
    """A Java consumer answers 307 as fastjson writes it: ``mqTable`` keyed by queue
    objects, which no JSON reader accepts ("not JSON" before)."""
    create(cluster, "GrpJavaTopic", 1)
    consumer = PushConsumer("GrpJavaGroup", cluster.namesrv, listener=_consumed)
    consumer.subscribe("GrpJavaTopic")
    cluster.call(consumer.start())

    topics = ("GrpJavaTopic", "%RETRY%GrpJavaGroup")  # a push consumer takes its retry topic

    def as_java(_conn: object, cmd: RemotingCommand) -> RemotingCommand:
        key = '{"brokerName":"BROKER","queueId":0,"topic":"TOPIC"}'
        table = ",".join(key.replace("BROKER", b).replace("TOPIC", t)
                         + ':{"cachedMsgCount":0,"commitOffset":5,"locked":false}'
                         for t in topics for b in ("broker-a", "broker-b"))
        subs = ",".join('{"subString":"*","topic":"' + t + '"}' for t in topics)
        body = ('{"jstack":"","mqTable":{' + table + '},"properties":{"PROP_CONSUME_TYPE":'
                '"CONSUME_PASSIVELY"},"subscriptionSet":[' + subs + ']}')
        return cmd.response(body=body.encode())

    consumer.instance.remoting.register(RequestCode.GET_CONSUMER_RUNNING_INFO, as_java)
    try:
        got = eventually(lambda: admin(cluster, "consumerStatus", "-g", "GrpJavaGroup"),
                         lambda s: s["rebalanceOk"] is True)
        assert got["rebalanceOk"] is True, got["problems"]
        [info] = got["consumers"].values()
        assert sorted((q["topic"], q["brokerName"], q["queueId"], q["commitOffset"])
                      for q in info["mqTable"]) == sorted(
                          (t, b, 0, 5) for t in topics for b in ("broker-a", "broker-b"))
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
    finally:
        cluster.call(consumer.close())


async def _consumed(msgs: list[Any]) -> ConsumeStatus:
    return ConsumeStatus.CONSUME_SUCCESS


def test_reset_and_skip_within_a_cluster(cluster: ThreadedCluster, online: Online) -> None:
    q = _queue(online, "broker-a", 0)
    online.send(q, 3)
    online.commit({q: 1})
    got = admin(cluster, "skipAccumulatedMessage", "-g", online.group, "-t", online.topic,
                "-c", "DefaultCluster")
    assert {(r["brokerName"], r["queueId"]): r["offset"] for r in got["offsets"]}[
        ("broker-a", 0)] == 3
    assert cluster.call(online.consumer.committed(q)) == 3
    unknown = admin(cluster, "resetOffsetByTime", "-g", online.group, "-t", online.topic,
                    "-s", "0", "-c", "NoSuchCluster", code=1)
    assert "NoSuchCluster" in unknown.stderr
    assert cluster.call(online.consumer.committed(q)) == 3


def test_consumer_progress_of_a_group_without_offsets_says_so(cluster: ThreadedCluster
                                                              ) -> None:
    result = CliRunner().invoke(app, ["admin", "consumerProgress", "-g", "NoSuchGroup",
                                      "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("#Topic")
    assert " ".join(result.stderr.split()) == (
        "no broker holds an offset of group NoSuchGroup: it has committed none, or there "
        "is no such group (consumerProgress without -g lists the groups)")


def test_topic_list_with_clusters_names_each_topics_cluster_and_groups(
        cluster: ThreadedCluster, online: Online) -> None:
    """mqadmin's ``topicList -c``: a line per topic and group, the cluster first; a topic
    nobody consumes has one line with no group; retry topics are left out."""
    online.send(_queue(online, "broker-a", 0), 1)
    online.commit({_queue(online, "broker-a", 0): 1})
    create(cluster, "NobodyReads", 1)
    rows = {r["topic"]: r for r in admin(cluster, "topicList", "-c")}
    assert rows[online.topic]["cluster"] == "DefaultCluster"
    assert online.group in rows[online.topic]["groups"]
    assert rows["NobodyReads"]["groups"] == []
    assert not any(t.startswith("%RETRY%") for t in rows)
    lines = human(cluster, "topicList", "-c")
    assert lines[0] == ["#Cluster", "Name", "#Topic", "#Consumer", "Group"]
    assert ["DefaultCluster", online.topic, online.group] in lines
    assert ["DefaultCluster", "NobodyReads"] in lines
