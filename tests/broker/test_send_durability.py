"""SYNC_FLUSH sends: GroupCommitWaiters (one loop callback per group commit) and the send
processor under SYNC_FLUSH over real TCP."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.group_commit import GroupCommitWaiters
from tidemq.codec.command import RemotingCommand
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.store.flush import FlushStatus
from tidemq.testing import Cluster
from tidemq.types import FlushDiskType


class FakeFlusher:
    """The FlushService surface the waiters use; the test plays the flusher thread."""

    def __init__(self) -> None:
        self.flushed_offset = 0
        self.listeners: list[Callable[[int], None]] = []
        self.requests: list[tuple[int, concurrent.futures.Future[FlushStatus]]] = []

    def add_flush_listener(self, listener: Callable[[int], None]) -> None:
        self.listeners.append(listener)

    def request(self, end: int) -> concurrent.futures.Future[FlushStatus]:
        fut: concurrent.futures.Future[FlushStatus] = concurrent.futures.Future()
        if end <= self.flushed_offset:
            fut.set_result(FlushStatus.FLUSHED)
        self.requests.append((end, fut))
        return fut

    def flush(self, offset: int) -> None:
        """A group commit up to ``offset``, from another thread."""
        def run() -> None:
            self.flushed_offset = offset
            for listener in self.listeners:
                listener(offset)
            for end, fut in self.requests:
                if end <= offset and not fut.done():
                    fut.set_result(FlushStatus.FLUSHED)
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()

    def fail(self, status: FlushStatus) -> None:
        def run() -> None:
            for _, fut in self.requests:
                if not fut.done():
                    fut.set_result(status)
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_request_per_loop_iteration_and_one_callback_per_commit() -> None:
    flusher = FakeFlusher()
    done: list[tuple[Any, bool]] = []
    waiters = GroupCommitWaiters(flusher, lambda item, ok: done.append((item, ok)))  # type: ignore[arg-type]
    assert all(waiters.wait(end, end) for end in (10, 20, 30))
    await _settle()
    assert [end for end, _ in flusher.requests] == [30]  # one request for the iteration
    assert waiters.wait(40, 40)
    await _settle()
    flusher.flush(25)
    await _settle()
    assert done == [(10, True), (20, True)]
    flusher.flush(45)
    await _settle()
    assert done == [(10, True), (20, True), (30, True), (40, True)]
    assert len(waiters) == 0
    assert not waiters.wait(45, "durable already")


@pytest.mark.parametrize("status", [FlushStatus.FLUSH_DISK_TIMEOUT, FlushStatus.WRITE_ERROR])
async def test_a_failed_request_answers_its_waiters_not_durable(status: FlushStatus) -> None:
    flusher = FakeFlusher()
    done: list[tuple[Any, bool]] = []
    waiters = GroupCommitWaiters(flusher, lambda item, ok: done.append((item, ok)))  # type: ignore[arg-type]
    waiters.wait(10, "a")
    waiters.wait(20, "b")
    await _settle()
    flusher.flushed_offset = 10  # durable, but the listener's callback has not run yet
    flusher.fail(status)
    await _settle()
    assert done == [("a", True), ("b", False)]


@pytest.fixture
async def sync_cluster(tmp_path: Path) -> AsyncIterator[tuple[Cluster, Peer]]:
    store = {"flush_disk_type": FlushDiskType.SYNC_FLUSH}
    async with Cluster(tmp_path / "sync", brokers=1, store=store) as cluster, \
            Peer(cluster.brokers[0].broker_addr) as peer:
        yield cluster, peer


async def test_concurrent_sync_sends_are_answered_after_their_flush(
        sync_cluster: tuple[Cluster, Peer]) -> None:
    cluster, peer = sync_cluster
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("Durable", 4))
    cmds: list[RemotingCommand] = [wire.send("Durable", b"d%d" % i, queue_id=i % 4)
                                   for i in range(200)]
    cmds.append(wire.send_batch("Durable", [(b"x", wire.props()) for _ in range(5)]))
    responses = await asyncio.gather(*(peer.ok(cmd) for cmd in cmds))
    assert broker.store.flusher is not None
    flushed = broker.store.flusher.flushed_offset
    for resp in responses:
        for msg_id in resp.ext_fields["msgId"].split(","):
            assert decode_offset_msg_id(msg_id)[1] < flushed


async def test_a_stalled_flush_answers_flush_disk_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "sync_flush_timeout": 200}
    async with Cluster(tmp_path / "stall", brokers=1, store=store) as cluster, \
            Peer(cluster.brokers[0].broker_addr) as peer:
        await _stalled(cluster, peer, monkeypatch)


async def _stalled(cluster: Cluster, peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("Stall", 1))
    flusher = broker.store.flusher
    assert flusher is not None
    release = threading.Event()
    real = flusher.commitlog.flush

    def stalled() -> int:
        release.wait(5)
        return real()

    monkeypatch.setattr(flusher.commitlog, "flush", stalled)
    try:
        resp = await peer(wire.send("Stall", b"late"), timeout=5)
    finally:
        release.set()
    assert resp.code == ResponseCode.FLUSH_DISK_TIMEOUT
    assert resp.remark == "flush disk timeout"
    assert resp.ext_fields["queueOffset"] == "0"
