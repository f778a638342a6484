"""Offsets over real TCP (remoting.md §2.9): QUERY/UPDATE_CONSUMER_OFFSET with the zero
quirk, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME."""

from __future__ import annotations

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster


def query(topic: str, queue_id: int = 0, group: str = "og", **extra: object) -> RemotingCommand:
    return wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=topic,
                        queueId=queue_id, **extra)


def update(topic: str, offset: int, queue_id: int = 0, group: str = "og") -> RemotingCommand:
    return wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup=group, topic=topic,
                        queueId=queue_id, commitOffset=offset)


async def test_update_then_query(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("O", 2))
    for _ in range(42):
        await peer.ok(wire.send("O", queue_id=1))
    await wire.dispatched(cluster.brokers[0])
    resp = await peer.ok(update("O", 42, queue_id=1))
    assert resp.ext_fields == {}
    assert (await peer.ok(query("O", 1))).ext_fields["offset"] == "42"
    await peer.ok(update("O", 7, queue_id=1))  # going backwards is allowed (reset)
    assert (await peer.ok(query("O", 1))).ext_fields["offset"] == "7"
    # Other groups and queues are separate.
    other = query("O", 1, group="other", setZeroIfNotFound="false")
    assert (await peer(other)).code == ResponseCode.QUERY_NOT_FOUND


async def test_oneway_update_is_applied_without_an_answer(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("O", 1))
    for _ in range(9):
        await peer.ok(wire.send("O"))
    await wire.dispatched(cluster.brokers[0])
    await peer.client.oneway(peer.addr, update("O", 9))
    # Frames on one connection are handled in order: the query sees the update.
    assert (await peer.ok(query("O"))).ext_fields["offset"] == "9"


async def test_negative_commit_offset_is_rejected(peer: Peer) -> None:
    await peer.ok(wire.create_topic("O", 1))
    resp = await peer(update("O", -1))
    assert resp.code == ResponseCode.INVALID_PARAMETER and "negative" in resp.remark


@pytest.mark.parametrize(("topic", "queue_id", "offset", "code", "words"), [
    ("V", 0, 1 << 62, ResponseCode.INVALID_PARAMETER, "beyond the max offset 2"),
    ("V", 0, 3, ResponseCode.INVALID_PARAMETER, "beyond the max offset 2"),
    ("V", 2, 0, ResponseCode.INVALID_PARAMETER, "queueId 2 is out of range"),
    ("V", -1, 0, ResponseCode.INVALID_PARAMETER, "queueId -1 is out of range"),
    ("NoSuchTopic", 0, 0, ResponseCode.TOPIC_NOT_EXIST, "NoSuchTopic does not exist"),
])
async def test_impossible_commit_is_refused_and_stores_nothing(
        cluster: Cluster, peer: Peer, topic: str, queue_id: int, offset: int, code: int,
        words: str) -> None:
    await peer.ok(wire.create_topic("V", 2))
    for _ in range(2):
        await peer.ok(wire.send("V", queue_id=0))
    await wire.dispatched(cluster.brokers[0])
    resp = await peer(update(topic, offset, queue_id=queue_id))
    assert resp.code == code and words in resp.remark, resp.remark
    assert (await peer(query(topic, queue_id, setZeroIfNotFound="false"))).code == \
        ResponseCode.QUERY_NOT_FOUND
    # The queue's own limit is still accepted: "consumed everything".
    await peer.ok(update("V", 2, queue_id=0))
    assert (await peer.ok(query("V", 0))).ext_fields["offset"] == "2"


async def test_zero_quirk(cluster: Cluster, peer: Peer) -> None:
    """No stored offset: 0 when the queue still holds message 0, else 22."""
    await peer.ok(wire.create_topic("Q", 2))
    assert (await peer(query("Q"))).code == ResponseCode.QUERY_NOT_FOUND  # empty queue
    await peer.ok(wire.send("Q"))
    await wire.dispatched(cluster.brokers[0])
    assert (await peer.ok(query("Q"))).ext_fields["offset"] == "0"
    assert (await peer.ok(query("Q", setZeroIfNotFound="true"))).ext_fields["offset"] == "0"
    resp = await peer(query("Q", setZeroIfNotFound="false"))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND and resp.remark
    assert (await peer(query("Q", 1))).code == ResponseCode.QUERY_NOT_FOUND
    assert (await peer(query("NoSuchTopic"))).code == ResponseCode.QUERY_NOT_FOUND


async def test_max_and_min_offsets(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("M", 2))
    assert await peer.max_offset("M") == 0
    for _ in range(3):
        await peer.ok(wire.send("M"))
    await wire.dispatched(cluster.brokers[0])
    assert await peer.max_offset("M") == 3
    assert await peer.max_offset("M", 1) == 0
    assert await peer.max_offset("NoSuchTopic") == 0
    resp = await peer.ok(wire.request(RequestCode.GET_MIN_OFFSET, topic="M", queueId=0))
    assert resp.ext_fields["offset"] == "0"


async def _store_times(cluster: Cluster, peer: Peer, n: int) -> list[int]:
    await peer.ok(wire.create_topic("S", 1))
    for i in range(n):
        await peer.ok(wire.send("S", f"{i}".encode()))
    await wire.dispatched(cluster.brokers[0])
    return [m.store_timestamp for m in await peer.messages("S")]


def search(ts: int, boundary: str | None = None) -> RemotingCommand:
    extra = {} if boundary is None else {"boundaryType": boundary}
    return wire.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="S", queueId=0,
                        timestamp=ts, **extra)


async def test_search_offset_by_timestamp(cluster: Cluster, peer: Peer) -> None:
    times = await _store_times(cluster, peer, 6)
    assert times == sorted(times)

    async def found(ts: int, boundary: str | None = None) -> int:
        return int((await peer.ok(search(ts, boundary))).ext_fields["offset"])

    assert await found(0) == 0
    assert await found(times[-1] + 10_000) == 6
    for i, ts in enumerate(times):
        first = times.index(ts)
        last = len(times) - 1 - times[::-1].index(ts)
        assert await found(ts) == first, i
        assert await found(ts, "LOWER") == first
        assert await found(ts, "upper") == last


async def test_earliest_msg_store_time(cluster: Cluster, peer: Peer) -> None:
    times = await _store_times(cluster, peer, 2)
    resp = await peer.ok(wire.request(RequestCode.GET_EARLIEST_MSG_STORETIME, topic="S",
                                      queueId=0))
    assert int(resp.ext_fields["timestamp"]) == times[0]
    resp = await peer(wire.request(RequestCode.GET_EARLIEST_MSG_STORETIME, topic="Empty",
                                   queueId=0))
    assert resp.code != ResponseCode.SUCCESS and resp.remark


@pytest.mark.parametrize("code", [RequestCode.QUERY_CONSUMER_OFFSET,
                                  RequestCode.UPDATE_CONSUMER_OFFSET,
                                  RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                                  RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                  RequestCode.GET_EARLIEST_MSG_STORETIME])
async def test_missing_fields_are_invalid_parameter(peer: Peer, code: int) -> None:
    resp = await peer(wire.request(code, topic="S", consumerGroup="g"))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark and "queueId" in resp.remark


@pytest.mark.parametrize("queue_id", ["0" * 21, "0" * 5000 + "1"])
async def test_absurdly_long_numbers_are_invalid_parameter(peer: Peer, queue_id: str) -> None:
    """A number of more than twenty digits, zero-padded or not, is refused with a remark
    saying so, and the connection goes on serving."""
    await peer.ok(wire.create_topic("S", 1))
    resp = await peer(wire.request(RequestCode.GET_MAX_OFFSET, topic="S", queueId=queue_id))
    assert resp.code == ResponseCode.INVALID_PARAMETER, (resp.code, resp.remark)
    assert resp.remark and "queueId" in resp.remark
    assert f"has {len(queue_id)} digits; a number has at most 20" in resp.remark
    assert await peer.max_offset("S") == 0


async def test_pulled_offsets_match_max_offset(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("M", 1))
    for _ in range(4):
        await peer.ok(wire.send("M"))
    await wire.dispatched(cluster.brokers[0])
    resp = await peer.ok(wire.pull("M", 0, 0))
    assert int(resp.ext_fields["maxOffset"]) == await peer.max_offset("M") == 4
    assert len(decode_messages(resp.full_body())) == 4
