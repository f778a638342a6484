"""Answered changes of consumer groups survive kill -9 of the ``tidemq broker`` process:
a subscription group created, offsets reset by time (``resetOffsetByTime``), a group's
offsets cloned to another (``cloneGroupOffset``), a group deleted with its offsets
(``deleteSubGroup -r``). Each is checked on a broker killed
right after the answer -- no offset flush or shutdown in between
(``flushConsumerOffsetInterval`` is an hour) -- and started again on the same store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.broker import wire
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT

from tidemq.client import AdminClient
from tidemq.client.group_admin import clone_group_offset
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.namesrv import NameServerApp

from .broker_process import BrokerProcess

TOPIC = "Orders"
SETTINGS = {"mappedFileSizeCommitLog": SMALL_SEGMENT,
            "flushConsumerOffsetInterval": "3600000"}


async def _groups(peer: Peer) -> dict[str, object]:
    body = (await peer.ok(wire.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
            ).full_body()
    groups: dict[str, object] = json.loads(body)["subscriptionGroupTable"]
    return groups


async def _offset(peer: Peer, group: str) -> RemotingCommand:
    return await peer(wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group,
                                   topic=TOPIC, queueId=0, setZeroIfNotFound="false"))


async def _before(addr: str, namesrv: str) -> None:
    """Groups a and b created, both reset to the end of the topic's queue (3), b deleted
    with its offsets, then a's offsets cloned to c (no consumer online): every change
    answered."""
    async with Peer(addr) as peer:
        await peer.ok(wire.create_topic(TOPIC, 1))
        for n in range(3):
            await peer.ok(wire.send(TOPIC, b"m%d" % n))
        for group in ("a", "b"):
            await peer.ok(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                       json.dumps({"groupName": group}).encode()))
            await peer.ok(wire.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, topic=TOPIC,
                                       group=group, timestamp=-1, isForce="true"))
        await peer.ok(wire.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="b",
                                   cleanOffset="true"))
    async with Peer(namesrv) as ns:  # last: the changes above write the offsets file too
        await wire.eventually_route(ns, TOPIC, timeout=30)
    async with AdminClient(namesrv) as admin:
        cloned = await clone_group_offset(admin, "a", "c", TOPIC, offline=True)
    assert [(r.queue_id, r.offset) for r in cloned] == [(0, 3)]


async def _after(addr: str) -> None:
    async with Peer(addr) as peer:
        groups = await _groups(peer)
        assert "a" in groups and "b" not in groups
        kept = await _offset(peer, "a")
        assert (kept.code, kept.ext_fields.get("offset")) == (0, "3")
        cloned = await _offset(peer, "c")
        assert (cloned.code, cloned.ext_fields.get("offset")) == (0, "3"), cloned.remark
        gone = await _offset(peer, "b")
        assert gone.code != 0, f"the deleted group's offset {gone.ext_fields} is back"


def test_answered_group_changes_survive_kill9(tmp_path: Path, namesrv: NameServerApp) -> None:
    broker = BrokerProcess(tmp_path / "store", namesrv.address, SETTINGS)
    broker.start()
    try:
        asyncio.run(_before(broker.addr, namesrv.address))
        broker.kill9()
        broker.start()
        asyncio.run(_after(broker.addr))
    finally:
        broker.kill9()


async def _reset_until_stopped(broker: BrokerProcess) -> None:
    """Group a reset to the start of the queue (0), cut off while the offsets file is
    being encoded (never answered)."""
    async with Peer(broker.addr) as peer:
        request = asyncio.ensure_future(peer(wire.request(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, topic=TOPIC, group="a", timestamp=0,
            isForce="true"), timeout=120))
        assert await asyncio.to_thread(broker.stopped, 60) == ENCODING
        assert not request.done(), "the reset was answered before its write"
        broker.kill9()
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)


#: A slice of the offsets file's entries encoded, the file not written yet.
ENCODING = "tidemq.broker.offset_json:offset_entries"


def test_a_write_of_the_offsets_cut_off_by_kill9_leaves_the_last_one(
        tmp_path: Path, namesrv: NameServerApp) -> None:
    broker = BrokerProcess(tmp_path / "store", namesrv.address, SETTINGS)
    broker.start()
    try:
        asyncio.run(_before(broker.addr, namesrv.address))
        broker.kill9()
        broker.stop_after(ENCODING)
        broker.start()
        asyncio.run(_reset_until_stopped(broker))
        broker.stop_after(None)
        broker.start()
        asyncio.run(_after(broker.addr))  # a still at 3, as the last answered write left it
    finally:
        broker.kill9()
