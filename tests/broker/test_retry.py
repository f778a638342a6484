"""CONSUMER_SEND_MSG_BACK and retry sends over real TCP (remoting.md §2.11, §2.7 step 5):
the delay-level ladder, reconsume counting, dead letters after the maximum and for a
negative delay level."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.delivery import collect, parked, retry_send, send_back, stored
from tests.broker.held import Held, slow_writes
from tests.broker.wire import Peer

import tidemq.broker.topics as topics_module
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.record import pack_host
from tidemq.testing import Cluster
from tidemq.types import FlushDiskType, MessageExt


def _offset_id(msg: MessageExt) -> str:
    return encode_offset_msg_id(pack_host(msg.store_host), msg.commit_log_offset)


#: Levels 1..5 = 100..500 ms; level 3 (the first automatic retry) waits 300 ms.
LADDER = "100ms 200ms 300ms 400ms 500ms"


@pytest.fixture
async def short(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, broker={"message_delay_level": LADDER}) as c:
        yield c


@pytest.fixture
async def peer(short: Cluster) -> AsyncIterator[Peer]:
    async with Peer(short.brokers[0].broker_addr) as p:
        await p.ok(wire.create_topic("Rt", 1))
        yield p


async def test_send_back_waits_on_the_ladder_then_reaches_the_retry_topic(
        short: Cluster, peer: Peer) -> None:
    broker = short.brokers[0]
    original = await stored(peer, "Rt", b"payload",
                            properties=wire.props(tags="A", keys="k1"))
    await peer.ok(send_back(original.commit_log_offset, "g1"))
    await wire.dispatched(broker)
    [held] = parked(broker, 3)  # delayLevel 0 -> 3 + reconsumeTimes(0)
    assert held.reconsume_times == 1
    [retry] = await collect(peer, "%RETRY%g1", 1)
    assert retry.store_timestamp >= held.store_timestamp + 300
    assert retry.body == b"payload" and retry.uniq_key == original.uniq_key
    assert (retry.tags, retry.keys, retry.flag) == ("A", ["k1"], original.flag)
    assert retry.born_timestamp == original.born_timestamp
    assert retry.reconsume_times == 1
    props = retry.properties
    assert props["RETRY_TOPIC"] == "Rt"
    assert props["ORIGIN_MESSAGE_ID"] == _offset_id(original)
    assert props["RECONSUME_TIME"] == "1"
    assert "DELAY" not in props
    tc = broker.topics.get("%RETRY%g1")
    assert tc is not None and (tc.write_queue_nums, tc.perm) == (1, 6)


async def test_each_hop_counts_and_climbs_one_level(short: Cluster, peer: Peer) -> None:
    broker = short.brokers[0]
    original = await stored(peer, "Rt")
    first_id = _offset_id(original)
    msg = original
    for hop, level in enumerate((3, 4, 5), start=1):
        await peer.ok(send_back(msg.commit_log_offset, "g2"))
        await wire.dispatched(broker)
        assert len(parked(broker, level)) == 1
        [msg] = await collect(peer, "%RETRY%g2", 1, offset=hop - 1)
        assert msg.reconsume_times == hop
        assert msg.properties["RECONSUME_TIME"] == str(hop)
        assert msg.properties["RETRY_TOPIC"] == "Rt"  # the first hop's, kept
        assert msg.properties["ORIGIN_MESSAGE_ID"] == first_id
    # Past the ladder's end the last level is used.
    await peer.ok(send_back(msg.commit_log_offset, "g2"))
    # An explicit delay level is taken as asked.
    await peer.ok(send_back(original.commit_log_offset, "g2", 1))
    await wire.dispatched(broker)
    assert (len(parked(broker, 5)), len(parked(broker, 1))) == (2, 1)


async def test_dead_letter_after_the_maximum(short: Cluster, peer: Peer) -> None:
    broker = short.brokers[0]
    msg = await stored(peer, "Rt", b"poison")
    for hop in range(2):  # reconsumeTimes 0 and 1 are below maxReconsumeTimes 2
        await peer.ok(send_back(msg.commit_log_offset, "g3", 1, max_times=2))
        [msg] = await collect(peer, "%RETRY%g3", 1, offset=hop)
    await peer.ok(send_back(msg.commit_log_offset, "g3", 1, max_times=2))
    await wire.dispatched(broker)
    assert len(parked(broker, 1)) == 2  # the third went straight to the DLQ
    [dead] = await peer.messages("%DLQ%g3")
    assert dead.body == b"poison" and dead.reconsume_times == 3
    assert "DELAY" not in dead.properties and dead.properties["RETRY_TOPIC"] == "Rt"
    tc = broker.topics.get("%DLQ%g3")
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, 6)


async def test_negative_delay_level_is_a_dead_letter_at_once(short: Cluster, peer: Peer) -> None:
    msg = await stored(peer, "Rt")
    await peer.ok(send_back(msg.commit_log_offset, "g4", -1))
    await wire.dispatched(short.brokers[0])
    [dead] = await peer.messages("%DLQ%g4")
    assert dead.reconsume_times == 1 and dead.uniq_key == msg.uniq_key
    assert not any(parked(short.brokers[0], level) for level in range(1, 6))


async def test_the_groups_retry_max_times_applies_without_a_request_value(
        short: Cluster, peer: Peer) -> None:
    await peer.ok(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                               b'{"groupName":"g5","retryMaxTimes":0}'))
    msg = await stored(peer, "Rt")
    await peer.ok(send_back(msg.commit_log_offset, "g5", 1))
    await wire.dispatched(short.brokers[0])
    assert len(await peer.messages("%DLQ%g5")) == 1
    # Clients older than V3_4_9 (version 121) cannot lower the maximum.
    old = send_back(msg.commit_log_offset, "g6", 1, max_times=0)
    old.version = 120
    await peer.ok(old)
    assert short.brokers[0].topics.get("%DLQ%g6") is None


async def test_send_back_errors(short: Cluster, peer: Peer) -> None:
    msg = await stored(peer, "Rt")
    for offset in (msg.commit_log_offset + 1, 10**12, -1):
        resp = await peer(send_back(offset, "g7"))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark and "look message by offset failed" in resp.remark
    resp = await peer(send_back(msg.commit_log_offset, "bad group"))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    short.brokers[0].subscription_groups.auto_create = False
    resp = await peer(send_back(msg.commit_log_offset, "unknown"))
    assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and resp.remark


# ---------------------------------------------------------------- the send path (§2.7 step 5)


async def test_retry_sends_over_the_maximum_go_to_the_dlq(short: Cluster, peer: Peer) -> None:
    resp = await peer.ok(retry_send("g8", b"third", reconsume=3, max_times=2))
    assert resp.ext_fields["queueId"] == "0"
    await wire.dispatched(short.brokers[0])
    [dead] = await peer.messages("%DLQ%g8")
    assert dead.body == b"third" and dead.reconsume_times == 3
    await peer.ok(retry_send("g8", b"second", reconsume=2, max_times=2))
    await wire.dispatched(short.brokers[0])
    [again] = await peer.messages("%RETRY%g8")
    assert again.body == b"second" and again.reconsume_times == 2
    # Counters a client left in the properties count too.
    text = wire.props(RECONSUME_TIME="5", MAX_RECONSUME_TIMES="4")
    await peer.ok(retry_send("g8", b"props", properties=text))
    await wire.dispatched(short.brokers[0])
    assert [m.body for m in await peer.messages("%DLQ%g8")] == [b"third", b"props"]


async def test_a_delayed_retry_send_waits_then_arrives(short: Cluster, peer: Peer) -> None:
    start = int(time.time() * 1000)
    await peer.ok(retry_send("g9", properties=wire.props(DELAY="2", RETRY_TOPIC="Rt"),
                             reconsume=1))
    await wire.dispatched(short.brokers[0])
    assert len(parked(short.brokers[0], 2)) == 1
    [msg] = await collect(peer, "%RETRY%g9", 1)
    assert msg.store_timestamp >= start + 200 and msg.reconsume_times == 1


async def test_batches_cannot_target_a_retry_topic(short: Cluster, peer: Peer) -> None:
    cmd = wire.send_batch("%RETRY%g10", [(b"a", wire.props()), (b"b", wire.props())])
    resp = await peer(cmd)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and resp.remark


async def test_under_sync_flush_the_answer_waits_for_durability(tmp_path: Path) -> None:
    store = {"flush_disk_type": FlushDiskType.SYNC_FLUSH}
    async with Cluster(tmp_path, broker={"message_delay_level": LADDER}, store=store) as c:
        broker = c.brokers[0]
        async with Peer(broker.broker_addr) as p:
            msg = await stored(p, "Sync")
            await p.ok(send_back(msg.commit_log_offset, "gs", 1))
            await wire.dispatched(broker)
            [held] = parked(broker, 1)
            assert broker.store.commitlog.flushed_offset >= held.physical_offset + held.total_size
            [again] = await collect(p, "%RETRY%gs", 1)
            assert again.reconsume_times == 1
            # The delivery's checkpoint is written while running, once the copy is flushed.
            path = broker.layout.config_file("delayOffset.json")
            deadline = time.monotonic() + 5
            while not path.exists():  # no event for a file appearing: bounded polling
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert json.loads(path.read_text()) == {"offsetTable": {"1": 1}}


async def _while_deleted(short: Cluster, peer: Peer, held: Held,
                         monkeypatch: pytest.MonkeyPatch, topic: str,
                         *requests: RemotingCommand) -> list[RemotingCommand]:
    """The answers to ``requests``, sent while ``topic``'s deletion is held after its
    mark (step 2); the deletion is answered before this returns."""
    slow_writes(monkeypatch, topics_module, held)
    async with Peer(short.brokers[0].broker_addr) as deleter:
        deleting = asyncio.create_task(deleter.ok(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic=topic)))
        await held.entered_soon()
        assert topic in short.brokers[0].store.topic_deletion_marks()
        answers = [await peer(cmd) for cmd in requests]
        held.release.set()
        await deleting
    assert held.gave_up == [False]
    return answers


async def test_a_dead_letter_while_its_dlq_is_deleted_is_refused_not_lost(
        short: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """A send-back or a retry send bound for the DLQ while the DLQ's deletion is under way
    would be stored above the deletion's mark, into a queue the deletion removes: each is
    refused (the consumer retries it) with a remark that says why, and the first one after
    the deletion creates the DLQ again from offset 0."""
    broker = short.brokers[0]
    first = await stored(peer, "Rt", b"first")
    await peer.ok(send_back(first.commit_log_offset, "gd", -1))  # the DLQ exists
    second = await stored(peer, "Rt", b"second")
    answers = await _while_deleted(short, peer, held, monkeypatch, "%DLQ%gd",
                                   send_back(second.commit_log_offset, "gd", -1),
                                   retry_send("gd", b"over", reconsume=3, max_times=2))
    for during in answers:
        assert during.code == ResponseCode.SYSTEM_ERROR, during.remark
        assert "%DLQ%gd is being deleted" in (during.remark or "")
    assert broker.topics.get("%DLQ%gd") is None
    await peer.ok(send_back(second.commit_log_offset, "gd", -1))
    [dead] = await collect(peer, "%DLQ%gd", 1)
    assert (dead.body, dead.queue_offset) == (b"second", 0)


async def test_a_send_back_while_its_retry_topic_is_deleted_is_refused_not_lost(
        short: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """As for a DLQ: a send-back to the group's retry topic while that topic is deleted is
    refused, and the one after the deletion reaches the topic created again."""
    first = await stored(peer, "Rt", b"first")
    await peer.ok(send_back(first.commit_log_offset, "gr", 1))
    await collect(peer, "%RETRY%gr", 1)  # the retry topic exists, its message delivered
    second = await stored(peer, "Rt", b"second")
    [during] = await _while_deleted(short, peer, held, monkeypatch, "%RETRY%gr",
                                    send_back(second.commit_log_offset, "gr", 1))
    assert during.code == ResponseCode.SYSTEM_ERROR, during.remark
    assert "%RETRY%gr is being deleted" in (during.remark or "")
    await peer.ok(send_back(second.commit_log_offset, "gr", 1))
    [again] = await collect(peer, "%RETRY%gr", 1)
    assert (again.body, again.queue_offset) == (b"second", 0)
