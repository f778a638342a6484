"""``tidemq admin startMonitoring`` against a real cluster: a round reports a consuming
group's backlog per topic as upstream's monitor logs it, and a group whose consumers
subscribe differently."""

from __future__ import annotations

import re

from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin, create
from tests.cli.test_admin_groups_cli import Online, human

from tidemq.client import MessageQueue, PullConsumer
from tidemq.client.config import ClientConfig, parse_namesrv


def test_start_monitoring_reports_backlog_and_different_subscriptions(
        cluster: ThreadedCluster) -> None:
    create(cluster, "MonitoredTopic", 2)
    online = Online(cluster, "MonitoredTopic", "MonitoredGroup", "MonitoredProducer")
    other = PullConsumer("MonitoredGroup", config=ClientConfig(
        namesrv_addr=parse_namesrv(cluster.namesrv), instance_name="other"))
    other.subscribe("MonitoredTopic", "tagC")
    try:
        a0 = MessageQueue("MonitoredTopic", "broker-a", 0)
        online.send(a0, 5)
        online.send(MessageQueue("MonitoredTopic", "broker-b", 1), 2)
        online.commit({a0: 1, MessageQueue("MonitoredTopic", "broker-b", 1): 2})
        got = admin(cluster, "startMonitoring", "--rounds", "1")
        mine = [u for u in got["undoneMsgs"] if u["consumerGroup"] == "MonitoredGroup"]
        assert [(u["topic"], u["undoneMsgsTotal"], u["undoneMsgsSingleMQ"]) for u in mine] == [
            ("MonitoredTopic", 4, 4)]
        assert mine[0]["undoneMsgsDelayTimeMills"] >= 0
        assert "MonitoredGroup" not in got["subscriptionDifferent"]

        cluster.call(other.start())
        assert not cluster.call(other.instance.send_heartbeat(cluster.broker_addrs))
        lines = [" ".join(w) for w in human(cluster, "startMonitoring", "--rounds", "1")]
        assert lines[0] == "[MONITOR] =========================================beginRound"
        assert lines[-1] == "[MONITOR] =========================================endRound"
        assert ("[MONITOR] reportUndoneMsgs: UndoneMsgs [consumerGroup=MonitoredGroup, "
                "topic=MonitoredTopic, undoneMsgsTotal=4, undoneMsgsSingleMQ=4, "
                "undoneMsgsDelayTimeMills=") in "\n".join(lines)
        assert any(re.fullmatch(r"\[MONITOR\] \[NOTIFY\] reportConsumerRunningInfo: "
                                r"ConsumerGroup: MonitoredGroup, Subscription different", line)
                   for line in lines), lines
    finally:
        cluster.call(other.close(commit=False))
        online.close()
