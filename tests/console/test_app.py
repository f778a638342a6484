"""The console over HTTP against a real in-process cluster (no browser: see
test_browser.py for the pages driven in Chromium)."""

from __future__ import annotations

import asyncio
import html
import json
import re
from pathlib import Path

import pytest
from tests.console.conftest import Http

import tidemq.client.trace_view as trace_view
from tidemq.broker.app import BrokerApp
from tidemq.broker.pipeline import Check
from tidemq.client import (
    AdminClient,
    ClientConfig,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
)
from tidemq.client.logical_admin import LogicalQueueAdmin, plan_migration
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.console import ConsoleServer
from tidemq.errors import ResponseCode
from tidemq.net import Connection
from tidemq.net.ports import free_port
from tidemq.testing import Cluster

PAGES = ["/cluster", "/topics", "/topics?system=1", "/groups", "/messages", "/logical-queues",
         "/lmq", "/dlq"]


def flash(text: str) -> str:
    found = re.search(r'id="flash">([^<]*)<', text)
    assert found, "no flash message on the page"
    return html.unescape(found.group(1))


async def registered(cluster: Cluster) -> None:
    """Register the brokers' topics with the name server now (not at the next period)."""
    for broker in cluster.brokers:
        assert broker.registrar is not None
        await broker.registrar.register_all()


async def test_every_page_renders(http: Http, cluster: Cluster) -> None:
    for path in [*PAGES, f"/brokers/{cluster.brokers[0].broker_addr}"]:
        page = await http.get(path)
        assert page.status == 200, (path, page.text[:500])
        assert "TideMQ console" in page.text and 'id="error"' not in page.text, path
    root = await http.get("/")
    assert root.url.endswith("/cluster")
    assert "broker-a" in (await http.get("/cluster")).text
    await http.post("/topics", {"topic": "Counted", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    listed = re.search(r'id="topic-count">(\d+) topic', (await http.get("/topics")).text)
    card = re.search(r'id="topic-count-card"><a href="/topics">(\d+)<',
                     (await http.get("/cluster")).text)
    assert listed and card and card.group(1) == listed.group(1) == "1", \
        "the cluster's topic count is the topic list's, system topics aside"
    assert (await http.get("/healthz")).text == "ok"


async def test_create_send_and_find_a_message(http: Http, cluster: Cluster) -> None:
    page = await http.post("/topics", {"topic": "Orders", "read_queues": "4",
                                       "write_queues": "4", "perm": "6",
                                       "queue_type": "BatchCQ", "order": "false"})
    assert page.status == 200 and "/topics/Orders?msg=" in page.url
    assert "Topic Orders saved" in flash(page.text)
    assert re.search(r'id="queue-type">BatchCQ<', page.text)
    assert cluster.brokers[0].topics.get("Orders").read_queue_nums == 4
    await http.post("/topics", {"topic": "Plain", "read_queues": "2", "write_queues": "2"})

    page = await http.post("/topics/Plain/send", {"tags": "TagA", "keys": "order-42 extra",
                                                  "body": "hello console"})
    sent = flash(page.text)
    msg_id = re.search(r"Sent (\w+) to broker-a queue (\d+) at offset 0", sent)
    assert msg_id, sent
    cluster.brokers[0].store.wait_dispatched()
    await registered(cluster)

    by_key = await http.get("/messages?by=key&topic=Plain&key=order-42")
    assert "1 message<" in by_key.text and "hello console" in by_key.text
    assert "order-42 extra" in by_key.text and "TagA" in by_key.text
    by_id = await http.get(f"/messages?by=id&topic=Plain&msg_id={msg_id.group(1)}")
    assert "hello console" in by_id.text
    queue = msg_id.group(2)
    by_offset = await http.get(
        f"/messages?by=offset&topic=Plain&broker=broker-a&queue_id={queue}&offset=0")
    assert "hello console" in by_offset.text and "shown as utf-8" in by_offset.text
    missing = await http.get("/messages?by=key&topic=Plain&key=nothing-here")
    assert "0 messages" in missing.text and "Nothing found" in missing.text

    topics = await http.get("/topics")
    assert 'data-topic="Plain"' in topics.text and 'data-topic="TBW102"' not in topics.text
    detail = await http.get("/topics/Plain")
    assert re.search(r'id="message-count">1<', detail.text)


async def test_group_lag_follows_commits(http: Http, cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "Lagging", "read_queues": "2", "write_queues": "2"})
    await registered(cluster)
    mq = MessageQueue("Lagging", "broker-a", 0)
    async with Producer("lag-producers", cluster.namesrv_addr) as producer:
        for i in range(10):
            await producer.send(Message("Lagging", f"m{i}".encode()), queue=mq)
    cluster.brokers[0].store.wait_dispatched()
    async with PullConsumer("lag-group", cluster.namesrv_addr) as consumer:
        consumer.subscribe("Lagging")
        await consumer.instance.routes.get("Lagging", refresh=True)
        await consumer.instance.send_heartbeat()
        await consumer.commit({mq: 3})
        lag = json.loads((await http.get("/api/groups/lag-group/lag")).text)
        assert lag["lag"] == 7 and lag["group"] == "lag-group"
        assert {(q["queueId"], q["lag"]) for q in lag["queues"]} == {(0, 7), (1, 0)}
        await consumer.commit({mq: 8})
        lag = json.loads((await http.get("/api/groups/lag-group/lag")).text)
        assert lag["lag"] == 2 and [p[1] for p in lag["history"]][-1] == 2

        groups = await http.get("/groups")
        assert 'data-group="lag-group"' in groups.text
        page = await http.get("/groups/lag-group")
        assert re.search(r'id="group-lag">2<', page.text) and "lag-chart" in page.text
        topic = await http.get("/topics/Lagging")
        row = re.search(r'<tr data-group="lag-group">(.*?)</tr>', topic.text, re.S)
        assert row, "the topic's page lists its groups with their lag on it"
        assert re.findall(r'<td class="num">([^<]*)</td>', row.group(1))[0] == "2"

        confirm = await http.post("/groups/lag-group/reset", {"topic": "Lagging",
                                                             "to": "earliest"})
        assert 'id="confirm-form"' in confirm.text and "earliest offset" in confirm.text
        assert cluster.brokers[0].offsets.query("lag-group", "Lagging", 0) == 8
        done = await http.post("/groups/lag-group/reset", {"topic": "Lagging",
                                                          "to": "earliest", "confirm": "yes"})
        assert "reset to the earliest offset" in flash(done.text), done.text[-800:]
        assert cluster.brokers[0].offsets.query("lag-group", "Lagging", 0) == 0


@pytest.mark.parametrize(("form", "said"), [
    ({"to": "oldest"}, "reset to earliest, latest or a time, not 'oldest'"),
    ({"to": "time", "time": "yesterday"}, "the time 'yesterday' does not read as a date and "
                                          "time"),
    ({"to": "time"}, "give the point in time to reset to"),
])
async def test_a_reset_form_that_does_not_read_is_refused_naming_why(
        http: Http, cluster: Cluster, form: dict[str, str], said: str) -> None:
    """A reset to what the form does not say is not made: a target the form does not know
    was taken as the earliest offset, which re-delivers everything."""
    await http.post("/topics", {"topic": "OddReset", "read_queues": "1", "write_queues": "1"})
    for confirm in ({}, {"confirm": "yes"}):
        page = await http.post("/groups/g/reset", {"topic": "OddReset", **form, **confirm})
        assert page.status == 400, page.text[-600:]
        assert said in html.unescape(page.text), page.text[-600:]


async def test_reset_on_a_broker_without_it_says_so(http: Http, cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "NoReset", "read_queues": "1", "write_queues": "1"})
    # Failure injection: this broker forgets INVOKE_BROKER_TO_RESET_OFFSET (222).
    cluster.brokers[0].server._dispatcher._processors.pop(222, None)
    page = await http.post("/groups/g/reset", {"topic": "NoReset", "to": "latest",
                                              "confirm": "yes"})
    assert page.status == 501
    assert "does not support resetting offsets" in html.unescape(page.text)


async def test_delete_topic_asks_first(http: Http, cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "Doomed", "read_queues": "1", "write_queues": "1"})
    ask = await http.get("/topics/Doomed/delete")
    assert 'id="confirm-form"' in ask.text and "cannot be undone" in ask.text
    unconfirmed = await http.post("/topics/Doomed/delete", {})
    assert 'id="confirm-form"' in unconfirmed.text
    assert cluster.brokers[0].topics.get("Doomed") is not None
    gone = await http.post("/topics/Doomed/delete", {"confirm": "yes"})
    assert "Topic Doomed deleted" in flash(gone.text)
    assert cluster.brokers[0].topics.get("Doomed") is None
    assert (await http.get("/topics/Doomed")).status == 404


async def test_cross_site_posts_are_refused(http: Http, cluster: Cluster) -> None:
    page = await http.post("/topics", {"topic": "Evil"}, Origin="http://evil.example")
    assert page.status == 403
    assert cluster.brokers[0].topics.get("Evil") is None


async def test_bad_input_gets_a_clear_page(http: Http) -> None:
    bad = await http.post("/topics", {"topic": "Bad", "read_queues": "many"})
    assert bad.status == 400 and "must be integers" in bad.text
    refused = await http.post("/topics", {"topic": "Bad", "read_queues": "0"})
    assert refused.status == 400 and "queue numbers must be &gt;= 1" in refused.text
    incomplete = await http.get("/messages?by=offset&topic=T")
    assert incomplete.status == 400 and "incomplete search" in incomplete.text
    unknown = await http.get("/brokers/10.0.0.1:1")
    assert unknown.status == 404


async def test_logical_queue_page_shows_the_empty_state(http: Http) -> None:
    page = await http.get("/logical-queues")
    assert 'id="no-logical"' in page.text and "No logical-queue topics" in page.text
    assert "None of the 1 broker holds" in page.text


async def test_logical_queues_created_and_migrated_from_the_console(tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=2) as two, \
            ConsoleServer(two.namesrv_addr, port=0) as web:
        http = Http(web.url)
        made = await http.post("/logical-queues", {"action": "create", "topic": "Streams",
                                                  "queues": "4"})
        assert "Logical topic Streams created: 4 logical queues" in flash(made.text)
        rows = re.findall(r"<tr><td>(broker-[ab])</td><td>MessageQueue\(Streams, (broker-[ab]), "
                          r"(\d+)\)</td><td>LogicalQueue\((\d+), ([^)]*)\)</td>\s*<td><span "
                          r'class="badge \w*">(\w+)<', made.text)
        assert [(r[0], r[3], r[5]) for r in rows] == [
            ("broker-a", "0", "NORMAL"), ("broker-b", "1", "NORMAL"),
            ("broker-a", "2", "NORMAL"), ("broker-b", "3", "NORMAL")]
        await registered(two)
        async with Producer("lq-producers", two.namesrv_addr) as producer:
            for i in range(3):
                await producer.send(Message("Streams", f"m{i}".encode()),
                                    queue=MessageQueue("Streams", "__logical__", 0))
        for broker in two.brokers:
            broker.store.wait_dispatched()
        moved = await http.post("/logical-queues", {"action": "migrate", "topic": "Streams",
                                                   "lq": "0", "target": "broker-b"})
        assert "Logical queue 0 of Streams now writes to broker-b" in flash(moved.text)
        assert "LogicalQueue(0, 0-2)" in moved.text and "READONLY" in moved.text
        assert re.search(r"MessageQueue\(Streams, broker-b, \d+\)</td><td>LogicalQueue\(0, 3-\)",
                         moved.text)
        topics = await http.get("/topics")
        assert re.search(r'data-topic="Streams">.*?<td>yes</td>', topics.text, re.S)
        bad = await http.post("/logical-queues", {"action": "create", "topic": "X",
                                                 "queues": "lots"})
        assert bad.status == 400


async def test_the_logical_queue_page_leaves_the_brokers_copies_untouched(
        tmp_path: Path) -> None:
    """A GET shows the merged mapping but pushes nothing, even to a broker whose copy is
    behind (the brokers' own sync is off here, so only the page could have pushed)."""
    hour = 3_600_000
    async with Cluster(tmp_path, brokers=2, broker={"logical_sync_interval": hour}) as two, \
            ConsoleServer(two.namesrv_addr, port=0) as web, \
            AdminClient(two.namesrv_addr) as admin:
        created = await LogicalQueueAdmin(admin).create("Views", 2)
        planned = plan_migration(created, 0, "broker-b")
        assert planned is not None
        ahead, behind = (next(b for b in two.brokers if b.config.broker_name == name)
                         for name in ("broker-a", "broker-b"))
        await admin._broker(ahead.broker_addr, RemotingCommand.request(
            RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, {},
            json.dumps(planned.to_json()).encode()))
        assert ahead.logical.get("Views") == planned and behind.logical.get("Views") == created

        page = await Http(web.url).get("/logical-queues")
        assert page.status == 200 and f"epoch {planned.epoch}" in page.text  # merged view
        assert "PENDING" in page.text
        assert behind.logical.get("Views") == created  # not pushed to
        assert ahead.logical.get("Views") == planned
        await LogicalQueueAdmin(admin).query("Views", repair=True)  # asked to: it pushes
        assert behind.logical.get("Views") == planned


async def test_unreachable_cluster_is_an_error_page(unused_tcp_port: int) -> None:
    async with ConsoleServer(f"127.0.0.1:{unused_tcp_port}", port=0) as web:
        page = await Http(web.url).get("/cluster")
        assert page.status == 502 and 'id="error"' in page.text
        api = await Http(web.url).get("/api/groups/g/lag")
        assert api.status == 502 and "error" in json.loads(api.text)
        offset_id = f"7F000001{unused_tcp_port:08X}{0:016X}"  # a broker there, down
        for search in ("by=key&topic=T&key=k", f"by=id&msg_id={offset_id}"):
            found = await Http(web.url).get(f"/messages?{search}")
            assert found.status == 502 and 'id="error"' in found.text, search
            assert "No message matched" not in found.text, "no answer is no empty answer"


@pytest.fixture
def unused_tcp_port() -> int:
    return free_port()


async def test_the_topic_list_names_a_broker_it_could_not_read(tmp_path: Path) -> None:
    """A master that answers GET_ALL_TOPIC_CONFIG with an error is named on the topic
    list (its topics are missing from it), instead of being dropped with a log line."""
    def refuse(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "topic table unreadable (injected)")

    async with Cluster(tmp_path, brokers=1) as cluster:
        bc, sc = cluster.broker_config(1)
        sick = BrokerApp(bc, sc, interceptors=[
            Check(refuse, codes=[RequestCode.GET_ALL_TOPIC_CONFIG])])
        await sick.start()
        cluster.brokers.append(sick)  # stopped with the cluster
        await registered(cluster)
        async with ConsoleServer(cluster.namesrv_addr, port=0) as web:
            http = Http(web.url)
            page = await http.get("/topics")
            assert page.status == 200
            unread = re.search(r'<div class="error" id="unread-brokers">(.*?)</div>',
                               page.text, re.S)
            assert unread is not None, page.text[:2000]
            assert f'data-broker="{bc.broker_name}"' in unread.group(1)
            assert sick.broker_addr in unread.group(1)
            assert "topic table unreadable (injected)" in unread.group(1)
            assert 'data-broker="broker-a"' not in unread.group(1)
            # with every broker readable, nothing is said
            cluster.brokers.remove(sick)
            await sick.stop()
            again = await http.get("/topics")
            assert 'id="unread-brokers"' not in again.text


async def test_a_topic_on_a_broker_that_cannot_be_read_is_no_missing_topic(
        tmp_path: Path) -> None:
    """A topic page whose only holder does not answer says which broker could not be
    read (502), not that no broker has the topic (404)."""
    def refuse(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "topic table unreadable (injected)")

    async with Cluster(tmp_path, brokers=0) as cluster:
        bc, sc = cluster.broker_config(0)
        sick = BrokerApp(bc, sc, interceptors=[
            Check(refuse, codes=[RequestCode.GET_ALL_TOPIC_CONFIG])])
        await sick.start()
        cluster.brokers.append(sick)
        await registered(cluster)
        async with ConsoleServer(cluster.namesrv_addr, port=0) as web:
            page = await Http(web.url).get("/topics/Held")
            assert page.status == 502, page.text[-1500:]
            assert bc.broker_name in page.text and "topic table unreadable" in page.text


async def test_with_no_broker_registered_the_lists_say_so(tmp_path: Path) -> None:
    """No broker registered (the only one stopped): the topic and group lists say that,
    not "No topics yet, create one"."""
    async with Cluster(tmp_path, brokers=0) as cluster, \
            ConsoleServer(cluster.namesrv_addr, port=0) as web:
        http = Http(web.url)
        for path in ("/topics", "/groups"):
            page = await http.get(path)
            assert page.status == 200 and 'id="no-brokers"' in page.text, path
            assert "No topics yet" not in page.text


async def test_the_group_list_names_a_broker_it_could_not_read(tmp_path: Path) -> None:
    """One master whose group table cannot be read leaves the others' groups listed,
    with that broker named, instead of an error page for the whole list."""
    def refuse(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "group table unreadable (injected)")

    async with Cluster(tmp_path, brokers=1) as cluster:
        bc, sc = cluster.broker_config(1)
        sick = BrokerApp(bc, sc, interceptors=[
            Check(refuse, codes=[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG])])
        await sick.start()
        cluster.brokers.append(sick)
        await registered(cluster)
        async with ConsoleServer(cluster.namesrv_addr, port=0) as web:
            http = Http(web.url)
            await http.post("/groups", {"group": "well", "retryQueueNums": "1",
                                        "retryMaxTimes": "16", "brokerId": "0",
                                        "whichBrokerWhenConsumeSlowly": "1"})
            page = await http.get("/groups")
            assert page.status == 200, page.text[-1500:]
            unread = re.search(r'id="unread-brokers">(.*?)</div>', page.text, re.S)
            assert unread and f'data-broker="{bc.broker_name}"' in unread.group(1)
            assert "group table unreadable (injected)" in unread.group(1)
            assert 'data-group="well"' in page.text


async def test_a_logical_topics_messages_are_listed_by_time(http: Http, cluster: Cluster
                                                            ) -> None:
    """Its route names the placeholder broker: the physical queues are read on the
    broker that holds them, not refused with "broker-a has no master"."""
    made = await http.post("/logical-queues", {"action": "create", "topic": "Lanes",
                                              "queues": "2"})
    assert "Logical topic Lanes created" in flash(made.text)
    await registered(cluster)
    async with Producer("lane-producers", cluster.namesrv_addr) as producer:
        for i in range(3):
            await producer.send(Message("Lanes", f"lane {i}".encode(), {"KEYS": f"l{i}"}),
                                queue=MessageQueue("Lanes", "__logical__", 0))
    cluster.brokers[0].store.wait_dispatched()
    page = await http.get("/topics/Lanes/messages")
    assert page.status == 200, page.text[-1500:]
    assert "3 messages stored" in page.text
    one = await http.get("/messages?by=offset&topic=Lanes&broker=broker-a&queue_id=0&offset=1")
    assert one.status == 200 and "lane 1" in one.text, one.text[-1500:]


async def test_a_trace_just_stored_without_a_delivery_says_its_consumes_may_lag(
        http: Http, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The message page's trace of a message stored a moment ago that shows no delivery
    says the consume records may not be indexed yet, rather than reading as not consumed
    ("a moment" stretched, so that a busy machine does not outlast it; then shrunk to
    nothing, and the same trace says nothing)."""
    config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), enable_msg_trace=True)
    async with Producer("trace-lag-producer", config=config) as producer:
        sent = await producer.send(Message("TraceLag", b"unread"))
        assert producer.tracer is not None
        await producer.tracer.flush()
    cluster.brokers[0].store.wait_dispatched()
    await registered(cluster)
    monkeypatch.setattr(trace_view, "RECENT_MS", 600_000)
    url = f"/messages?by=id&topic=TraceLag&msg_id={sent.msg_id}"
    async with asyncio.timeout(10):  # the key index is written a moment after dispatch
        while 'class="trace-send"' not in (page := await http.get(url)).text:
            await asyncio.sleep(0.05)
    assert 'class="trace-consume"' not in page.text
    assert "consume records may not be indexed yet" in page.text
    monkeypatch.setattr(trace_view, "RECENT_MS", 0)
    older = await http.get(url)
    assert 'class="trace-send"' in older.text
    assert "consume records may not be indexed yet" not in older.text
