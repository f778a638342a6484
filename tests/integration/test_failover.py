"""Automatic failover with real processes on loopback: three name servers with the
controller embedded, broker-a as three brokers in controller mode (SYNC_MASTER,
inSyncReplicas 2), a real client.

* kill -9 of the master: a replica of the sync-state set is elected, the master epoch
  rises, the name servers list the new master as brokerId 0, the producer's next send is
  acknowledged by it without a restart, and every message acknowledged before the kill
  is read back from it exactly once, in order;
* the old master, given a tail nobody else holds and started again, cuts that tail
  through recovery, keeping exactly the records it cuts in ``truncated/``, takes the
  new master's epochs and copies its log;
* with two of the three controllers killed nobody is elected, and the master stops
  acknowledging once its lease lapses; with a controller back it is master again, in
  the same epoch.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

from tests.broker import wire
from tests.crash.broker_process import BrokerProcess
from tests.integration.failover_group import (
    GROUP,
    SEGMENT,
    TIMEOUT_MS,
    TOPIC,
    brokers,
    eventually,
    has_topic,
    namesrvs,
    read_queue,
    start_first_master,
)
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.client.controller_admin import ControllerAdmin, broker_epoch_cache
from tidemq.errors import ResponseCode, TideMQError
from tidemq.store import kept_cuts
from tidemq.store.config import StoreConfig
from tidemq.store.layout import StoreLayout
from tidemq.store.log_scan import End, walk
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.types import MessageQueue, SendStatus

__all__ = ["brokers", "namesrvs"]  # fixtures


def _records(store: MessageStore) -> list[tuple[int, bytes]]:
    """Every record of the store's commit log: its offset and its bytes."""
    out = []
    for step in walk(store.commitlog.segments, store.commitlog.min_offset):
        if isinstance(step, End):
            return out
        assert isinstance(step, tuple), step
        offset, rec = step
        seg = store.commitlog.segment_for(offset)
        assert seg is not None
        out.append((offset, bytes(seg.mm[offset - seg.base : offset - seg.base
                                         + rec.total_size])))
    return out


def _kept_records(path: object) -> list[tuple[int, bytes]]:
    """Every record of a kept cut: where the log held it and its bytes."""
    assert isinstance(path, Path)
    data, out, pos = path.read_bytes(), [], 0
    for rec in kept_cuts.read_kept(path):
        out.append((rec.physical_offset, data[pos : pos + rec.total_size]))
        pos += rec.total_size
    return out


async def test_kill9_of_the_master_fails_over_and_the_old_master_rejoins(
        namesrvs: list[ControllerProcess], brokers: list[BrokerProcess]) -> None:
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=addrs, request_timeout=3.0)
    async with AdminClient(config=config) as admin, Producer("failover-p", config=config) as p:
        controllers = ControllerAdmin(admin.instance.request, addrs)
        await start_first_master(controllers, brokers)

        async def group() -> object:
            return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

        await eventually(group, lambda g: g.master_broker_id == 1  # type: ignore[attr-defined]
                         and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]
        await admin.create_topic(TOPIC, broker_addr=brokers[0].addr, read_queue_nums=2,
                                 write_queue_nums=2)
        for replica in brokers[1:]:  # topic configs reach replicas every 500 ms
            await eventually(lambda r=replica: has_topic(admin, r.addr), bool)
        acked: dict[int, list[bytes]] = {0: [], 1: []}
        for i in range(120):
            body = f"m{i:04d}".encode()
            result = await p.send(Message(TOPIC, body), queue=MessageQueue(TOPIC, GROUP, i % 2))
            assert result.status is SendStatus.SEND_OK
            acked[i % 2].append(body)

        old = brokers[0]
        old.kill9()
        killed = time.monotonic()
        attempt = 0
        while True:  # the producer finds the new master through the name servers
            attempt += 1
            body = f"after{attempt:05d}".encode()
            try:
                result = await p.send(Message(TOPIC, body), queue=MessageQueue(TOPIC, GROUP, 0))
            except TideMQError:  # no master until the controllers elect one
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                break
            # stored, but its copy is not confirmed (FLUSH_SLAVE_TIMEOUT ...): not acked
            await asyncio.sleep(0.05)
        took = time.monotonic() - killed
        print(f"kill -9 of the master to the first acknowledged send: {took:.2f} s "
              f"({attempt} attempts)")

        g = await group()
        new_id = g.master_broker_id  # type: ignore[attr-defined]
        assert new_id in (2, 3)
        assert g.master_epoch == 2  # type: ignore[attr-defined]
        new = brokers[new_id - 1]
        route = await admin.topic_route(TOPIC)
        (data,) = [d for d in route.broker_datas if d.broker_name == GROUP]
        assert data.broker_addrs[0] == new.addr
        for queue_id, bodies in acked.items():
            got = await read_queue(admin, new.addr, MessageQueue(TOPIC, GROUP, queue_id))
            assert got[:len(bodies)] == bodies, f"queue {queue_id} on the new master"
            later = got[len(bodies):]
            assert all(b.startswith(b"after") for b in later)
            assert len(set(later)) == len(later) and (queue_id == 1 or body in later)
            acked[queue_id] = got  # what the returned old master must copy

        # the old master comes back with a tail it alone wrote
        store = MessageStore(StoreConfig(store_path_root_dir=str(old.root),
                                         mapped_file_size_commit_log=SEGMENT))
        store.start()
        ghost_end = ghost_start = 0
        for i in range(5):
            put = store.put(TOPIC, 1, MessageInput(f"ghost{i}".encode(), b""))
            ghost_start = ghost_start or put.phys_offsets[0]
            ghost_end = put.phys_offsets[0] + put.sizes[0]
        assert store.wait_dispatched()
        before = _records(store)  # the old master's whole log, each record's bytes
        store.shutdown()
        old.start()

        async def caught_up() -> tuple[object, object]:
            return (await broker_epoch_cache(admin.instance.request, old.addr),
                    await broker_epoch_cache(admin.instance.request, new.addr))

        mine, _ = await eventually(
            caught_up, lambda c: c[0].max_offset == c[1].max_offset  # type: ignore[attr-defined]
            and c[0].epoch_list == c[1].epoch_list)  # type: ignore[attr-defined]
        assert [e.epoch for e in mine.epoch_list] == [1, 2]  # type: ignore[attr-defined]
        assert "diverged" in old.log(200)
        assert ghost_end > 0
        # what the cut dropped is kept: exactly the old log's records from the cut on
        [kept] = kept_cuts.kept_cuts(StoreLayout(old.root).truncated_dir)
        assert kept.epoch == 1 and kept.from_offset <= ghost_start
        assert _kept_records(kept.path) == [r for r in before if r[0] >= kept.from_offset]
        assert f"are kept in {kept.path}" in old.log(400)
        for queue_id, bodies in acked.items():
            got = await read_queue(admin, old.addr, MessageQueue(TOPIC, GROUP, queue_id))
            assert got == bodies, f"queue {queue_id} on the returned old master"
        await eventually(group, lambda g: 1 in [  # type: ignore[attr-defined]
            r.broker_id for r in g.in_sync_replicas])  # type: ignore[attr-defined]


async def test_without_a_quorum_of_controllers_the_master_stops_until_one_is_back(
        namesrvs: list[ControllerProcess], brokers: list[BrokerProcess]) -> None:
    addrs = [c.addr for c in namesrvs]
    master = brokers[0]
    config = ClientConfig(namesrv_addr=addrs, request_timeout=3.0)
    async with AdminClient(config=config) as admin:
        controllers = ControllerAdmin(admin.instance.request, addrs)
        await start_first_master(controllers, brokers)

        async def group() -> object:
            return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

        await eventually(group, lambda g: g.master_broker_id == 1  # type: ignore[attr-defined]
                         and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        for replica in brokers[1:]:
            await eventually(lambda r=replica: has_topic(admin, r.addr), bool)
        acked: list[bytes] = []
        sent = itertools.count()

        async def send() -> tuple[int, str]:
            body = b"m%05d" % next(sent)
            try:
                response = await admin.instance.request(master.addr, wire.send(TOPIC, body))
            except TideMQError as exc:
                return -1, str(exc)
            if response.code == ResponseCode.SUCCESS:
                acked.append(body)
            return response.code, response.remark or ""

        for _ in range(20):
            assert (await send())[0] == ResponseCode.SUCCESS
        for c in namesrvs[:2]:
            c.kill9()
        # no quorum renews the master's lease: within it, it acknowledges nothing more
        code, remark = await eventually(send, lambda r: r[0] != ResponseCode.SUCCESS)
        # refused (lease lapsed, or stepped down); or stored, and still waiting for its
        # copies when the master stepped down: not acknowledged either
        assert code in (ResponseCode.SERVICE_NOT_AVAILABLE,
                        ResponseCode.FLUSH_SLAVE_TIMEOUT), remark
        # and nobody else is elected meanwhile, well past every lease
        await asyncio.sleep(TIMEOUT_MS / 1000 * 2)
        assert (await send())[0] == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "stops being master of epoch 1: its lease lapsed" in master.log(400)
        assert all("is master" not in b.log(400) for b in brokers[1:])

        namesrvs[0].start()  # a quorum again: the same master, in the same epoch
        await eventually(send, lambda r: r[0] == ResponseCode.SUCCESS)
        for _ in range(20):
            assert (await send())[0] == ResponseCode.SUCCESS
        g = await group()
        assert (g.master_broker_id, g.master_epoch) == (1, 1)  # type: ignore[attr-defined]
        queue = MessageQueue(TOPIC, GROUP, 0)
        got = await eventually(lambda: read_queue(admin, master.addr, queue),
                               lambda stored: len(stored) >= len(acked))
        assert [b for b in got if b in set(acked)] == acked
