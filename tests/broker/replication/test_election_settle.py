"""A replica elected master while the last frame from its old master stopped half-way:
its copy ends before its log is settled and its epoch recorded, the new epoch starts at
the end of its last whole record, the half record is gone, puts continue the queues,
and a restart finds the same. A real store, a fake master over real TCP, and the
broker's replication and controller link driven directly (no controller answers)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.broker.config import BrokerConfig
from tidemq.broker.controller_link import ControllerLink
from tidemq.broker.replication.service import ReplicationService
from tidemq.codec.ha import encode_frame_header
from tidemq.formats.record import Record, decode_record
from tidemq.net import RemotingClient
from tidemq.store.config import StoreConfig
from tidemq.store.epoch_file import EpochEntry, EpochFile
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.replica_log import CopyRunning

from .test_replica_partial_frame import (
    RECORDS,
    fake_master,
    master_log,
    replicating,
    reports,
)


@contextlib.asynccontextmanager
async def half_record_master(wire: bytes, held: asyncio.Future[None]
                             ) -> AsyncIterator[int]:
    """A master on the yielded port that sends ``wire`` to a replica reporting an empty
    log, as the start of a frame whose rest never comes; ``held`` is set once the
    replica reports that it holds all of ``wire``."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async for offset in reports(reader):
                if offset == 0:
                    writer.write(encode_frame_header(0, len(wire) + 1000) + wire)
                elif offset >= len(wire) and not held.done():
                    held.set_result(None)
        except ConnectionError:
            pass

    async with fake_master(serve) as port:
        yield port


def replica_store(root: Path) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=str(root),
                                     mapped_file_size_commit_log=64 * 1024))
    store.start()
    return store


@pytest.mark.timeout(60)
async def test_an_elected_replica_starts_its_epoch_after_its_last_whole_record(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wire, whole = master_log(tmp_path / "master")
    held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    async with half_record_master(wire, held) as port:
        end = await elect(tmp_path / "replica", port, held, wire, whole, caplog)
    again = replica_store(tmp_path / "replica")
    try:
        assert again.recovery_report is not None
        assert again.recovery_report.bytes_dropped == 0
        assert again.commitlog.max_offset == end
        assert again.epochs.entries == [EpochEntry(1, 0), EpochEntry(2, whole)]
        assert again.max_offset("T", 0) == RECORDS + 1
        got = again.get("T", 0, RECORDS, max_count=1)
        records = [decode_record(b) for b in got.buffers]
        assert [r.body for r in records if isinstance(r, Record)] == [b"first of epoch 2"]
    finally:
        again.shutdown()


async def elect(root: Path, port: int, held: asyncio.Future[None], wire: bytes,
                whole: int, caplog: pytest.LogCaptureFixture) -> int:
    """A replica copying ``wire`` from the master on ``port``, elected master of epoch 2
    once it holds all of it (``held``), puts one message; the end of its log."""
    config = BrokerConfig(enable_controller_mode=True, controller_addr="127.0.0.1:9",
                          broker_id=1, ha_listen_port=0, broker_heartbeat_interval=20,
                          controller_heart_beat_timeout_mills=3000,
                          ha_send_heartbeat_interval=50,  # reports the half frame
                          ha_master_address=f"127.0.0.1:{port}")
    store = replica_store(root)
    store.epochs.replace([EpochEntry(1, 0)])  # taken from the old master
    service = ReplicationService(config, store)
    client = RemotingClient()
    try:
        await service.start()
        copy = service.client
        assert copy is not None
        await asyncio.wait_for(held, 30)  # the half record with it
        link = ControllerLink(client, config, store, service.role,
                              broker_addr=lambda: "127.0.0.1:10911",
                              ha_address=lambda: service.ha_address, lease=service.lease,
                              standing=service.standing)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tidemq.store.message_store"):
            await link._become_master(2)

        assert service.client is None and copy._task is None
        assert service.role.state.is_master and service.role.state.epoch == 2
        assert store.commitlog.max_offset == whole  # the half record is gone
        assert EpochFile(store.layout.epoch_file).load() == [EpochEntry(1, 0),
                                                             EpochEntry(2, whole)]
        cuts = [r for r in caplog.records if r.name == "tidemq.store.message_store"]
        assert len(cuts) == 1, [r.getMessage() for r in cuts]  # one line says it
        assert f"{len(wire) - whole} bytes of an unfinished record at {whole}" in (
            cuts[0].getMessage())
        put = store.put("T", 0, MessageInput(b"first of epoch 2"))
        assert (put.phys_offsets[0], put.queue_offset) == (whole, RECORDS)
        assert store.wait_dispatched()
        return store.commitlog.max_offset
    finally:
        await service.stop()
        await client.close()
        store.shutdown()


@pytest.mark.timeout(60)
async def test_a_log_a_copy_may_append_to_is_neither_settled_nor_cut(
        store: MessageStore, tmp_path: Path) -> None:
    wire, whole = master_log(tmp_path / "master")
    held: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async for offset in reports(reader):
            if offset == 0:
                writer.write(encode_frame_header(0, len(wire) + 1000) + wire)
            elif offset >= len(wire) and not held.done():
                held.set_result(None)

    async with replicating(store, master, heartbeat_ms=50) as copy:
        await asyncio.wait_for(held, 30)
        with pytest.raises(CopyRunning):
            store.settle_replica_log()
        with pytest.raises(CopyRunning):
            store.cut_tail(whole)
        assert store.commitlog.max_offset == len(wire)
        await copy.stop()
        store.settle_replica_log()  # the copy has ended: its half record is cut
        assert store.commitlog.max_offset == whole
