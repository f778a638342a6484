"""The client against a real cluster: in-process (tidemq.testing: name server + 2 brokers),
and broker processes for failover."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from tests.broker.held_recovery import recovery_held
from tests.broker.wire import Peer
from tests.crash.broker_process import BrokerProcess

from tidemq.broker.app import BrokerApp
from tidemq.client import (
    AdminClient,
    BlockingProducer,
    BlockingPullConsumer,
    ClientConfig,
    ConsumeFromWhere,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    SendStatus,
)
from tidemq.errors import BrokerResponseError
from tidemq.namesrv import NameServerApp, NamesrvConfig
from tidemq.testing import Cluster
from tidemq.types import PullStatus

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool],
                     timeout: float = 5.0) -> T:
    """Ask ``probe`` until ``ok`` holds (no client-side event exists for these facts)."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                value = await probe()
                if ok(value):
                    return value
            except BrokerResponseError:
                pass
            await asyncio.sleep(0.02)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=2) as running:
        yield running


@pytest.fixture
def cfg(cluster: Cluster) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=5.0,
                        pull_error_backoff=0.1)


async def _create(admin: AdminClient, topic: str, queues: int = 2) -> None:
    await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    await eventually(lambda: admin.topic_route(topic), lambda r: len(r.queue_datas) == 2)


async def test_produce_consume_admin_round_trip(cfg: ClientConfig) -> None:
    async with AdminClient(config=cfg) as admin:
        masters = await admin.masters()
        assert sorted(masters) == ["broker-a", "broker-b"]
        await _create(admin, "Orders")
        async with Producer("pg", config=cfg) as producer:
            sent = [await producer.send(Message("Orders", f"m{i}".encode(),
                                                {"TAGS": "a" if i % 2 == 0 else "b",
                                                 "KEYS": f"order-{i}"}))
                    for i in range(8)]
            batch = await producer.send_batch([Message("Orders", b"b0", {"TAGS": "a"}),
                                               Message("Orders", b"b1", {"TAGS": "a"})])
        assert all(r.status is SendStatus.SEND_OK for r in sent)
        assert {r.queue.broker_name for r in sent} == {"broker-a", "broker-b"}

        got: list[MessageExt] = []
        async with PullConsumer("cg", config=cfg, consume_from=FIRST) as consumer:
            consumer.subscribe("Orders", "a")
            for _ in range(20):
                got += await consumer.poll(timeout=1)
                if len(got) >= 6:
                    break
        assert sorted(m.body for m in got) == [b"b0", b"b1", b"m0", b"m2", b"m4", b"m6"]
        assert {m.msg_id for m in got} >= {r.msg_id for r in sent[::2]}

        offsets = await admin.consumer_offsets("cg", "Orders")
        assert all(o.lag == 0 for o in offsets)
        assert sum(o.broker_offset for o in offsets) == 10
        status = await admin.topic_status("Orders")
        assert sum(s.max_offset - s.min_offset for s in status) == 10
        assert all(s.last_update_time >= s.earliest_store_time > 0
                   for s in status if s.max_offset)

        [by_key] = await admin.query_messages_by_key("Orders", "order-3")
        assert by_key.body == b"m3"
        assert (await admin.view_message(sent[5].offset_msg_id)).body == b"m5"
        assert (await admin.view_message(sent[6].msg_id, topic="Orders")).body == b"m6"
        first_of_batch = await admin.message_at(batch.queue, batch.queue_offset)
        assert first_of_batch.body == b"b0"
        assert "Orders" in await admin.topic_list()


async def test_auto_created_topic(cfg: ClientConfig) -> None:
    async with Producer("pg", config=cfg) as producer:
        result = await producer.send(Message("Fresh", b"hello"))
    assert result.status is SendStatus.SEND_OK
    async with PullConsumer("cg", config=cfg, consume_from=FIRST) as consumer:
        consumer.assign([result.queue])
        msgs = await consumer.poll(timeout=3)
    assert [m.body for m in msgs] == [b"hello"]


async def test_long_poll_is_answered_when_a_message_arrives(cfg: ClientConfig) -> None:
    async with AdminClient(config=cfg) as admin, Producer("pg", config=cfg) as producer:
        await _create(admin, "Live", queues=1)
        route = await admin.topic_route("Live")
        queue_owner = route.queue_datas[0].broker_name
        addr = (await admin.masters())[queue_owner]
        async with PullConsumer("cg", config=cfg) as consumer:
            consumer.subscribe("Live")
            polling = asyncio.ensure_future(consumer.poll(timeout=8))
            await eventually(lambda: admin.broker_status(addr),
                             lambda s: s.get("pullHeldCount", "0") != "0")
            assert not polling.done()
            await producer.send(Message("Live", b"now"))
            msgs = await asyncio.wait_for(polling, 4)
    assert [m.body for m in msgs] == [b"now"]


async def test_blocking_client(cfg: ClientConfig) -> None:
    async with AdminClient(config=cfg) as admin:
        await _create(admin, "Sync")

    def work() -> None:
        with BlockingProducer("pg", config=cfg) as producer:
            results = [producer.send(Message("Sync", f"s{i}".encode())) for i in range(4)]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        with BlockingPullConsumer("cg", config=cfg) as consumer:
            queues = consumer.queues("Sync")
            positions = dict.fromkeys(queues, 0)
            bodies: list[bytes] = []
            deadline = time.monotonic() + 5  # dispatch to consume queues is asynchronous
            while len(bodies) < 4 and time.monotonic() < deadline:
                for mq in queues:
                    status, next_offset, lo, _hi, msgs = consumer.pull(mq, positions[mq], 32)
                    assert status in (PullStatus.FOUND, PullStatus.NO_NEW_MSG) and lo == 0
                    bodies += [m.body for m in msgs]
                    positions[mq] = next_offset
            assert sorted(bodies) == [b"s0", b"s1", b"s2", b"s3"]
            mq = next(q for q, off in positions.items() if off)
            consumer.commit(mq, positions[mq])
            assert consumer.committed(mq) == positions[mq]
            assert consumer.get_max_offset(mq) >= positions[mq]

    await asyncio.to_thread(work)


async def test_send_oneway_is_stored(cfg: ClientConfig) -> None:
    async with AdminClient(config=cfg) as admin:
        await _create(admin, "Oneway")
    async with Producer("pg", config=cfg) as producer:
        for i in range(5):
            assert await producer.send_oneway(Message("Oneway", f"o{i}".encode())) is None
    got: list[MessageExt] = []
    async with PullConsumer("cg", config=cfg, consume_from=FIRST) as consumer:
        consumer.subscribe("Oneway")
        async with asyncio.timeout(10):  # no answer to wait for: read until all are there
            while len(got) < 5:
                got += await consumer.poll(timeout=1)
    assert sorted(m.body for m in got) == [f"o{i}".encode() for i in range(5)]


async def test_send_fails_over_when_a_broker_is_killed(tmp_path: Path) -> None:
    """Two broker processes; broker-a is killed with SIGKILL between sends: every later
    send is retried onto broker-b, acknowledged, and stored there."""
    ns = NameServerApp(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
    await ns.start()
    a = BrokerProcess(tmp_path / "a", ns.address, {})
    b = BrokerProcess(tmp_path / "b", ns.address, {"brokerName": "broker-b"})
    try:
        # Both start at once; both have ended their start before a failure is raised
        # (the stops below then find each as it is).
        for started in await asyncio.gather(asyncio.to_thread(a.start),
                                            asyncio.to_thread(b.start), return_exceptions=True):
            if isinstance(started, BaseException):
                raise started
        cfg = ClientConfig(namesrv_addr=(ns.address,), pull_error_backoff=0.1)
        async with AdminClient(config=cfg) as admin:
            for broker in (a, b):
                await admin.create_topic("Failover", broker_addr=broker.addr,
                                         read_queue_nums=2, write_queue_nums=2)
            await eventually(lambda: admin.topic_route("Failover"),
                             lambda r: len(r.queue_datas) == 2, timeout=30)
        async with Producer("pg", config=cfg) as producer:
            before = [await producer.send(Message("Failover", f"before-{i}".encode()))
                      for i in range(4)]
            assert {r.queue.broker_name for r in before} == {"broker-a", "broker-b"}
            await asyncio.to_thread(a.kill9)
            after = [await producer.send(Message("Failover", f"after-{i}".encode()))
                     for i in range(6)]
        assert all(r.status is SendStatus.SEND_OK for r in after)
        assert {r.queue.broker_name for r in after} == {"broker-b"}
        stored = []
        async with Peer(b.addr) as peer:
            for queue_id in range(2):
                end = max((r.queue_offset + 1 for r in after if r.queue.queue_id == queue_id),
                          default=0)
                # dispatch to the consume queue follows the acknowledgement (bounded)
                await eventually(lambda q=queue_id: peer.max_offset("Failover", q),
                                 lambda n, end=end: n >= end)
                stored += await peer.messages("Failover", queue_id)
        assert sorted(m.body for m in stored if m.body.startswith(b"after")) == [
            f"after-{i}".encode() for i in range(6)]
        assert {(m.queue_id, m.queue_offset) for m in stored} >= {
            (r.queue.queue_id, r.queue_offset) for r in after}
        # A consumer still reads everything broker-b holds while broker-a stays down.
        got: list[MessageExt] = []
        async with PullConsumer("cg", config=cfg, consume_from=FIRST) as consumer:
            consumer.subscribe("Failover")
            async with asyncio.timeout(30):
                while len([m for m in got if m.body.startswith(b"after")]) < 6:
                    got += await consumer.poll(timeout=1)
        assert {m.broker_name for m in got} == {"broker-b"}
        assert sorted(m.body for m in got) == sorted(m.body for m in stored)
    finally:
        await asyncio.to_thread(a.stop)
        await asyncio.to_thread(b.stop)
        await ns.stop()


async def test_sends_while_a_broker_restarts_are_retried_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """broker-a comes back on its old port and is held in its store recovery: the
    producer's sends to it are refused at connect (not answered 'request code not
    supported') and go to broker-b; none fails."""
    async with Cluster(tmp_path, brokers=2) as cluster:
        cfg = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), pull_error_backoff=0.1)
        async with AdminClient(config=cfg) as admin:
            await _create(admin, "Restarting")
        a = cluster.brokers[0]
        async with Producer("pg", config=cfg) as producer:
            first = [await producer.send(Message("Restarting", b"x")) for _ in range(4)]
            assert {r.queue.broker_name for r in first} == {"broker-a", "broker-b"}
            await a.stop()
            # its old port; an HA port of any free one (the default, listenPort + 1, may
            # have been taken by another socket meanwhile)
            again = BrokerApp(dataclasses.replace(a.config, listen_port=a.server.port,
                                                  ha_listen_port=0),
                              a.store_config)
            try:
                async with recovery_held(again, monkeypatch):
                    during = [await producer.send(Message("Restarting", b"y"))
                              for _ in range(8)]
            finally:
                cluster.brokers[0] = again  # the cluster stops it
    assert all(r.status is SendStatus.SEND_OK for r in during)
    assert {r.queue.broker_name for r in during} == {"broker-b"}
