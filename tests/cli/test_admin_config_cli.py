"""``tidemq admin`` configuration and permission commands against a real two-broker
cluster; every change is read back from the servers, and put back for the next test."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin, create, eventually
from tests.cli.test_admin_groups_cli import human

from tidemq.client import Message, MessageQueue, Producer
from tidemq.errors import TideMQError


def _perms(cluster: ThreadedCluster, topic: str) -> dict[str, int]:
    route = admin(cluster, "topicRoute", "-t", topic)
    return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}


def test_get_broker_config(cluster: ThreadedCluster) -> None:
    addr = cluster.broker_addrs[0]
    got = admin(cluster, "getBrokerConfig", "-b", addr)
    props = got[addr]
    assert props["brokerName"] == "broker-a"
    assert props["listenPort"] == str(cluster.cluster.brokers[0].ctx.config.listen_port)
    assert props["autoCreateTopicEnable"] == "true"
    assert "storePathRootDir" in props and "secretKey" in props
    both = admin(cluster, "getBrokerConfig", "-c", "DefaultCluster")
    assert sorted(both) == sorted(cluster.broker_addrs)
    assert {p["brokerName"] for p in both.values()} == {"broker-a", "broker-b"}
    lines = human(cluster, "getBrokerConfig", "-b", addr)
    assert lines[0] == [f"============{addr}============"]
    assert ["brokerName", "=", "broker-a"] in lines


def test_update_broker_config_run_time_keys(cluster: ThreadedCluster) -> None:
    addr, broker = cluster.broker_addrs[0], cluster.cluster.brokers[0]
    out = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "autoCreateTopicEnable",
                "-v", "false")
    assert out["brokers"] == [addr]
    try:
        assert admin(cluster, "getBrokerConfig", "-b", addr)[addr][
            "autoCreateTopicEnable"] == "false"
        assert broker.ctx.topics.auto_create is False
        assert cluster.cluster.brokers[1].ctx.topics.auto_create is True
    finally:
        admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "autoCreateTopicEnable",
              "-v", "true")
    assert broker.ctx.topics.auto_create is True

    lines = human(cluster, "updateBrokerConfig", "-c", "DefaultCluster", "-k",
                  "maxPullBytes", "-v", "1048576")
    assert sorted(lines) == sorted([["update", "broker", "config", "success,", a]
                                    for a in cluster.broker_addrs])
    assert all(b.ctx.config.max_pull_bytes == 1048576 for b in cluster.cluster.brokers)


def test_update_broker_config_refuses_what_cannot_change(cluster: ThreadedCluster) -> None:
    addr = cluster.broker_addrs[0]
    before = admin(cluster, "getBrokerConfig", "-b", addr)[addr]
    fixed = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "brokerName", "-v",
                  "other", code=1)
    assert "brokerName cannot change while the broker runs" in fixed.stderr
    assert "INVALID_PARAMETER" in fixed.stderr
    unknown = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "noSuchKey", "-v",
                    "1", code=1)
    assert "unknown config key 'noSuchKey'" in unknown.stderr
    bad = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v",
                "3", code=1)
    assert "brokerPermission must be 2, 4 or 6" in bad.stderr
    worse = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "maxPullBytes", "-v",
                  "lots", code=1)
    assert "maxPullBytes" in worse.stderr
    assert admin(cluster, "getBrokerConfig", "-b", addr)[addr] == before


def test_broker_permission_reaches_the_routes_and_the_sends(cluster: ThreadedCluster
                                                            ) -> None:
    create(cluster, "CfgPermTopic")
    addr = cluster.broker_addrs[1]
    admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v", "4")
    try:
        perms = eventually(lambda: _perms(cluster, "CfgPermTopic"),
                           lambda p: p.get("broker-b") == 4)
        assert perms == {"broker-a": 6, "broker-b": 4}

        async def send() -> Any:
            async with Producer("cfg-perm", cluster.namesrv) as producer:
                return await producer.send(Message("CfgPermTopic", b"x"),
                                           queue=MessageQueue("CfgPermTopic", "broker-b", 0))

        try:
            cluster.call(send())
            raise AssertionError("a send to a broker without write permission succeeded")
        except TideMQError as exc:
            assert "permission" in str(exc).lower()
    finally:
        admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v",
              "6")
    assert eventually(lambda: _perms(cluster, "CfgPermTopic"),
                      lambda p: p.get("broker-b") == 6)["broker-b"] == 6


def test_namesrv_config(cluster: ThreadedCluster) -> None:
    got = admin(cluster, "getNamesrvConfig")
    assert list(got) == [cluster.namesrv]
    assert got[cluster.namesrv]["orderMessageEnable"] == "false"
    assert human(cluster, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v",
                 "true") == [["update", "name", "server", "config",
                              f"success![{cluster.namesrv}]"],
                             ["orderMessageEnable", ":", "true"]]
    try:
        assert cluster.cluster.namesrv.config.order_message_enable is True
        assert admin(cluster, "getNamesrvConfig")[cluster.namesrv][
            "orderMessageEnable"] == "true"
    finally:
        admin(cluster, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false")
    refused = admin(cluster, "updateNamesrvConfig", "-k", "listenPort", "-v", "1", code=1)
    assert "listenPort cannot change while the name server runs" in refused.stderr
    lines = human(cluster, "getNamesrvConfig")
    assert lines[0] == [f"============{cluster.namesrv}============"]


def test_update_topic_perm_keeps_the_rest(cluster: ThreadedCluster) -> None:
    create(cluster, "CfgTopicPerm", 3, "--attributes", "+queue.type=BatchCQ")
    out = admin(cluster, "updateTopicPerm", "-t", "CfgTopicPerm", "-p", "4", "-c",
                "DefaultCluster")
    assert sorted(c["brokerAddr"] for c in out["changes"]) == sorted(cluster.broker_addrs)
    assert {(c["oldPerm"], c["newPerm"]) for c in out["changes"]} == {(6, 4)}
    for broker in cluster.cluster.brokers:
        tc = broker.topics.get("CfgTopicPerm")
        assert tc is not None and tc.perm == 4
        assert (tc.read_queue_nums, tc.write_queue_nums) == (3, 3)
        assert tc.attributes == {"queue.type": "BatchCQ"}
    assert eventually(lambda: _perms(cluster, "CfgTopicPerm"),
                      lambda p: set(p.values()) == {4}) == {"broker-a": 4, "broker-b": 4}
    lines = human(cluster, "updateTopicPerm", "-t", "CfgTopicPerm", "-p", "6", "-b",
                  cluster.broker_addrs[0])
    assert lines == [["update", "topic", "perm", "from", "4", "to", "6", "in",
                      cluster.broker_addrs[0], "success."]]
    missing = admin(cluster, "updateTopicPerm", "-t", "CfgNoSuchTopic", "-p", "6", "-c",
                    "DefaultCluster", code=1)
    assert "TOPIC_NOT_EXIST" in missing.stderr


def test_wipe_and_add_write_perm(cluster: ThreadedCluster) -> None:
    create(cluster, "CfgWipe")
    wiped = admin(cluster, "wipeWritePerm", "-b", "broker-a")
    assert wiped["topicCounts"][cluster.namesrv] >= 1
    assert _perms(cluster, "CfgWipe") == {"broker-a": 4, "broker-b": 6}
    lines = human(cluster, "addWritePerm", "-b", "broker-a")
    assert lines[0][:5] == ["add", "write", "perm", "of", "broker[broker-a]"]
    assert int(lines[0][-1]) == wiped["topicCounts"][cluster.namesrv]
    assert _perms(cluster, "CfgWipe") == {"broker-a": 6, "broker-b": 6}


def test_topic_cluster_list(cluster: ThreadedCluster) -> None:
    create(cluster, "CfgClusters")
    assert admin(cluster, "topicClusterList", "-t", "CfgClusters") == ["DefaultCluster"]
    assert human(cluster, "topicClusterList", "-t", "CfgClusters") == [["DefaultCluster"]]
