"""``tidemq admin`` through typer's CliRunner against a real two-broker cluster."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner

from tidemq.cli.main import app
from tidemq.client import Message, MessageQueue, Producer
from tidemq.net.ports import free_port

runner = CliRunner()
T = TypeVar("T")


def admin(cluster: ThreadedCluster, *args: str, code: int = 0) -> Any:
    """Run ``tidemq admin ARGS -n NAMESRV --json``; the parsed JSON on stdout."""
    result = runner.invoke(app, ["admin", *args, "-n", cluster.namesrv, "--json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout) if code == 0 else result


def eventually(probe: Callable[[], T], ok: Callable[[T], bool], timeout: float = 10.0) -> T:
    """Ask ``probe`` until ``ok`` holds: the name server learns of topics from the brokers'
    registrations and the key index is built by the dispatcher; neither has an event the
    CLI could wait on."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def route_of(cluster: ThreadedCluster, topic: str) -> dict[str, Any]:
    def probe() -> dict[str, Any]:
        result = runner.invoke(app, ["admin", "topicRoute", "-t", topic, "-n",
                                     cluster.namesrv, "--json"])
        return json.loads(result.stdout) if result.exit_code == 0 else {}

    route = eventually(probe, lambda r: len(r.get("queueDatas", [])) == 2)
    assert len(route["queueDatas"]) == 2, route
    return route


def create(cluster: ThreadedCluster, topic: str, queues: int = 2, *extra: str) -> dict[str, Any]:
    out = admin(cluster, "updateTopic", "-t", topic, "-r", str(queues), "-w", str(queues),
                *extra)
    assert sorted(out["brokers"]) == sorted(cluster.broker_addrs)
    return route_of(cluster, topic)




# ---------------------------------------------------------------------- topics


def test_update_topic_route_list_and_status(cluster: ThreadedCluster) -> None:
    route = create(cluster, "CliOrders", 4)
    assert {q["brokerName"] for q in route["queueDatas"]} == {"broker-a", "broker-b"}
    assert all(q["readQueueNums"] == 4 and q["writeQueueNums"] == 4 and q["perm"] == 6
               for q in route["queueDatas"])
    assert {b["brokerAddrs"]["0"] for b in route["brokerDatas"]} == set(cluster.broker_addrs)

    assert "CliOrders" in admin(cluster, "topicList")
    status = admin(cluster, "topicStatus", "-t", "CliOrders")
    assert len(status) == 8
    assert {(s["brokerName"], s["queueId"]) for s in status} == {
        (b, q) for b in ("broker-a", "broker-b") for q in range(4)}
    assert all(s["minOffset"] == 0 and s["maxOffset"] == 0 for s in status)


def test_namesrv_comes_from_the_environment(cluster: ThreadedCluster) -> None:
    result = runner.invoke(app, ["admin", "clusterList"],
                           env={"TIDEMQ_NAMESRV": cluster.namesrv})
    assert result.exit_code == 0, result.output
    assert "broker-a" in result.stdout and "broker-b" in result.stdout


def test_update_topic_on_one_broker_with_batch_cq(cluster: ThreadedCluster) -> None:
    addr = cluster.broker_addrs[1]
    out = admin(cluster, "updateTopic", "-t", "CliBatch", "-b", addr, "-r", "2", "-w", "2",
                "--attributes", "+queue.type=BatchCQ", "-o", "false")
    assert out["brokers"] == [addr]
    assert out["attributes"] == {"queue.type": "BatchCQ"}
    config = cluster.cluster.brokers[1].topics.get("CliBatch")
    assert config is not None and config.attributes == {"queue.type": "BatchCQ"}
    assert cluster.cluster.brokers[0].topics.get("CliBatch") is None

    def probe() -> Any:
        result = runner.invoke(app, ["admin", "topicRoute", "-t", "CliBatch", "-n",
                                     cluster.namesrv, "--json"])
        return json.loads(result.stdout) if result.exit_code == 0 else {}

    route = eventually(probe, lambda r: bool(r.get("queueDatas")))
    assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-b"]
    sent = admin(cluster, "sendMessage", "-t", "CliBatch", "-p", "batched")
    assert sent["brokerName"] == "broker-b"
    got = admin(cluster, "consumeMessage", "-t", "CliBatch", "--timeout", "0.5")
    assert [m["body"] for m in got] == ["batched"]


def test_human_output_is_tables(cluster: ThreadedCluster) -> None:
    ns = ["-n", cluster.namesrv]
    created = runner.invoke(app, ["admin", "updateTopic", "-t", "CliHuman", *ns])
    assert created.exit_code == 0, created.output
    assert created.stdout.count("success") == 2
    route_of(cluster, "CliHuman")
    status = runner.invoke(app, ["admin", "topicStatus", "-t", "CliHuman", *ns])
    assert status.exit_code == 0 and "broker-b" in status.stdout and "#Max Offset" in status.stdout
    listing = runner.invoke(app, ["admin", "topicList", *ns])
    assert "CliHuman" in listing.stdout.split()


def test_update_topic_prints_the_topic_config_as_mqadmin(cluster: ThreadedCluster) -> None:
    """mqadmin prints Java's TopicConfig: the permission as RW-, order as false."""
    out = _human(cluster, "updateTopic", "-t", "CliConfigLine", "-r", "2", "-w", "3",
                 "-p", "4", "-a", "+queue.type=BatchCQ").splitlines()
    assert out[-1] == ("TopicConfig [topicName=CliConfigLine, readQueueNums=2, "
                       "writeQueueNums=3, perm=R--, topicFilterType=SINGLE_TAG, "
                       "topicSysFlag=0, order=false, attributes={+queue.type=BatchCQ}]")


def test_delete_topic(cluster: ThreadedCluster) -> None:
    create(cluster, "CliGone")
    out = admin(cluster, "deleteTopic", "-t", "CliGone", "-c", "DefaultCluster")
    assert sorted(out["brokers"]) == sorted(cluster.broker_addrs)
    topics = eventually(lambda: admin(cluster, "topicList"), lambda t: "CliGone" not in t)
    assert "CliGone" not in topics
    assert all(b.topics.get("CliGone") is None for b in cluster.cluster.brokers)


# ---------------------------------------------------------------------- cluster


def test_cluster_list_and_broker_status(cluster: ThreadedCluster) -> None:
    rows = admin(cluster, "clusterList")
    assert [(r["cluster"], r["brokerName"], r["brokerId"]) for r in rows] == [
        ("DefaultCluster", "broker-a", 0), ("DefaultCluster", "broker-b", 0)]
    assert [r["address"] for r in rows] == cluster.broker_addrs
    assert all(r["version"].startswith("TideMQ") for r in rows)
    # -m: messages put and got today (the cluster started today) and yesterday (none)
    assert all(r["inTotalYest"] == 0 == r["outTotalYest"] for r in rows)
    create(cluster, "CliDayTotals", 1)
    admin(cluster, "sendMessage", "-t", "CliDayTotals", "-p", "one")
    after = admin(cluster, "clusterList")
    assert sum(r["inTotalToday"] for r in after) == sum(r["inTotalToday"] for r in rows) + 1
    more = runner.invoke(app, ["admin", "clusterList", "-m", "-n", cluster.namesrv])
    assert more.exit_code == 0 and "InTotalToday" in more.stdout

    status = admin(cluster, "brokerStatus", "-b", cluster.broker_addrs[0])
    assert status["brokerName"] == "broker-a"
    assert status["brokerAddr"] == cluster.broker_addrs[0]
    human = runner.invoke(app, ["admin", "brokerStatus", "-b", cluster.broker_addrs[1]])
    assert human.exit_code == 0 and "broker-b" in human.stdout


def test_cluster_filters_take_mqadmins_c(cluster: ThreadedCluster) -> None:
    """clusterList, brokerStatus and topicStatus take mqadmin's -c: the brokers of one
    cluster; a cluster the name servers do not know is an error naming the known ones."""
    def brokers(*args: str) -> list[tuple[str, str, int, str]]:
        """Who the listing names: its rates move between two calls, as messages age."""
        return [(r["cluster"], r["brokerName"], r["brokerId"], r["address"])
                for r in admin(cluster, "clusterList", *args)]

    assert brokers("-c", "DefaultCluster") == brokers() == [
        ("DefaultCluster", name, 0, addr)
        for name, addr in zip(("broker-a", "broker-b"), cluster.broker_addrs, strict=True)]
    every = admin(cluster, "brokerStatus", "-c", "DefaultCluster")
    assert sorted(every) == sorted(cluster.broker_addrs)
    assert {t["brokerName"] for t in every.values()} == {"broker-a", "broker-b"}
    create(cluster, "CliStatusC")
    assert admin(cluster, "topicStatus", "-t", "CliStatusC", "-c", "DefaultCluster") == \
        admin(cluster, "topicStatus", "-t", "CliStatusC")
    for command in (("clusterList",), ("brokerStatus",), ("topicStatus", "-t", "CliStatusC")):
        unknown = admin(cluster, *command, "-c", "Elsewhere", code=1)
        assert "cluster 'Elsewhere' is unknown; the name servers know DefaultCluster" in \
            unknown.stderr
    neither = admin(cluster, "brokerStatus", code=2)
    assert "give one of -b (a broker address) and -c (a cluster)" in neither.output


# ---------------------------------------------------------------------- messages


def test_send_query_and_consume_round_trip(cluster: ThreadedCluster) -> None:
    create(cluster, "CliRound")
    sent = admin(cluster, "sendMessage", "-t", "CliRound", "-p", "hello", "-k", "order-1",
                 "-c", "tagA", "-b", "broker-a", "-i", "1")
    assert sent["status"] == "SEND_OK"
    assert (sent["brokerName"], sent["queueId"], sent["queueOffset"]) == ("broker-a", 1, 0)
    for body in ("second", "third"):
        assert admin(cluster, "sendMessage", "-t", "CliRound", "-p", body,
                     "-b", "broker-b", "-i", "0")["status"] == "SEND_OK"

    at = admin(cluster, "queryMsgByOffset", "-t", "CliRound", "-b", "broker-a", "-i", "1",
               "-o", "0")
    assert (at["body"], at["tags"], at["keys"], at["msgId"]) == (
        "hello", "tagA", ["order-1"], sent["msgId"])
    by_offset_id = admin(cluster, "queryMsgById", "-i", sent["offsetMsgId"])
    assert by_offset_id["body"] == "hello" and by_offset_id["queueOffset"] == 0
    by_key = eventually(lambda: admin(cluster, "queryMsgByKey", "-t", "CliRound",
                                      "-k", "order-1"), lambda found: len(found) == 1)
    assert [m["body"] for m in by_key] == ["hello"]
    # -c: the brokers of one cluster; one the topic has no broker in is named as such
    assert admin(cluster, "queryMsgByKey", "-t", "CliRound", "-k", "order-1",
                 "-c", "DefaultCluster") == by_key
    elsewhere = admin(cluster, "queryMsgByKey", "-t", "CliRound", "-k", "order-1",
                      "-c", "Elsewhere", code=1)
    assert "has no broker in cluster Elsewhere" in elsewhere.output
    unique = admin(cluster, "queryMsgByUniqueKey", "-i", sent["msgId"], "-t", "CliRound",
                   "-c", "DefaultCluster")
    assert unique["body"] == "hello"
    by_uniq = admin(cluster, "queryMsgById", "-i", sent["msgId"], "-t", "CliRound")
    assert by_uniq["body"] == "hello"

    everything = admin(cluster, "consumeMessage", "-t", "CliRound", "-c", "10",
                       "--timeout", "0.5")
    assert sorted(m["body"] for m in everything) == ["hello", "second", "third"]
    one_queue = admin(cluster, "consumeMessage", "-t", "CliRound", "-b", "broker-b",
                      "-i", "0", "-o", "1", "--timeout", "0.5")
    assert [(m["body"], m["queueOffset"]) for m in one_queue] == [("third", 1)]
    first = admin(cluster, "consumeMessage", "-t", "CliRound", "-c", "1", "--timeout", "5")
    assert len(first) == 1

    human = runner.invoke(app, ["admin", "consumeMessage", "-t", "CliRound", "-n",
                                cluster.namesrv, "--timeout", "0.5"])
    assert human.exit_code == 0, human.output
    assert "body=hello" in human.stdout and "3 messages" in human.stderr
    single = runner.invoke(app, ["admin", "consumeMessage", "-t", "CliRound", "-n",
                                 cluster.namesrv, "-c", "1", "--timeout", "5"])
    assert single.exit_code == 0, single.output
    assert single.stderr.strip() == "1 message"


def test_message_commands_take_mqadmins_time_window_and_count(
        cluster: ThreadedCluster) -> None:
    """consumeMessage -s/-e and queryMsgByKey -b/-e/-m, as mqadmin names them: the
    window holds what was stored in it, and a consume past -e ends though the queue has
    more."""
    create(cluster, "CliWindow")

    def send(body: str) -> dict[str, Any]:
        sent = admin(cluster, "sendMessage", "-t", "CliWindow", "-p", body, "-k", "w",
                     "-b", "broker-a", "-i", "0")
        return admin(cluster, "queryMsgByOffset", "-t", "CliWindow", "-b", "broker-a",
                     "-i", "0", "-o", str(sent["queueOffset"]))

    first = send("early")
    while time.time() * 1000 <= first["storeTimestamp"]:  # the next store time is later
        time.sleep(0.001)
    later = send("late")
    assert later["storeTimestamp"] > first["storeTimestamp"]
    t1, t2 = str(first["storeTimestamp"]), str(later["storeTimestamp"])

    def bodies(*args: str) -> list[str]:
        return [m["body"] for m in admin(cluster, *args)]

    assert bodies("consumeMessage", "-t", "CliWindow", "-e", t1, "--timeout", "5") == [
        "early"]
    assert bodies("consumeMessage", "-t", "CliWindow", "-s", t2, "--timeout", "0.5") == [
        "late"]
    assert bodies("consumeMessage", "-t", "CliWindow", "-b", "broker-a", "-i", "0",
                  "-s", t1, "-e", t2, "--timeout", "0.5") == ["early", "late"]
    eventually(lambda: admin(cluster, "queryMsgByKey", "-t", "CliWindow", "-k", "w"),
               lambda found: len(found) == 2)
    assert bodies("queryMsgByKey", "-t", "CliWindow", "-k", "w", "-e", t1) == ["early"]
    assert bodies("queryMsgByKey", "-t", "CliWindow", "-k", "w", "-b", t2) == ["late"]
    assert len(admin(cluster, "queryMsgByKey", "-t", "CliWindow", "-k", "w", "-m", "1")) == 1
    none = admin(cluster, "queryMsgTraceById", "-i", "0" * 32, "-c", "5", code=1)
    assert "RMQ_SYS_TRACE_TOPIC" in none.stderr  # -c was taken: the lookup ran


def test_consume_an_empty_topic_ends_after_the_timeout(cluster: ThreadedCluster) -> None:
    create(cluster, "CliEmpty")
    t0 = time.monotonic()
    assert admin(cluster, "consumeMessage", "-t", "CliEmpty", "--timeout", "0.3") == []
    assert time.monotonic() - t0 < 10


def test_binary_bodies_come_back_as_base64(cluster: ThreadedCluster) -> None:
    create(cluster, "CliBinary")

    async def send_binary() -> str:
        async with Producer("cli-test", cluster.namesrv) as producer:
            result = await producer.send(Message("CliBinary", b"\xff\x00\xfe"))
            return result.offset_msg_id

    found = admin(cluster, "queryMsgById", "-i", cluster.call(send_binary()))
    assert "body" not in found
    assert base64.b64decode(found["bodyBase64"]) == b"\xff\x00\xfe"
    plain = admin(cluster, "sendMessage", "-t", "CliBinary", "-p", "plain")
    assert admin(cluster, "queryMsgById", "-i", plain["offsetMsgId"])["body"] == "plain"


# ---------------------------------------------------------------------- failures


def _one_line_error(result: Any, *words: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0], lines[0]


def test_connection_refused_is_one_line(cluster: ThreadedCluster) -> None:
    dead = f"127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["admin", "topicList", "-n", dead])
    _one_line_error(result, dead)
    status = runner.invoke(app, ["admin", "brokerStatus", "-b", dead, "-n", cluster.namesrv])
    _one_line_error(status, dead)


def test_unknown_cluster_and_missing_route(cluster: ThreadedCluster) -> None:
    unknown = runner.invoke(app, ["admin", "updateTopic", "-t", "CliX", "-c", "NoCluster",
                                  "-n", cluster.namesrv])
    _one_line_error(unknown, "NoCluster")
    no_route = runner.invoke(app, ["admin", "topicRoute", "-t", "CliNoSuchTopic",
                                   "-n", cluster.namesrv])
    _one_line_error(no_route, "CliNoSuchTopic")
    consume = runner.invoke(app, ["admin", "consumeMessage", "-t", "CliNoSuchTopic",
                                  "-n", cluster.namesrv, "--timeout", "0.3"])
    _one_line_error(consume)


def test_message_not_found(cluster: ThreadedCluster) -> None:
    create(cluster, "CliSparse")
    beyond = runner.invoke(app, ["admin", "queryMsgByOffset", "-t", "CliSparse", "-b",
                                 "broker-a", "-i", "0", "-o", "5", "-n", cluster.namesrv])
    _one_line_error(beyond, "no message found")
    no_id = runner.invoke(app, ["admin", "queryMsgById", "-i", "not-an-id",
                                "-n", cluster.namesrv])
    _one_line_error(no_id, "not-an-id")


def test_a_message_id_without_its_topic_asks_for_the_topic(cluster: ThreadedCluster) -> None:
    """The msgId a send prints (the UNIQ_KEY) has an offset id's length: given without
    -t it is not read as a store address with a nonsense port."""
    create(cluster, "CliUniq", 1)
    sent = admin(cluster, "sendMessage", "-t", "CliUniq", "-p", "u")
    alone = runner.invoke(app, ["admin", "queryMsgById", "-i", sent["msgId"],
                                "-n", cluster.namesrv])
    _one_line_error(alone, sent["msgId"], "not an offset message id", "give its topic")
    assert "port" not in alone.stderr, alone.stderr
    assert admin(cluster, "queryMsgById", "-i", sent["msgId"], "-t", "CliUniq")["body"] == "u"


@pytest.mark.parametrize("args", [
    ["updateTopic", "-t", "CliBad", "--attributes", "queue.type=BatchCQ"],
    ["updateTopic", "-t", "CliBad", "-p", "5"],
    ["updateTopic", "-t", "CliBad", "-o", "maybe"],
    ["updateTopic", "-t", "CliBad", "-c", "DefaultCluster", "-b", "127.0.0.1:1"],
    ["sendMessage", "-t", "CliBad", "-p", "x", "-b", "broker-a"],
    ["consumeMessage", "-t", "CliBad", "-i", "0"],
])
def test_bad_flags_exit_2(cluster: ThreadedCluster, args: list[str]) -> None:
    result = runner.invoke(app, ["admin", *args, "-n", cluster.namesrv])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_the_name_server_comes_from_rocketmqs_variable_too(cluster: ThreadedCluster) -> None:
    """A shell set up for mqadmin (NAMESRV_ADDR) needs no -n; TIDEMQ_NAMESRV wins."""
    plain = CliRunner().invoke(app, ["admin", "clusterList", "--json"],
                               env={"NAMESRV_ADDR": cluster.namesrv, "TIDEMQ_NAMESRV": None})
    assert plain.exit_code == 0, plain.output
    assert [r["address"] for r in json.loads(plain.stdout)] == cluster.broker_addrs
    dead = f"127.0.0.1:{free_port()}"
    ours = CliRunner().invoke(app, ["admin", "clusterList"],
                              env={"NAMESRV_ADDR": cluster.namesrv, "TIDEMQ_NAMESRV": dead})
    assert ours.exit_code == 1 and f"cannot connect to {dead}" in ours.stderr


def test_query_commands_print_the_body_in_mqadmins_f_charset(cluster: ThreadedCluster) -> None:
    create(cluster, "CliCharset")

    async def send() -> Any:
        async with Producer("cli-charset", cluster.namesrv) as producer:
            return await producer.send(Message("CliCharset", "订单".encode("gbk")),
                                       queue=MessageQueue("CliCharset", "broker-a", 0))

    sent = cluster.call(send())
    where = ["-t", "CliCharset", "-b", "broker-a", "-i", "0", "-o", str(sent.queue_offset)]
    assert "bodyBase64" in admin(cluster, "queryMsgByOffset", *where)  # not UTF-8
    assert admin(cluster, "queryMsgByOffset", *where, "-f", "GBK")["body"] == "订单"
    assert admin(cluster, "queryMsgById", "-i", sent.offset_msg_id, "-f", "GBK")["body"] == "订单"
    human = runner.invoke(app, ["admin", "queryMsgByOffset", *where, "-f", "GBK", "-n",
                                cluster.namesrv])
    assert human.exit_code == 0 and "订单" in human.stdout, human.output
    bad = admin(cluster, "queryMsgByOffset", *where, "-f", "no-such-charset", code=2)
    assert "unknown charset 'no-such-charset'" in " ".join(bad.output.split())


def test_topic_route_in_mqadmins_list_form(cluster: ThreadedCluster) -> None:
    create(cluster, "CliRouteList", 3)
    result = runner.invoke(app, ["admin", "topicRoute", "-t", "CliRouteList", "-l", "-n",
                                 cluster.namesrv])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines()]
    a, b = cluster.broker_addrs
    assert lines == [
        ["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"],
        ["DefaultCluster", "broker-a", f"{{0={a}}}", "3", "3", "6"],
        ["DefaultCluster", "broker-b", f"{{0={b}}}", "3", "3", "6"],
        ["Total:", "2", "6", "6"]]


def test_cluster_list_with_an_interval_prints_until_interrupted(
        cluster: ThreadedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("tidemq.cli.commands.admin_common.time.sleep", nap)
    result = runner.invoke(app, ["admin", "clusterList", "-i", "7", "-n", cluster.namesrv])
    assert result.exit_code == 130
    assert naps == [7, 7] and result.stdout.count("broker-a") == 2


# ---------------------------------------------------------------------- mqadmin's layouts


def _columns(text: str) -> list[list[str]]:
    """Each line's cells: mqadmin's columns are two or more spaces apart."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def _human(cluster: ThreadedCluster, *args: str) -> str:
    result = runner.invoke(app, ["admin", *args, "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    assert not any(c in result.stdout for c in "┏┃│└"), result.stdout
    return result.stdout


def test_cluster_list_prints_mqadmins_columns(cluster: ThreadedCluster) -> None:
    """mqadmin's twelve columns in its order, then TideMQ's role and replica lag."""
    lines = _columns(_human(cluster, "clusterList"))
    assert lines[0] == ["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version",
                        "#InTPS(LOAD)", "#OutTPS(LOAD)", "#Timer(Progress)", "#PCWait(ms)",
                        "#Hour", "#SPACE", "#ACTIVATED", "#Role", "#FallBehind(B)"]
    assert [row[:4] for row in lines[1:]] == [
        ["DefaultCluster", "broker-a", "0", cluster.broker_addrs[0]],
        ["DefaultCluster", "broker-b", "0", cluster.broker_addrs[1]]]
    assert all(row[4] == "V5_3_3" and row[11:] == ["true", "ASYNC_MASTER", "0"]
               for row in lines[1:]), lines
    float(lines[1][5]), float(lines[1][10])  # TPS, disk ratio
    assert lines[1][9] == "-" or float(lines[1][9]) >= 0, lines  # hours kept: none yet
    more = _columns(_human(cluster, "clusterList", "-m"))
    assert more[0] == ["#Cluster Name", "#Broker Name", "#InTotalYest", "#OutTotalYest",
                       "#InTotalToday", "#OutTotalToday"]
    assert [row[:2] for row in more[1:]] == [["DefaultCluster", "broker-a"],
                                             ["DefaultCluster", "broker-b"]]
    assert all(cell.isdigit() for row in more[1:] for cell in row[2:]), more


def test_topic_status_and_send_message_print_mqadmins_columns(cluster: ThreadedCluster) -> None:
    create(cluster, "CliLayout", 2)
    sent = _columns(_human(cluster, "sendMessage", "-t", "CliLayout", "-p", "x",
                           "-b", "broker-b", "-i", "1"))
    assert sent[0] == ["#Broker Name", "#QID", "#Send Result", "#MsgId"]
    assert sent[1][:3] == ["broker-b", "1", "SEND_OK"] and len(sent[1][3]) == 32, sent
    status = _columns(_human(cluster, "topicStatus", "-t", "CliLayout"))
    assert status[0] == ["#Broker Name", "#QID", "#Min Offset", "#Max Offset",
                         "#Last Updated"]
    assert [row[:4] for row in status[1:]] == [
        ["broker-a", "0", "0", "0"], ["broker-a", "1", "0", "0"],
        ["broker-b", "0", "0", "0"], ["broker-b", "1", "0", "1"]]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", status[4][4]), status


def test_topic_route_prints_the_route_as_json(cluster: ThreadedCluster) -> None:
    """mqadmin prints TopicRouteData's JSON, which scripts pipe to jq."""
    create(cluster, "CliRouteJson", 2)
    route = json.loads(_human(cluster, "topicRoute", "-t", "CliRouteJson"))
    assert route == route_of(cluster, "CliRouteJson")
    assert {q["brokerName"] for q in route["queueDatas"]} == {"broker-a", "broker-b"}


def test_broker_status_prints_mqadmins_key_value_lines(cluster: ThreadedCluster) -> None:
    """-b: ``%-32s: %s`` a key; -c: the broker's address first, ``%-24s %-32s: %s``."""
    a, b = cluster.broker_addrs
    one = _human(cluster, "brokerStatus", "-b", a).splitlines()
    assert all(line[32:34] == ": " for line in one), one
    assert {line[:32].rstrip(): line[34:] for line in one}["brokerName"] == "broker-a"
    every = _human(cluster, "brokerStatus", "-c", "DefaultCluster").splitlines()
    assert all(line[57:59] == ": " for line in every), every
    names = {line[:24].rstrip(): line[59:] for line in every
             if line[25:57].rstrip() == "brokerName"}
    assert names == {a: "broker-a", b: "broker-b"}


def test_query_msg_by_id_and_offset_print_mqadmins_message(cluster: ThreadedCluster) -> None:
    """``%-20s %s``: a label and its value a line, as mqadmin prints a message."""
    create(cluster, "CliShow", 1)
    sent = admin(cluster, "sendMessage", "-t", "CliShow", "-p", "shown", "-k", "k1",
                 "-c", "TagS", "-b", "broker-a", "-i", "0")
    for args in (("queryMsgById", "-i", sent["offsetMsgId"]),
                 ("queryMsgByOffset", "-t", "CliShow", "-b", "broker-a", "-i", "0",
                  "-o", str(sent["queueOffset"]))):
        lines = [line for line in _human(cluster, *args).splitlines() if line.strip()]
        fields = {line[:20].rstrip(): line[21:] for line in lines}
        assert fields["Topic:"] == "CliShow", lines
        assert fields["Tags:"] == "[TagS]" and fields["Keys:"] == "[k1]", lines
        assert fields["Queue ID:"] == "0", lines
        assert fields["Queue Offset:"] == str(sent["queueOffset"]), lines
        assert fields["Message Body:"] == "shown", lines


def test_query_msg_by_key_prints_mqadmins_columns(cluster: ThreadedCluster) -> None:
    create(cluster, "CliKeyCols", 1)
    sent = admin(cluster, "sendMessage", "-t", "CliKeyCols", "-p", "k", "-k", "kc-1",
                 "-b", "broker-a", "-i", "0")
    eventually(lambda: admin(cluster, "queryMsgByKey", "-t", "CliKeyCols", "-k", "kc-1"),
               lambda found: len(found) == 1)
    lines = _columns(_human(cluster, "queryMsgByKey", "-t", "CliKeyCols", "-k", "kc-1"))
    assert lines[0][:3] == ["#Message ID", "#QID", "#Offset"]
    assert lines[1][:3] == [sent["msgId"], "0", str(sent["queueOffset"])]
