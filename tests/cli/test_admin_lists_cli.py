"""``tidemq admin updateTopicList`` and ``updateSubGroupList`` against a real cluster: the
configs of a JSON file reach every broker asked, or, when one is refused, none of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin, route_of
from tests.cli.test_admin_groups_cli import human


def _file(tmp_path: Path, name: str, items: list[dict[str, object]]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(items))
    return str(path)


def test_update_topic_list(cluster: ThreadedCluster, tmp_path: Path) -> None:
    path = _file(tmp_path, "topics.json", [
        {"topicName": "ListTopicA", "readQueueNums": 3, "writeQueueNums": 3, "perm": 6},
        {"topicName": "ListTopicB", "readQueueNums": 2, "writeQueueNums": 2, "perm": 4,
         "order": True, "attributes": {"+message.type": "FIFO"}}])
    out = admin(cluster, "updateTopicList", "-c", "DefaultCluster", "-f", path)
    assert sorted(out["brokers"]) == sorted(cluster.broker_addrs)
    assert out["topics"] == ["ListTopicA", "ListTopicB"]
    for broker in cluster.cluster.brokers:
        a, b = broker.ctx.topics.get("ListTopicA"), broker.ctx.topics.get("ListTopicB")
        assert a is not None and b is not None
        assert (a.read_queue_nums, a.write_queue_nums, a.perm) == (3, 3, 6)
        assert (b.read_queue_nums, b.perm, b.order) == (2, 4, True)
        assert b.attributes == {"message.type": "FIFO"}
    route = route_of(cluster, "ListTopicA")
    assert {q["readQueueNums"] for q in route["queueDatas"]} == {3}

    again = _file(tmp_path, "again.json", [
        {"topicName": "ListTopicA", "readQueueNums": 5, "writeQueueNums": 5, "perm": 6},
        {"topicName": "ListTopicB", "readQueueNums": 2, "writeQueueNums": 2, "perm": 4,
         "attributes": {"-message.type": ""}}])
    lines = human(cluster, "updateTopicList", "-b", cluster.broker_addrs[0], "-f", again)
    assert lines == [["submit", "batch", "of", "topic", "config", "to",
                      cluster.broker_addrs[0], "success,", "please", "check", "the",
                      "result", "later."]]
    first, second = cluster.cluster.brokers
    assert first.ctx.topics.get("ListTopicA").read_queue_nums == 5  # type: ignore[union-attr]
    assert second.ctx.topics.get("ListTopicA").read_queue_nums == 3  # type: ignore[union-attr]
    assert first.ctx.topics.get("ListTopicB").attributes == {}  # type: ignore[union-attr]
    unsigned = _file(tmp_path, "unsigned.json", [
        {"topicName": "ListTopicB", "attributes": {"message.type": "FIFO"}}])
    bad = admin(cluster, "updateTopicList", "-b", cluster.broker_addrs[0], "-f", unsigned,
                code=1)
    assert "must start with + (set) or - (drop)" in bad.stderr


def test_update_topic_list_refuses_all_for_one_bad_config(cluster: ThreadedCluster,
                                                          tmp_path: Path) -> None:
    path = _file(tmp_path, "bad.json", [
        {"topicName": "ListTopicGood", "readQueueNums": 1, "writeQueueNums": 1},
        {"topicName": "ListTopicBad", "readQueueNums": 2000, "writeQueueNums": 1}])
    bad = admin(cluster, "updateTopicList", "-b", cluster.broker_addrs[0], "-f", path,
                code=1)
    assert "at most 1024 queues per topic" in bad.stderr
    assert cluster.cluster.brokers[0].ctx.topics.get("ListTopicGood") is None
    missing = admin(cluster, "updateTopicList", "-c", "DefaultCluster", "-f",
                    str(tmp_path / "none.json"), code=2)
    said = " ".join(re.sub(r"[\u2500-\u257f]", " ", missing.output).split())
    assert "does not exists" in said


def test_update_sub_group_list(cluster: ThreadedCluster, tmp_path: Path) -> None:
    path = _file(tmp_path, "groups.json", [
        {"groupName": "ListGroupA", "retryMaxTimes": 3, "consumeMessageOrderly": True},
        {"groupName": "ListGroupB", "consumeEnable": False}])
    out = admin(cluster, "updateSubGroupList", "-c", "DefaultCluster", "-f", path)
    assert sorted(out["brokers"]) == sorted(cluster.broker_addrs)
    for broker in cluster.cluster.brokers:
        groups = broker.ctx.subscription_groups.groups
        assert groups["ListGroupA"]["retryMaxTimes"] == 3
        assert groups["ListGroupA"]["consumeMessageOrderly"] is True
        assert groups["ListGroupB"]["consumeEnable"] is False
    got = admin(cluster, "getConsumerConfig", "-g", "ListGroupA")
    assert {g["subscriptionGroupConfig"]["retryMaxTimes"] for g in got} == {3}

    refused = _file(tmp_path, "refused.json", [
        {"groupName": "ListGroupC"}, {"groupName": "ListGroupD", "retryMaxTimes": "many"}])
    bad = admin(cluster, "updateSubGroupList", "-b", cluster.broker_addrs[0], "-f", refused,
                code=1)
    assert "retryMaxTimes" in bad.stderr
    assert "ListGroupC" not in cluster.cluster.brokers[0].ctx.subscription_groups.groups
