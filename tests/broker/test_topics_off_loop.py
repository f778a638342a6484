"""The topic table of thousands of topics takes a while to encode; the broker encodes it
on a thread for GET_ALL_TOPIC_CONFIG and for its registrations with the name servers,
its event loop serving every client meanwhile. Each test holds the encoding until the
test has been answered another request: on the loop, nothing would answer it."""

from __future__ import annotations

import asyncio
import json
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest
from tests.broker import wire
from tests.broker.held import Held, answered_meanwhile, created_while_held, slow_writes
from tests.broker.wire import Peer
from tests.codec.test_topic_table import slices_of_three

import tidemq.broker.context as context_module
import tidemq.broker.processors.admin as admin_module
import tidemq.broker.registrar as registrar_module
import tidemq.broker.topics as topics_module
from tidemq.broker.registrar import Registrar
from tidemq.broker.topics import TopicManager
from tidemq.codec.bodies import (
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
    encode_body,
)
from tidemq.codec.command import RequestCode
from tidemq.net import RemotingClient
from tidemq.store.layout import StoreLayout
from tidemq.testing import Cluster


def slow_encoding(monkeypatch: pytest.MonkeyPatch, module: Any, held: Held) -> None:
    """``module``'s encoding of the topic table (a slice at a time) held."""
    encode = module.encode_topics

    def slow(body: Any) -> bytes:
        held.hold()
        data: bytes = encode(body)
        return data

    monkeypatch.setattr(module, "encode_topics", slow)


async def test_all_topic_configs_are_encoded_off_the_loop(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    await peer.ok(wire.create_topic("AT", 2))
    slow_encoding(monkeypatch, admin_module, held)
    async with Peer(cluster.brokers[0].broker_addr) as other:
        task = asyncio.create_task(other.ok(wire.request(RequestCode.GET_ALL_TOPIC_CONFIG)))
        await answered_meanwhile(peer, held)
        resp = await task
    assert held.gave_up == [False]
    assert json.loads(bytes(resp.body))["topicConfigTable"]["AT"]["readQueueNums"] == 2


async def test_a_registration_encodes_the_topics_off_the_loop(
        cluster: Cluster, namesrv: Peer, peer: Peer, held: Held,
        monkeypatch: pytest.MonkeyPatch) -> None:
    slow_encoding(monkeypatch, registrar_module, held)
    await created_while_held(cluster.brokers[0].broker_addr, peer, held, "Reg", 3)
    await wire.eventually_route(namesrv, "Reg", lambda r: len(r.queue_datas) == 1)


async def test_a_table_changed_while_encoding_is_encoded_again() -> None:
    tables = [{"Old": TopicConfig(topic_name="Old")}]
    version = [0]

    def topics() -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(topic_config_table=dict(tables[-1]),
                                           data_version=DataVersion(counter=version[0]))

    encode = registrar_module.encode_topics
    calls: list[int] = []

    def changing(body: Any) -> bytes:
        calls.append(1)
        if len(calls) == 1:  # the loop changes the table while the first encoding runs
            tables.append({"New": TopicConfig(topic_name="New")})
            version[0] += 1
        data: bytes = encode(body)
        return data

    client = RemotingClient()
    registrar = Registrar(client, [], cluster="c", broker_name="b", broker_id=0,
                          broker_addr=lambda: "127.0.0.1:1", topics=topics, period_ms=1000)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registrar_module, "encode_topics", changing)
        body, crc = await registrar._body()
    await client.close()
    assert crc == zlib.crc32(body) & 0x7FFFFFFF
    table = json.loads(body)["topicConfigSerializeWrapper"]["topicConfigTable"]
    assert list(table) == ["New"] and len(calls) == 2


async def test_a_created_topic_is_written_off_the_loop_before_the_answer(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    slow_writes(monkeypatch, topics_module, held)
    await created_while_held(cluster.brokers[0].broker_addr, peer, held, "Wr", 2)
    saved = json.loads(cluster.brokers[0].topics.path.read_text())
    assert saved["topicConfigTable"]["Wr"]["readQueueNums"] == 2


async def test_a_created_topic_is_written_before_the_answer_however_slow_the_disk(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    # the wait for the name servers is bounded (ROUTE_WAIT); the wait for the file is not:
    # an answered creation must outlive a kill -9 right after
    monkeypatch.setattr(context_module, "ROUTE_WAIT", 0.0)
    slow_writes(monkeypatch, topics_module, held)
    async with Peer(cluster.brokers[0].broker_addr) as creator:
        task = asyncio.create_task(creator.ok(wire.create_topic("Slow", 2)))
        await held.entered_soon()
        await peer.ok(wire.request(RequestCode.GET_BROKER_CONFIG))  # the loop serves on
        done, _ = await asyncio.wait([task], timeout=0.5)
        assert not done, "answered while topics.json did not hold the topic yet"
        held.release.set()
        await task
    saved = json.loads(cluster.brokers[0].topics.path.read_text())
    assert saved["topicConfigTable"]["Slow"]["readQueueNums"] == 2


async def test_a_topic_a_send_creates_is_written_before_the_send_is_answered(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    # what a send acknowledged must outlive a kill -9 right after: its topic's config too
    loop_thread = threading.current_thread()
    write = topics_module.atomic_write

    def slow_off_the_loop(path: Path, data: bytes) -> None:
        if threading.current_thread() is not loop_thread:
            held.hold()  # a slow disk, where waiting for it does not stop the loop
        write(path, data)

    monkeypatch.setattr(topics_module, "atomic_write", slow_off_the_loop)
    try:
        await peer.ok(wire.send("Auto", b"x"))  # created from TBW102
        saved = json.loads(cluster.brokers[0].topics.path.read_text())
        assert "Auto" in saved["topicConfigTable"]
    finally:
        held.release.set()


async def test_a_deleted_topic_is_written_off_the_loop_before_the_answer(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    await peer.ok(wire.create_topic("Gone", 2))
    slow_writes(monkeypatch, topics_module, held)
    async with Peer(cluster.brokers[0].broker_addr) as deleter:
        task = asyncio.create_task(deleter.ok(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic="Gone")))
        await answered_meanwhile(peer, held)
        await task
    assert held.gave_up == [False]
    saved = json.loads(cluster.brokers[0].topics.path.read_text())
    assert "Gone" not in saved["topicConfigTable"]


def test_the_table_is_written_a_slice_of_topics_a_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topics = TopicManager(StoreLayout(tmp_path), broker_name="b", cluster_name="c",
                          auto_create=False, default_queue_nums=4)
    topics.load()
    for i in range(7):
        topics.upsert(TopicConfig(topic_name=f"T{i}"))
    seen = slices_of_three(monkeypatch)
    topics.persist()
    assert seen and max(seen) <= 3
    assert topics.path.read_bytes() == encode_body(TopicConfigSerializeWrapper(
        topic_config_table=topics.topics, data_version=topics.data_version))


def test_a_deferred_change_is_marked_and_a_pending_write_takes_it(tmp_path: Path) -> None:
    topics = TopicManager(StoreLayout(tmp_path), broker_name="b", cluster_name="c",
                          auto_create=False, default_queue_nums=4)
    with topics.file.deferred():
        assert topics.upsert(TopicConfig(topic_name="Later"))
    assert not topics.path.exists()
    topics.file.write_pending()
    saved = json.loads(topics.path.read_text())
    assert "Later" in saved["topicConfigTable"]
    assert saved["dataVersion"]["counter"] == 1
    topics.path.unlink()
    topics.file.write_pending()  # nothing changed since
    assert not topics.path.exists()
