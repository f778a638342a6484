"""``tidemq admin dlqList``, ``dlqMessages`` and ``dlqResend`` against a real cluster: a
group gives up on three messages, which its DLQ then holds; the commands list the DLQ,
page its messages newest first, and have an online consumer of the group consume them
again, in tables and JSON."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner
from tests.cli.test_admin_cli import admin
from tests.console.test_browser_dlq import forget
from tests.console.test_browser_messages import OnlineConsumer
from tests.console.test_dlq import give_up

from tidemq.cli.main import app
from tidemq.client import AdminClient, Message, MessageQueue, Producer

TOPIC = "Refunds"
GROUP = "refund-workers"
runner = CliRunner()


@pytest.fixture(scope="module")
def buried(cluster: ThreadedCluster) -> list[str]:
    """``refund 0`` .. ``refund 2`` in GROUP's DLQ, oldest first; their bodies."""
    bodies = [f"refund {i}" for i in range(3)]

    async def bury() -> None:
        async with AdminClient(cluster.namesrv) as a:
            await a.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        for broker in cluster.cluster.brokers:
            assert broker.registrar is not None
            await broker.registrar.register_all()
        mq = MessageQueue(TOPIC, "broker-a", 0)
        async with Producer("refund-producers", cluster.namesrv) as producer:
            for body in bodies:
                await producer.send(Message(TOPIC, body.encode(), {"KEYS": body[-1]}),
                                    queue=mq)
        await give_up(cluster.namesrv, GROUP, mq, len(bodies))

    cluster.call(bury())
    for broker in cluster.cluster.brokers:
        assert broker.store.wait_dispatched()
    return bodies


@pytest.fixture
def consumer(cluster: ThreadedCluster) -> Iterator[OnlineConsumer]:
    online = OnlineConsumer(cluster.namesrv, GROUP, "RefundsOwn")
    try:
        yield online
    finally:
        online.close()


def test_dlq_list(cluster: ThreadedCluster, buried: list[str]) -> None:
    assert {"group": GROUP, "topic": f"%DLQ%{GROUP}", "messages": 3} in admin(
        cluster, "dlqList")
    result = runner.invoke(app, ["admin", "dlqList", "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["#Group", "#Topic", "#Messages"]
    assert [GROUP, f"%DLQ%{GROUP}", "3"] in [line.split() for line in lines[1:]]


def test_dlq_messages_newest_first_and_paged(cluster: ThreadedCluster,
                                             buried: list[str]) -> None:
    doc = admin(cluster, "dlqMessages", "-g", GROUP)
    assert (doc["topic"], doc["total"]) == (f"%DLQ%{GROUP}", 3)
    assert [m["body"] for m in doc["messages"]] == buried[::-1]
    assert {(m["topic"], m["bodyEncoding"], m["brokerName"]) for m in doc["messages"]} == {
        (TOPIC, "utf-8", "broker-a")}
    assert [m["keys"] for m in doc["messages"]] == [["2"], ["1"], ["0"]]
    second = admin(cluster, "dlqMessages", "-g", GROUP, "-p", "2", "-s", "2")
    assert [m["body"] for m in second["messages"]] == [buried[0]]
    assert second["messages"][0]["msgId"] == doc["messages"][2]["msgId"]

    result = runner.invoke(app, ["admin", "dlqMessages", "-g", GROUP, "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"3 messages in %DLQ%{GROUP}; page 1, 3 shown"
    assert lines[1].split()[:3] == ["#MsgId", "#Topic", "#ReconsumeTimes"]
    assert [line.split()[0] for line in lines[2:]] == [m["msgId"] for m in doc["messages"]]


def test_dlq_resend_selected_then_all(cluster: ThreadedCluster, buried: list[str],
                                      consumer: OnlineConsumer) -> None:
    letters = admin(cluster, "dlqMessages", "-g", GROUP)["messages"]
    oldest = letters[-1]["msgId"]
    doc = admin(cluster, "dlqResend", "-g", GROUP, "-d", consumer.client_id, "-i", oldest)
    assert doc == {"group": GROUP, "clientId": consumer.client_id, "tried": 1,
                   "consumed": 1, "failures": []}
    assert consumer.wait_for(1) == [buried[0].encode()]

    result = runner.invoke(app, ["admin", "dlqResend", "-g", GROUP, "-d", consumer.client_id,
                                 "--all", "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "3 tried: 3 consumed, 0 failed"
    assert sorted(consumer.wait_for(4)) == sorted([buried[0].encode(),
                                                   *(b.encode() for b in buried)])
    assert admin(cluster, "dlqMessages", "-g", GROUP)["total"] == 3  # they stay


def test_dlq_resend_to_a_consumer_not_online_fails_naming_it(cluster: ThreadedCluster,
                                                             buried: list[str]) -> None:
    letters = admin(cluster, "dlqMessages", "-g", GROUP)["messages"]
    result = admin(cluster, "dlqResend", "-g", GROUP, "-d", "10.0.0.9@gone",
                   "-i", letters[0]["msgId"], code=1)
    assert '"consumed": 0' in result.stdout
    assert letters[0]["msgId"] in result.stdout and "10.0.0.9@gone" in result.stdout


def test_dlq_resend_needs_ids_or_all(cluster: ThreadedCluster) -> None:
    for extra in ([], ["-i", "X", "--all"]):
        result = runner.invoke(app, ["admin", "dlqResend", "-g", GROUP, "-d", "c",
                                     *extra, "-n", cluster.namesrv])
        assert result.exit_code == 2
        assert "-i" in result.output and "--all" in result.output


def test_dlq_resend_before_the_name_servers_route_the_dlq(cluster: ThreadedCluster,
                                                          buried: list[str],
                                                          consumer: OnlineConsumer) -> None:
    """A DLQ is created at the first message a group gives up on, and routed once its
    broker's registration reaches the name servers: until then, its dead letters are
    listed and resent all the same."""
    cluster.call(forget(cluster.namesrv, f"%DLQ%{GROUP}"))
    newest = admin(cluster, "dlqMessages", "-g", GROUP)["messages"][0]["msgId"]
    doc = admin(cluster, "dlqResend", "-g", GROUP, "-d", consumer.client_id, "-i", newest)
    assert (doc["consumed"], doc["failures"]) == (1, [])
    assert consumer.wait_for(1) == [buried[-1].encode()]
