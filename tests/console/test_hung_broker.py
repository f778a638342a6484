"""A broker that accepts connections and never answers: each page waits for it at most
once, under one deadline for all its requests, shows what the other brokers answered,
names the one that did not, and a page about a topic it does not hold never asks it."""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
import zlib
from collections.abc import AsyncIterator

import pytest
from tests.client.test_request_deadline import HungBroker
from tests.console.conftest import Http
from tests.console.test_app import registered

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
)
from tidemq.client.blocking import BlockingPullConsumer
from tidemq.codec.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    encode_register_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import RegisterBrokerRequestHeader
from tidemq.console import ConsoleServer
from tidemq.console.config import ConsoleConfig
from tidemq.console.history import History
from tidemq.console.sampler import Sampler
from tidemq.net import RemotingClient
from tidemq.testing import Cluster

#: The page deadline of these tests' console.
DEADLINE = 1.0
#: Its requests' own timeout: far above the deadline, so that a page that waited for a
#: request's own timeout even once would show it, however busy the machine.
TIMEOUT = 12.0
#: Groups with offsets on the broker that answers: a groups page asks for each.
GROUPS = 12


async def register(client: RemotingClient, namesrv: str, name: str, addr: str,
                   topics: list[str]) -> None:
    """REGISTER_BROKER for ``addr`` as broker ``name`` of the cluster, holding ``topics``
    (what a broker's registrar sends); the name server forgets it when ``client``'s
    connection closes, as it does a broker's."""
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table={t: TopicConfig(topic_name=t, read_queue_nums=1,
                                           write_queue_nums=1, perm=6) for t in topics},
        data_version=DataVersion(counter=1))
    body = encode_register_body(RegisterBrokerBody(topic_config_serialize_wrapper=wrapper))
    header = RegisterBrokerRequestHeader(
        broker_name=name, broker_addr=addr, cluster_name="DefaultCluster",
        ha_server_addr=addr, broker_id=0, compressed=False,
        body_crc32=zlib.crc32(body) & 0x7FFFFFFF)
    response = await client.request(namesrv, RemotingCommand.request(
        RequestCode.REGISTER_BROKER, header.to_ext(), body))
    assert response.code == 0, response.remark


@pytest.fixture
async def slow_web(cluster: Cluster) -> AsyncIterator[ConsoleServer]:
    """A console with a short page deadline, whose background sampler has done its
    first round and does not ask the brokers again during a test."""
    config = ConsoleConfig(page_deadline=DEADLINE, sample_interval=3600)
    client = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), request_timeout=TIMEOUT)
    async with ConsoleServer(cluster.namesrv_addr, port=0, config=config,
                             client=client) as server:
        sampler = server.console.sampler
        if sampler.rounds < 1:
            await sampler.wait_rounds(1)
        yield server


@pytest.fixture
def slow_http(slow_web: ConsoleServer) -> Http:
    return Http(slow_web.url)


@pytest.fixture
async def hung(cluster: Cluster, slow_web: ConsoleServer
               ) -> AsyncIterator[tuple[HungBroker, str]]:
    """A hung broker, registered with the name server as ``broker-hung`` holding the
    topic ``Remote``."""
    broker = HungBroker()
    addr = await broker.start()
    client = RemotingClient()
    try:
        await register(client, cluster.namesrv_addr, "broker-hung", addr, ["Remote"])
        yield broker, addr
    finally:
        await client.close()
        await broker.close()


async def _offsets(cluster: Cluster) -> None:
    """A topic on the broker that answers, with GROUPS groups' offsets of it."""
    mq = MessageQueue("Local", "broker-a", 0)
    async with Producer("local-producers", cluster.namesrv_addr) as producer:
        for i in range(4):
            await producer.send(Message("Local", f"m{i}".encode()), queue=mq)
    cluster.brokers[0].store.wait_dispatched()

    def commit(group: str, offset: int) -> None:
        with BlockingPullConsumer(group, cluster.namesrv_addr) as consumer:
            consumer.commit(mq, offset)

    for i in range(GROUPS):
        await asyncio.to_thread(commit, f"local-{i:02d}", i % 4)


async def _timed(http: Http, path: str) -> tuple[str, float]:
    began = time.monotonic()
    page = await http.get(path)
    assert page.status == 200, page.text[-2000:]
    return page.text, time.monotonic() - began


async def test_a_hung_broker_is_waited_for_once_a_page_and_named(
        cluster: Cluster, slow_http: Http, hung: tuple[HungBroker, str]) -> None:
    http = slow_http
    await http.post("/topics", {"topic": "Local", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    await _offsets(cluster)
    broker, addr = hung

    # Each of these asks the hung broker several times (once per group on the groups
    # page): one deadline for the page, not a timeout for each request in turn.
    for path in ("/groups", "/groups?sort=lag", "/cluster", "/groups/local-01", "/topics"):
        text, took = await _timed(http, path)
        assert 'id="unanswered"' in text, path
        named = re.search(r'<li data-broker="([^"]+)">([^<]+)</li>', text)
        assert named and named.group(1) == addr, path
        assert named.group(2).startswith(f"broker-hung at {addr} (no answer within"), path
        assert took < TIMEOUT, f"{path} waited a request's own timeout ({took:.1f} s)"
    # What the broker that answered holds is shown.
    groups, _ = await _timed(http, "/groups?sort=lag")
    assert re.findall(r'<tr data-group="([^"]+)"', groups)[:2] == ["local-00", "local-04"]
    group, _ = await _timed(http, "/groups/local-01")
    assert 'id="group-lag">3<' in group
    lag = json.loads((await _timed(http, "/api/groups/local-01/lag"))[0])
    assert lag["lag"] == 3 and lag["unanswered"] == [addr]
    assert lag["history"] == [], "a lag missing a broker's queues went into the chart"
    cluster_page, _ = await _timed(http, "/cluster")
    assert "RUNNING" in cluster_page and "unreachable" in cluster_page

    # A page about a topic the hung broker does not hold does not ask it.
    asked = broker.received
    for path in ("/topics/Local", "/topics/Local/messages"):
        text, _ = await _timed(http, path)
        assert 'id="unanswered"' not in text, path
    assert broker.received == asked, "a page about a topic it does not hold asked it"


async def test_a_change_keeps_its_requests_own_timeouts(cluster: Cluster,
                                                        slow_http: Http) -> None:
    """A message resent to a consumer whose listener takes longer than the page
    deadline is answered: the deadline is for pages that read, not for changes."""
    http = slow_http
    await http.post("/topics", {"topic": "Slow", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    async with Producer("slow-producers", cluster.namesrv_addr) as producer:
        sent = await producer.send(Message("Slow", b"take your time"),
                                   queue=MessageQueue("Slow", "broker-a", 0))
    cluster.brokers[0].store.wait_dispatched()

    async def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        await asyncio.sleep(DEADLINE * 1.5)  # the behaviour under test: a slow listener
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("slow-group", cluster.namesrv_addr, listener=listen,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    consumer.subscribe("SlowOwn")
    await consumer.start()
    try:
        page = await http.post("/messages/resend", {
            "msg_id": sent.msg_id, "topic": "Slow",
            "target": f"slow-group {consumer.instance.client_id}"})
    finally:
        await consumer.close()
    assert "consumed it: CR_SUCCESS" in html.unescape(page.text), page.text[-1500:]


async def test_the_sampler_goes_on_for_what_the_hung_broker_does_not_hold(
        cluster: Cluster, slow_http: Http, hung: tuple[HungBroker, str]) -> None:
    """A sampling round waits for a hung broker once and records the rates of the
    topics the others hold; no lag while a master is missing (its sum would dip)."""
    await slow_http.post("/topics", {"topic": "Local", "read_queues": "1",
                                     "write_queues": "1"})
    await registered(cluster)
    await _offsets(cluster)
    admin = AdminClient(cluster.namesrv_addr)
    await admin.start()
    try:
        history = History(seconds=60, interval=DEADLINE, min_gap_ms=0)
        sampler = Sampler(admin, history, DEADLINE)
        await sampler.sample()
        async with Producer("local-producers", cluster.namesrv_addr) as producer:
            await producer.send(Message("Local", b"more"),
                                queue=MessageQueue("Local", "broker-a", 0))
        cluster.brokers[0].store.wait_dispatched()
        await sampler.sample()
    finally:
        await admin.close()
    assert len(history.get("put:Local")) == 1 and history.get("put:Local")[0][1] > 0
    assert history.get("lag:local-01") == []
