"""``tidemq admin exportConfigs``, ``exportMetadata`` and ``exportMetrics`` against a real
cluster: the files hold what the brokers hold, in upstream's shapes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin, create
from tests.cli.test_admin_groups_cli import Online, human

from tidemq.client import MessageQueue


def test_export_configs(cluster: ThreadedCluster, tmp_path: Path) -> None:
    out = admin(cluster, "exportConfigs", "-c", "DefaultCluster", "-f", str(tmp_path / "x"))
    assert out == {"path": str(tmp_path / "x" / "configs.json")}
    doc = json.loads((tmp_path / "x" / "configs.json").read_text())
    assert doc["clusterScale"] == {"namesrvSize": 1, "masterBrokerSize": 2,
                                   "slaveBrokerSize": 0}
    a = doc["brokerConfigs"]["broker-a"]
    assert a["brokerName"] == "broker-a" and a["brokerClusterName"] == "DefaultCluster"
    assert a["autoCreateTopicEnable"] == "true" and "brokerRole" in a
    assert set(a) <= {"brokerClusterName", "brokerId", "brokerName", "brokerRole",
                      "fileReservedTime", "filterServerNums", "flushDiskType",
                      "maxMessageSize", "messageDelayLevel", "msgTraceTopicName",
                      "slaveReadEnable", "traceOn", "traceTopicEnable", "useTLS",
                      "autoCreateTopicEnable", "autoCreateSubscriptionGroup"}
    lines = human(cluster, "exportConfigs", "-c", "DefaultCluster", "-f", str(tmp_path))
    assert lines == [["export", str(tmp_path / "configs.json"), "success"]]


def test_export_metadata(cluster: ThreadedCluster, tmp_path: Path) -> None:
    create(cluster, "ExportTopic", 3)
    admin(cluster, "updateSubGroup", "-g", "ExportGroup", "-c", "DefaultCluster", "-q", "2")
    path = admin(cluster, "exportMetadata", "-c", "DefaultCluster", "-f", str(tmp_path))["path"]
    assert path == str(tmp_path / "metadata.json")
    doc = json.loads(Path(path).read_text())
    assert set(doc) == {"topicConfigTable", "subscriptionGroupTable", "exportTime"}
    topic = doc["topicConfigTable"]["ExportTopic"]
    assert (topic["readQueueNums"], topic["writeQueueNums"]) == (6, 6)  # two brokers
    assert doc["subscriptionGroupTable"]["ExportGroup"]["retryQueueNums"] == 4
    assert not {"TBW102", "DefaultCluster", "broker-a", "SCHEDULE_TOPIC_XXXX"} & set(
        doc["topicConfigTable"])
    assert not any(t.startswith("%RETRY%") for t in doc["topicConfigTable"])
    assert "TOOLS_CONSUMER" not in doc["subscriptionGroupTable"]

    addr = cluster.broker_addrs[0]
    admin(cluster, "exportMetadata", "-b", addr, "-t", "-f", str(tmp_path))
    one = json.loads((tmp_path / "topic.json").read_text())
    assert one["topicConfigTable"]["ExportTopic"]["readQueueNums"] == 3
    assert "dataVersion" in one
    admin(cluster, "exportMetadata", "-b", addr, "-g", "-f", str(tmp_path))
    groups = json.loads((tmp_path / "subscriptionGroup.json").read_text())
    assert groups["subscriptionGroupTable"]["ExportGroup"]["retryQueueNums"] == 2
    admin(cluster, "exportMetadata", "-c", "DefaultCluster", "-t", "-f", str(tmp_path / "t"))
    assert set(json.loads((tmp_path / "t" / "topic.json").read_text())) == {
        "topicConfigTable", "exportTime"}
    admin(cluster, "exportMetadata", "-b", addr, "-f", str(tmp_path), code=2)


def test_export_metrics(cluster: ThreadedCluster, tmp_path: Path) -> None:
    create(cluster, "MetricsTopic", 1)
    online = Online(cluster, "MetricsTopic", "MetricsGroup", "MetricsProducer")
    try:
        online.send(MessageQueue("MetricsTopic", "broker-a", 0), 3)
        admin(cluster, "exportMetrics", "-c", "DefaultCluster", "-f", str(tmp_path))
    finally:
        online.close()
    doc = json.loads((tmp_path / "metrics.json").read_text())
    report = doc["evaluateReport"]
    assert set(report) == {"broker-a", "broker-b"}
    a = report["broker-a"]
    assert set(a) == {"runtimeEnv", "runtimeQuota", "runtimeVersion"}
    assert set(a["runtimeQuota"]) == {"diskRatio", "tps", "oneDayNum"}
    assert a["runtimeVersion"] == {"rocketmqVersion": "V5_3_3",
                                   "clientInfo": ["PYTHON%V5_3_3"]}  # MetricsGroup's
    assert float(a["runtimeQuota"]["diskRatio"]["commitLogDiskRatio"]) > 0
    totals = doc["totalData"]
    assert set(totals["totalTps"]) == {"totalNormalInTps", "totalNormalOutTps",
                                       "totalTransInTps", "totalScheduleInTps"}
    assert totals["totalOneDayNum"]["normalOneDayInNum"] == sum(
        b["runtimeQuota"]["oneDayNum"]["normalOneDayInNum"] for b in report.values())
