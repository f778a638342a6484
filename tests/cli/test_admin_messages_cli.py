"""``tidemq admin`` printMsg, printMsgByQueue and queryMsgByUniqueKey against a real
two-broker cluster."""

from __future__ import annotations

from typing import Any

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin, create, eventually
from tests.cli.test_admin_groups_cli import human

from tidemq.client import (
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
)

TOPIC = "MsgPrint"


@pytest.fixture(scope="module")
def sent(cluster: ThreadedCluster) -> list[Any]:
    """Five messages on broker-a queue 0 (three tagA, two tagB), one tagA on broker-b 1."""
    create(cluster, TOPIC)
    plan = [("broker-a", 0, "tagA")] * 3 + [("broker-a", 0, "tagB")] * 2 + [
        ("broker-b", 1, "tagA")]

    async def send() -> list[Any]:
        async with Producer("msg-print", cluster.namesrv) as producer:
            return [await producer.send(Message(TOPIC, f"body-{i}".encode(), {"TAGS": tag}),
                                        queue=MessageQueue(TOPIC, broker, qid))
                    for i, (broker, qid, tag) in enumerate(plan)]

    results = cluster.call(send())
    for broker in cluster.cluster.brokers:
        assert broker.store.wait_dispatched()
    return results


def test_print_msg(cluster: ThreadedCluster, sent: list[Any]) -> None:
    every = admin(cluster, "printMsg", "-t", TOPIC)
    assert sorted(m["body"] for m in every) == [f"body-{i}" for i in range(6)]
    assert {m["msgId"] for m in every} == {r.msg_id for r in sent}
    tagged = admin(cluster, "printMsg", "-t", TOPIC, "-s", "tagB")
    assert sorted(m["body"] for m in tagged) == ["body-3", "body-4"]

    stamps = sorted(m["storeTimestamp"] for m in every)
    cut = stamps[3]
    later = admin(cluster, "printMsg", "-t", TOPIC, "-b", str(cut))
    assert sorted(m["body"] for m in later) == sorted(
        m["body"] for m in every if m["storeTimestamp"] >= cut)
    earlier = admin(cluster, "printMsg", "-t", TOPIC, "-e", str(cut))
    assert sorted(m["body"] for m in earlier) == sorted(
        m["body"] for m in every if m["storeTimestamp"] <= cut)
    assert admin(cluster, "printMsg", "-t", TOPIC, "-b", str(stamps[-1] + 60_000)) == []

    lines = human(cluster, "printMsg", "-t", TOPIC)
    msg_lines = [line for line in lines if line[0] == "MSGID:"]
    assert len(msg_lines) == 6
    assert any(line[-2:] == ["BODY:", "body-0"] for line in msg_lines)
    ranges = [line[:2] for line in lines if line[0].startswith("minOffset")
              and "brokerName=broker-a," in line and "queueId=0]" in line]
    assert ranges == [["minOffset=0,", "maxOffset=5,"]]
    no_body = human(cluster, "printMsg", "-t", TOPIC, "-d", "false")
    # as mqadmin: a body left out says so, and does not read as an empty one
    assert all(line[-4:] == ["BODY:", "NOT", "PRINT", "BODY"]
               for line in no_body if line[0] == "MSGID:")


def test_print_msg_by_queue(cluster: ThreadedCluster, sent: list[Any]) -> None:
    counted = admin(cluster, "printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "0",
                    "-f", "true")
    assert (counted["count"], counted["minOffset"], counted["maxOffset"]) == (5, 0, 5)
    assert counted["tags"] == {"tagA": 3, "tagB": 2}
    assert "messages" not in counted
    shown = admin(cluster, "printMsgByQueue", "-t", TOPIC, "-a", "broker-b", "-i", "1",
                  "-p", "true")
    assert [m["body"] for m in shown["messages"]] == ["body-5"]

    lines = human(cluster, "printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "0",
                  "-f", "true", "-p", "true", "-d", "true")
    assert ["Tag:", "tagA", "Count:", "3"] in lines
    assert ["Tag:", "tagB", "Count:", "2"] in lines
    assert [line[-1] for line in lines if line[0] == "MSGID:"] == [
        f"body-{i}" for i in range(5)]
    without = human(cluster, "printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "0",
                    "-p", "true")
    assert [line[-3:] for line in without if line[0] == "MSGID:"] == [
        ["NOT", "PRINT", "BODY"]] * 5


def test_query_msg_by_unique_key(cluster: ThreadedCluster, sent: list[Any]) -> None:
    target = sent[2]
    found = eventually(
        lambda: admin(cluster, "queryMsgByUniqueKey", "-i", target.msg_id, "-t", TOPIC),
        lambda m: m.get("body") == "body-2")  # the key index is built after dispatch
    assert (found["queueOffset"], found["brokerName"] or "broker-a") == (2, "broker-a")
    every = admin(cluster, "queryMsgByUniqueKey", "-i", target.msg_id, "-t", TOPIC, "-a")
    assert [m["body"] for m in every] == ["body-2"]
    lines = human(cluster, "queryMsgByUniqueKey", "-i", target.msg_id, "-t", TOPIC)
    assert ["Topic:", TOPIC] in lines and ["Tags:", "[tagA]"] in lines
    assert ["Message", "Body:", "body-2"] in lines
    missing = admin(cluster, "queryMsgByUniqueKey", "-i", "0" * 32, "-t", TOPIC, code=1)
    assert "0" * 32 in missing.stderr and "error" in missing.stderr


def test_query_msg_by_unique_key_resends_to_one_consumer(cluster: ThreadedCluster,
                                                         sent: list[Any]) -> None:
    """mqadmin's ``-g GROUP -d CLIENT_ID``: the consumer's listener gets the message and
    its answer is printed as mqadmin prints it."""
    target = sent[4]
    got: list[bytes] = []

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("msg-resend", cluster.namesrv, listener=listener)
    consumer.subscribe("MsgResendOther")  # the message reaches it only by the resend
    cluster.call(consumer.start())
    try:
        assert not cluster.call(consumer.instance.send_heartbeat(cluster.broker_addrs))
        client_id = consumer.instance.client_id
        eventually(lambda: admin(cluster, "queryMsgByUniqueKey", "-i", target.msg_id,
                                 "-t", TOPIC), lambda m: m.get("body") == "body-4")
        lines = human(cluster, "queryMsgByUniqueKey", "-i", target.msg_id, "-t", TOPIC,
                      "-g", "msg-resend", "-d", client_id)
        [line] = lines
        assert line[:4] == ["ConsumeMessageDirectlyResult", "[order=false,",
                            "autoCommit=true,", "consumeResult=CR_SUCCESS,"]
        assert line[4] == "remark=null," and line[5].startswith("spentTimeMills=")
        assert got == [b"body-4"]

        as_json = admin(cluster, "queryMsgById", "-i", target.offset_msg_id,
                        "-g", "msg-resend", "-d", client_id)
        assert as_json["consumeResult"] == "CR_SUCCESS" and as_json["order"] is False
        assert got == [b"body-4", b"body-4"]

        gone = admin(cluster, "queryMsgByUniqueKey", "-i", target.msg_id, "-t", TOPIC,
                     "-g", "msg-resend", "-d", "10.1.1.1@gone@7", code=1)
        assert "10.1.1.1@gone@7" in gone.stderr and "not online" in gone.stderr
        half = admin(cluster, "queryMsgByUniqueKey", "-i", target.msg_id, "-t", TOPIC,
                     "-g", "msg-resend", code=2)
        assert "go together" in half.output
    finally:
        cluster.call(consumer.close())
