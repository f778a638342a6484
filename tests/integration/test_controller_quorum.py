"""Controllers lost, with real processes on loopback (three name servers with the
controller embedded, broker-a as three SYNC_MASTER brokers in controller mode):

* with one of the three controllers killed, the other two still elect a new master when
  the master is killed -9, and every message acknowledged before is on it;
* with two of them killed nobody can be elected; under
  ``masterWithoutControllerQuorum=SYNC_STATE_SET_FOLLOWS`` the master goes on
  acknowledging sends well past its lease, each one held by both replicas, and stops
  (and steps down) once a replica is killed. (Under the default, ``STEP_DOWN``, it stops
  at once: ``tests/integration/test_failover.py``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.crash.broker_process import BrokerProcess
from tests.integration.failover_group import (
    GROUP,
    TIMEOUT_MS,
    TOPIC,
    broker_group,
    brokers,
    eventually,
    has_topic,
    namesrvs,
    read_queue,
    start_first_master,
)
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.errors import ResponseCode, TideMQError
from tidemq.types import MessageQueue

__all__ = ["brokers", "namesrvs"]  # fixtures


@pytest.fixture
def followed_brokers(namesrvs: list[ControllerProcess],
                     tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with broker_group(namesrvs, tmp_path,
                      masterWithoutControllerQuorum="SYNC_STATE_SET_FOLLOWS") as group:
        yield group


class Sender:
    """Sends to one broker directly, recording what it acknowledged."""

    def __init__(self, admin: AdminClient, address: str, prefix: bytes = b"m") -> None:
        self.admin = admin
        self.address = address
        self.prefix = prefix
        self.acked: list[bytes] = []
        self._n = itertools.count()

    async def send(self) -> tuple[int, str]:
        body = self.prefix + b"%05d" % next(self._n)
        try:
            response = await self.admin.instance.request(self.address, wire.send(TOPIC, body))
        except TideMQError as exc:
            return -1, str(exc)
        if response.code == ResponseCode.SUCCESS:
            self.acked.append(body)
        return response.code, response.remark or ""


async def stored(admin: AdminClient, address: str, acked: list[bytes]) -> list[bytes]:
    """Queue 0 of the topic at ``address`` once it lists every one of ``acked`` (or what
    it lists when that does not happen within the time-out): a send is acknowledged once
    its bytes are stored, and copied; its queue entry may follow a moment later."""
    want = set(acked)
    got: list[bytes] = []

    async def probe() -> list[bytes]:
        nonlocal got
        got = await read_queue(admin, address, MessageQueue(TOPIC, GROUP, 0))
        return got

    with contextlib.suppress(AssertionError):  # the caller's assertion says what is amiss
        await eventually(probe, lambda listed: want <= set(listed))
    return got


async def started_group(admin: AdminClient, addrs: list[str],
                        brokers: list[BrokerProcess]) -> None:
    """Brokers 1, 2, 3 started (1 the master, all in sync) with the topic on each."""
    controllers = ControllerAdmin(admin.instance.request, addrs)

    async def group() -> object:
        return (await controllers.sync_state_set([GROUP])).replicas_info_table.get(GROUP)

    await start_first_master(controllers, brokers)
    await eventually(group, lambda g: g.master_broker_id == 1  # type: ignore[attr-defined]
                     and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]
    await admin.create_topic(TOPIC, broker_addr=brokers[0].addr, read_queue_nums=1,
                             write_queue_nums=1)
    for replica in brokers[1:]:
        await eventually(lambda r=replica: has_topic(admin, r.addr), bool)


async def test_with_one_controller_down_a_dead_master_is_still_replaced(
        namesrvs: list[ControllerProcess], brokers: list[BrokerProcess]) -> None:
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=addrs, request_timeout=3.0)
    async with AdminClient(config=config) as admin:
        await started_group(admin, addrs, brokers)
        old = Sender(admin, brokers[0].addr)
        for _ in range(20):
            assert (await old.send())[0] == ResponseCode.SUCCESS
        namesrvs[2].kill9()
        live = ControllerAdmin(admin.instance.request, addrs[:2])
        for _ in range(20):  # the two left still confirm the master's lease
            assert (await old.send())[0] == ResponseCode.SUCCESS
        brokers[0].kill9()

        async def group() -> object:
            return (await live.sync_state_set([GROUP])).replicas_info_table[GROUP]

        g = await eventually(group, lambda g: g.master_broker_id in (2, 3)  # type: ignore[attr-defined]
                             and g.master_epoch == 2)  # type: ignore[attr-defined]
        new = Sender(admin, brokers[g.master_broker_id - 1].addr,  # type: ignore[attr-defined]
                     b"new")
        await eventually(new.send, lambda r: r[0] == ResponseCode.SUCCESS)
        acked = old.acked + new.acked
        got = await stored(admin, new.address, acked)
        assert len(set(got)) == len(got)
        assert [b for b in got if b in set(acked)] == acked  # each once, in order


async def test_with_two_controllers_down_a_followed_master_keeps_acknowledging(
        namesrvs: list[ControllerProcess], followed_brokers: list[BrokerProcess]) -> None:
    brokers = followed_brokers
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=addrs, request_timeout=3.0)
    async with AdminClient(config=config) as admin:
        await started_group(admin, addrs, brokers)
        master = Sender(admin, brokers[0].addr)
        for _ in range(20):
            assert (await master.send())[0] == ResponseCode.SUCCESS
        for c in namesrvs[:2]:
            c.kill9()
        # no quorum confirms its lease any more, yet every send is acknowledged, for
        # well over a lease: both replicas confirm each one
        loop = asyncio.get_running_loop()
        until = loop.time() + TIMEOUT_MS / 1000 * 3
        while loop.time() < until:
            code, remark = await master.send()
            assert code == ResponseCode.SUCCESS, remark
        assert all("is master" not in b.log(400) for b in brokers[1:])
        for replica in brokers[1:]:  # each acknowledged message is on each replica
            got = await stored(admin, replica.addr, master.acked)
            assert got[:len(master.acked)] == master.acked

        brokers[2].kill9()  # a member stops following: it may be elected, so no more
        code, remark = await eventually(master.send, lambda r: r[0] != ResponseCode.SUCCESS)
        assert code in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE,
                        ResponseCode.SERVICE_NOT_AVAILABLE), remark
        async def master_log() -> str:
            return brokers[0].log(400)

        await eventually(master_log, lambda text: "no longer confirms it follows" in text)
        assert (await master.send())[0] == ResponseCode.SERVICE_NOT_AVAILABLE
        got = await stored(admin, brokers[1].addr, master.acked)
        assert got[:len(master.acked)] == master.acked
