"""PULL_MESSAGE (11) / LITE_PULL_MESSAGE (361) over real TCP: every row of the status
table in broker/processors/pull.py (remoting.md §2.8), tag filtering, the piggy-backed
commit and the count and byte limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import PULL_COMMIT, Peer

from tidemq.broker.app import BrokerApp
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster


async def fill(peer: Peer, broker: BrokerApp, topic: str, tags: list[str],
               queue_id: int = 0) -> None:
    """Create ``topic`` and store one message per tag on ``queue_id``, all visible."""
    await peer.ok(wire.create_topic(topic, 2))
    for i, tag in enumerate(tags):
        await peer.ok(wire.send(topic, f"m{i}".encode(), queue_id=queue_id,
                                properties=wire.props(tags=tag)))
    await wire.dispatched(broker)


def status(resp: RemotingCommand) -> tuple[int, int]:
    return resp.code, int(resp.ext_fields["nextBeginOffset"])


@pytest.fixture
async def five(cluster: Cluster, peer: Peer) -> AsyncIterator[Peer]:
    """Topic ``P`` with messages tagged a b c a b on queue 0; queue 1 never written."""
    await fill(peer, cluster.brokers[0], "P", ["a", "b", "c", "a", "b"])
    yield peer


async def test_found_returns_records_and_the_next_offset(five: Peer) -> None:
    resp = await five(wire.pull("P", 0, 1))
    assert status(resp) == (ResponseCode.SUCCESS, 5)
    assert resp.remark == "FOUND"
    assert (resp.ext_fields["minOffset"], resp.ext_fields["maxOffset"]) == ("0", "5")
    assert resp.ext_fields["suggestWhichBrokerId"] == "0"
    msgs = decode_messages(resp.full_body())
    assert [m.queue_offset for m in msgs] == [1, 2, 3, 4]
    assert [m.body for m in msgs] == [b"m1", b"m2", b"m3", b"m4"]


async def test_lite_pull_is_the_same_request(five: Peer) -> None:
    resp = await five(wire.pull("P", 0, 3, code=RequestCode.LITE_PULL_MESSAGE))
    assert status(resp) == (ResponseCode.SUCCESS, 5)


@pytest.mark.parametrize(("offset", "expected"), [
    (5, (ResponseCode.PULL_NOT_FOUND, 5)),      # caught up
    (6, (ResponseCode.PULL_OFFSET_MOVED, 5)),   # past the end
    (10**12, (ResponseCode.PULL_OFFSET_MOVED, 5)),
])
async def test_offsets_at_or_beyond_the_end(five: Peer, offset: int,
                                            expected: tuple[int, int]) -> None:
    assert status(await five(wire.pull("P", 0, offset))) == expected


@pytest.mark.parametrize(("offset", "expected"), [
    (0, (ResponseCode.PULL_NOT_FOUND, 0)),
    (3, (ResponseCode.PULL_OFFSET_MOVED, 0)),
])
async def test_queue_never_written(five: Peer, offset: int, expected: tuple[int, int]) -> None:
    assert status(await five(wire.pull("P", 1, offset))) == expected


async def test_nothing_matching_the_filter_is_retry_immediately(five: Peer) -> None:
    resp = await five(wire.pull("P", 0, 0, subscription="zzz"))
    assert status(resp) == (ResponseCode.PULL_RETRY_IMMEDIATELY, 5)
    assert not resp.full_body()


@pytest.mark.parametrize(("expr", "want"), [
    ("a || b", [0, 1, 3, 4]),
    ("c", [2]),
    ("b||zzz", [1, 4]),
    ("*", [0, 1, 2, 3, 4]),
    ("", [0, 1, 2, 3, 4]),
])
async def test_tag_filter(five: Peer, expr: str, want: list[int]) -> None:
    msgs = await five.messages("P", 0, 0, subscription=expr)
    assert [m.queue_offset for m in msgs] == want


async def test_filter_comes_from_the_heartbeat_without_the_subscription_bit(
        five: Peer) -> None:
    await five.ok(wire.heartbeat("cid-1", consumer_groups={"hg": {"P": "c"}}))
    msgs = await five.messages("P", 0, 0, group="hg")
    assert [m.tags for m in msgs] == ["c"]
    # The request's own expression wins when the bit is set.
    msgs = await five.messages("P", 0, 0, group="hg", subscription="a")
    assert [m.tags for m in msgs] == ["a", "a"]


async def test_max_msg_nums_limits_the_batch(five: Peer) -> None:
    resp = await five(wire.pull("P", 0, 0, max_nums=2))
    assert status(resp) == (ResponseCode.SUCCESS, 2)
    assert len(decode_messages(resp.full_body())) == 2


async def test_max_msg_bytes_limits_the_batch_but_admits_one(five: Peer) -> None:
    one = (await five.messages("P", 0, 0, max_nums=1))[0].store_size
    resp = await five(wire.pull("P", 0, 0, max_bytes=2 * one + 1))
    assert status(resp) == (ResponseCode.SUCCESS, 2)
    resp = await five(wire.pull("P", 0, 0, max_bytes=1))
    assert status(resp) == (ResponseCode.SUCCESS, 1)


async def test_commit_offset_is_piggy_backed_only_with_the_flag(five: Peer) -> None:
    async def committed() -> int:
        resp = await five(wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="pg1",
                                       topic="P", queueId=0, setZeroIfNotFound="false"))
        return int(resp.ext_fields["offset"]) if resp.code == 0 else -1

    await five.ok(wire.pull("P", 0, 3, group="pg1", commit_offset=3))
    assert await committed() == -1
    await five.ok(wire.pull("P", 0, 3, group="pg1", commit_offset=3, sys_flag=PULL_COMMIT))
    assert await committed() == 3
    # Past the queue's max offset (5): the pull is served, the commit is dropped.
    await five.ok(wire.pull("P", 0, 3, group="pg1", commit_offset=1 << 62,
                            sys_flag=PULL_COMMIT))
    await five.ok(wire.pull("P", 0, 3, group="pg1", commit_offset=6, sys_flag=PULL_COMMIT))
    assert await committed() == 3
    await five.ok(wire.pull("P", 0, 3, group="pg1", commit_offset=5, sys_flag=PULL_COMMIT))
    assert await committed() == 5


@pytest.mark.parametrize(("cmd", "code"), [
    (wire.pull("NoSuchTopic", 0, 0), ResponseCode.TOPIC_NOT_EXIST),
    (wire.pull("P", 2, 0), ResponseCode.INVALID_PARAMETER),
    (wire.pull("P", -1, 0), ResponseCode.INVALID_PARAMETER),
])
async def test_bad_targets(five: Peer, cmd: RemotingCommand, code: int) -> None:
    resp = await five(cmd)
    assert resp.code == code and resp.remark


async def test_unreadable_topic_is_no_permission(peer: Peer) -> None:
    await peer.ok(wire.create_topic("WriteOnly", 1, perm=2))
    assert (await peer(wire.pull("WriteOnly", 0, 0))).code == ResponseCode.NO_PERMISSION


# ---------------------------------------------------------------- truncated queues


@pytest.fixture
async def small_segments(tmp_path: Path) -> AsyncIterator[tuple[Cluster, Peer]]:
    """One broker whose commit log rolls every 64 KiB, so retention can remove data."""
    cluster = Cluster(tmp_path / "small", brokers=1,
                      store={"mapped_file_size_commit_log": 64 * 1024})
    async with cluster as c, Peer(c.brokers[0].broker_addr) as p:
        yield c, p


async def _expire_old_segments(broker: BrokerApp) -> None:
    await wire.dispatched(broker)
    far_future = broker.store.clock() + 1000 * 3600 * 1000
    report = broker.store.run_retention(far_future, manual=True)
    assert report.deleted_segments


async def test_offset_below_the_min_is_moved_to_the_min(small_segments: tuple[Cluster, Peer]
                                                        ) -> None:
    cluster, peer = small_segments
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("Trunc", 1))
    for i in range(12):  # 12 x 16 KiB: three segments
        await peer.ok(wire.send("Trunc", bytes([i]) * 16_000))
    await _expire_old_segments(broker)
    low = broker.store.min_offset("Trunc", 0)
    assert 0 < low < 12
    assert status(await peer(wire.pull("Trunc", 0, 0))) == (ResponseCode.PULL_OFFSET_MOVED, low)
    msgs = await peer.messages("Trunc", 0, low)
    assert msgs[0].queue_offset == low and msgs[-1].queue_offset == 11


async def test_fully_expired_queue_keeps_its_offsets(small_segments: tuple[Cluster, Peer]
                                                     ) -> None:
    """min == max > 0: a caught-up consumer stays put (19 at max), anything else is
    moved into [min, max] -- never back to 0, which would re-deliver nothing but make
    the client persist offset 0."""
    cluster, peer = small_segments
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("Gone", 1))
    for i in range(4):
        await peer.ok(wire.send("Gone", bytes([i]) * 16_000))
    for _ in range(8):  # later data on another topic pushes Gone's segments out
        await peer.ok(wire.send("Later", b"x" * 16_000))
    await _expire_old_segments(broker)
    assert broker.store.min_offset("Gone", 0) == broker.store.max_offset("Gone", 0) == 4
    assert status(await peer(wire.pull("Gone", 0, 4))) == (ResponseCode.PULL_NOT_FOUND, 4)
    assert status(await peer(wire.pull("Gone", 0, 2))) == (ResponseCode.PULL_OFFSET_MOVED, 4)
    assert status(await peer(wire.pull("Gone", 0, 0))) == (ResponseCode.PULL_OFFSET_MOVED, 4)
    assert status(await peer(wire.pull("Gone", 0, 9))) == (ResponseCode.PULL_OFFSET_MOVED, 4)
