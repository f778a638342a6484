"""``tidemq admin queryMsgTraceById`` against a real cluster: a producer and a consumer
with message trace on, then the command's table and JSON."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner
from tests.cli.test_admin_cli import admin, eventually

import tidemq.client.trace_view as trace_view
from tidemq.cli.main import app
from tidemq.client import (
    ClientConfig,
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    Producer,
    PullConsumer,
    TransactionProducer,
)

TOPIC = "Traced"


@pytest.fixture(scope="module")
def traced(cluster: ThreadedCluster) -> Any:
    """One message sent by ``trace-pg`` and consumed (polled, committed) by ``trace-cg``,
    both with trace on; the trace records are flushed and dispatched."""
    config = ClientConfig(namesrv_addr=(cluster.namesrv,), enable_msg_trace=True)

    async def run() -> Any:
        async with Producer("trace-pg", config=config) as producer:
            sent = await producer.send(Message(TOPIC, b"hello", {"TAGS": "tA",
                                                                   "KEYS": "order-7"}))
            assert producer.tracer is not None
            await producer.tracer.flush()
        async with PullConsumer("trace-cg", config=config,
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
                                ) as consumer:
            consumer.subscribe(TOPIC)
            async with asyncio.timeout(20):
                while not await consumer.poll(timeout=1):
                    pass
            await consumer.commit()
            assert consumer.tracer is not None
            await consumer.tracer.flush()
        return sent

    sent = cluster.call(run())
    for broker in cluster.cluster.brokers:
        assert broker.store.wait_dispatched()
    return sent


def test_query_msg_trace_by_id_json(cluster: ThreadedCluster, traced: Any) -> None:
    doc = eventually(lambda: admin(cluster, "queryMsgTraceById", "-i", traced.msg_id),
                     lambda d: bool(d["sends"]) and bool(d["consumes"]))
    [send] = doc["sends"]
    assert (send["producerGroup"], send["status"], send["topic"], send["tags"],
            send["keys"]) == ("trace-pg", "success", TOPIC, "tA", "order-7")
    assert send["offsetMsgId"] == traced.offset_msg_id
    assert send["storeTime"] >= send["sendTime"] > 0
    [consume] = doc["consumes"]
    assert (consume["consumerGroup"], consume["status"], consume["retryTimes"]) == (
        "trace-cg", "success", 0)
    assert consume["costTime"] >= 0
    assert doc["unreadable"] == []
    assert doc["consumesMayLag"] is False  # consumed: nothing to wait for


def test_query_msg_trace_by_id_table(cluster: ThreadedCluster, traced: Any) -> None:
    eventually(lambda: admin(cluster, "queryMsgTraceById", "-i", traced.msg_id),
               lambda d: bool(d["sends"]) and bool(d["consumes"]))
    result = CliRunner().invoke(app, ["admin", "queryMsgTraceById", "-i", traced.msg_id,
                                      "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime",
                                "#CostTimes", "#Status", "#StoreTime"]
    assert lines[0].index("#ProducerGroup") == 11  # mqadmin's %-10s columns
    pub = lines[1].split()
    assert pub[:2] == ["Pub", "trace-pg"] and pub[-3] == "success"
    assert pub[-4].endswith("ms")
    sub_header = lines.index(next(x for x in lines if x.startswith("#Type")
                                  and "#ConsumerGroup" in x))
    sub = lines[sub_header + 1].split()
    assert sub[:2] == ["Sub", "trace-cg"] and sub[-2:] == ["success", "0"]


def test_an_untraced_message_is_an_error(cluster: ThreadedCluster, traced: Any) -> None:
    result = CliRunner().invoke(app, ["admin", "queryMsgTraceById", "-i", "0" * 32,
                                      "-n", cluster.namesrv])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no trace of message")  # as every failure


def test_a_transactions_end_is_shown(cluster: ThreadedCluster) -> None:
    config = ClientConfig(namesrv_addr=(cluster.namesrv,), enable_msg_trace=True)

    async def run() -> Any:
        async with TransactionProducer(
                "trace-tx", config=config,
                check=lambda m: LocalTransactionState.UNKNOWN) as producer:
            sent = await producer.send_in_transaction(
                Message(TOPIC, b"paid"), lambda m: LocalTransactionState.COMMIT)
            assert producer.tracer is not None
            await producer.tracer.flush()
        return sent.send_result

    sent = cluster.call(run())
    for broker in cluster.cluster.brokers:
        assert broker.store.wait_dispatched()
    doc = eventually(lambda: admin(cluster, "queryMsgTraceById", "-i", sent.msg_id),
                     lambda d: bool(d["sends"]) and bool(d["transactions"]))
    [end] = doc["transactions"]
    assert (end["producerGroup"], end["transactionState"], end["fromTransactionCheck"],
            end["transactionId"]) == ("trace-tx", "COMMIT_MESSAGE", False, sent.msg_id)
    result = CliRunner().invoke(app, ["admin", "queryMsgTraceById", "-i", sent.msg_id,
                                      "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = lines.index(next(x for x in lines if "#State" in x))
    assert lines[header].split() == ["#Type", "#ProducerGroup", "#ClientHost", "#EndTime",
                                     "#State", "#FromCheck"]
    row = lines[header + 1].split()
    assert row[:2] == ["EndTrans", "trace-tx"] and row[-2:] == ["COMMIT_MESSAGE", "false"]


def test_send_message_with_mqadmins_m_is_traced(cluster: ThreadedCluster) -> None:
    sent = admin(cluster, "sendMessage", "-t", TOPIC, "-p", "traced by -m", "-m", "true")

    def trace() -> Any:
        result = CliRunner().invoke(app, ["admin", "queryMsgTraceById", "-i", sent["msgId"],
                                          "-n", cluster.namesrv, "--json"])
        return result if result.exit_code else json.loads(result.stdout)

    doc = eventually(trace, lambda d: isinstance(d, dict) and bool(d["sends"]))
    assert isinstance(doc, dict), doc.output
    [send] = doc["sends"]
    assert (send["producerGroup"], send["status"], send["topic"]) == (
        "TOOLS_PRODUCER", "success", TOPIC)
    plain = admin(cluster, "sendMessage", "-t", TOPIC, "-p", "not traced")
    untraced = CliRunner().invoke(app, ["admin", "queryMsgTraceById", "-i", plain["msgId"],
                                        "-n", cluster.namesrv])
    assert untraced.exit_code == 1 and "no trace of message" in untraced.stderr
    bad = admin(cluster, "sendMessage", "-t", TOPIC, "-p", "x", "-m", "yes", code=2)
    assert "expected true or false" in bad.output


def test_a_send_just_stored_and_not_consumed_says_its_consumes_may_lag(
        cluster: ThreadedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query right after consuming can lack the consume records for a moment: a trace
    with a send and no delivery, of a message stored a few seconds ago or less, ends with
    a note saying so (``consumesMayLag`` in JSON) rather than reading as not consumed.
    "A few seconds" is stretched here, so that a busy machine does not outlast it, and
    then shrunk to nothing: the same trace is then an older one's, and says nothing."""
    config = ClientConfig(namesrv_addr=(cluster.namesrv,), enable_msg_trace=True)

    async def run() -> Any:
        async with Producer("trace-lag-pg", config=config) as producer:
            sent = await producer.send(Message("TracedLag", b"unread"))
            assert producer.tracer is not None
            await producer.tracer.flush()
        return sent

    sent = cluster.call(run())
    for broker in cluster.cluster.brokers:
        assert broker.store.wait_dispatched()
    monkeypatch.setattr(trace_view, "RECENT_MS", 600_000)
    doc = eventually(lambda: admin(cluster, "queryMsgTraceById", "-i", sent.msg_id),
                     lambda d: bool(d["sends"]))
    assert (doc["consumes"], doc["consumesMayLag"]) == ([], True)
    args = ["admin", "queryMsgTraceById", "-i", sent.msg_id, "-n", cluster.namesrv]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "note: consume records may not be indexed yet; query again in a moment")
    monkeypatch.setattr(trace_view, "RECENT_MS", 0)
    assert admin(cluster, "queryMsgTraceById", "-i", sent.msg_id)["consumesMayLag"] is False
    older = CliRunner().invoke(app, args)
    assert older.exit_code == 0, older.output
    assert "note:" not in older.stdout and older.stdout.splitlines()[0].startswith("#Type")
