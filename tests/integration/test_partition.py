"""Partitions in controller mode, with real processes on loopback: three name servers
with the controller embedded and broker-a as three brokers (SYNC_MASTER, inSyncReplicas
2). The first master reaches the controllers, and its replicas reach its HA port, only
through TCP proxies in the test (:class:`tests.tcp_proxy.Link`) that the test cuts and
heals.

Two clients send while the master is cut off: one to the old master's address directly,
one following routes. Every acknowledgement is recorded with the broker that gave it
(the store host of its offset message id) and when it arrived. No interval may have two
masters acknowledging: the old master's last acknowledgement arrives before the new
master's first -- but under ``masterWithoutControllerQuorum=SYNC_STATE_SET_FOLLOWS``, where
the old master goes on, past its lease, acknowledging what its replicas confirm. After
healing, the old master rejoins as a replica of the new one without a restart, and every
acknowledged message is read back exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.child_server import free_port
from tests.crash.broker_process import BrokerProcess
from tests.integration.failover_group import (
    GROUP,
    TOPIC,
    broker_settings,
    eventually,
    has_topic,
    namesrvs,
    read_queue,
)
from tests.namesrv.controller.processes import ControllerProcess
from tests.tcp_proxy import Link

from tidemq.broker.replication.lease import lease_ms
from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.client.controller_admin import ControllerAdmin, broker_epoch_cache
from tidemq.errors import ResponseCode, TideMQError
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.types import MessageQueue, SendStatus

__all__ = ["namesrvs"]  # fixture

DIRECT_QUEUE, ROUTED_QUEUE = 0, 1


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    broker: str
    body: bytes
    #: When the request left and when its acknowledgement arrived.
    sent: float
    at: float


def broker_of(offset_msg_id: str) -> str:
    host, _ = decode_offset_msg_id(offset_msg_id)
    return f"127.0.0.1:{host.port}"


@dataclasses.dataclass
class Group:
    admin: AdminClient
    config: ClientConfig
    controllers: ControllerAdmin
    brokers: list[BrokerProcess]
    #: The first master's links to each controller, and its replicas' link to its HA port.
    controller_links: list[Link]
    ha_link: Link

    async def state(self) -> object:
        """The group as the controllers see it (``None``: not registered yet)."""
        table = (await self.controllers.sync_state_set([GROUP])).replicas_info_table
        return table.get(GROUP)


#: A master that waits for every in-sync replica present, and for none when none is: it
#: acknowledges alone once its replicas leave, so only its lease stops it.
ALONE = {"inSyncReplicas": "3", "allAckInSyncStateSet": "true", "minInSyncReplicas": "1"}
#: A master that, without its lease, acknowledges what both its replicas confirm. Its
#: heartbeats are slower, so that the time between its lease lapsing and its replicas
#: following a new master (see the test) is long enough on a busy machine.
FOLLOWED_TIMEOUT_MS, FOLLOWED_HEARTBEAT_MS = 4000, 1000
FOLLOWED = {"masterWithoutControllerQuorum": "SYNC_STATE_SET_FOLLOWS",
            "controllerHeartBeatTimeoutMills": str(FOLLOWED_TIMEOUT_MS),
            "brokerHeartbeatInterval": str(FOLLOWED_HEARTBEAT_MS)}


@pytest.fixture
async def group(request: pytest.FixtureRequest, namesrvs: list[ControllerProcess],
                tmp_path: Path) -> AsyncIterator[Group]:
    """broker-a as three brokers, with ``request.param`` as extra settings of each."""
    extra: dict[str, str] = getattr(request, "param", {})
    links = [await Link(c.addr).start() for c in namesrvs]
    ha_port = free_port()
    ha_link = await Link(f"127.0.0.1:{ha_port}").start()
    direct = ";".join(c.addr for c in namesrvs)
    proxied = ";".join(link.addr for link in links)
    first = BrokerProcess(tmp_path / "b1", proxied, {
        **broker_settings(proxied), **extra, "brokerId": "1", "haListenPort": str(ha_port),
        "haAdvertisedAddress": ha_link.addr})
    others = [BrokerProcess(tmp_path / f"b{i}", direct,
                            {**broker_settings(direct), **extra, "brokerId": str(i)})
              for i in (2, 3)]
    brokers = [first, *others]
    config = ClientConfig(namesrv_addr=tuple(c.addr for c in namesrvs), request_timeout=3.0)
    loop = asyncio.get_running_loop()
    try:
        # started off the loop: the proxies run on it
        await loop.run_in_executor(None, first.start)
        async with AdminClient(config=config) as admin:
            controllers = ControllerAdmin(admin.instance.request, [c.addr for c in namesrvs])
            g = Group(admin, config, controllers, brokers, links, ha_link)
            await eventually(g.state, lambda s: s is not None
                             and s.master_broker_id == 1)  # type: ignore[attr-defined]
            for b in others:
                await loop.run_in_executor(None, b.start)
            await eventually(g.state, lambda s: s.master_broker_id == 1  # type: ignore[attr-defined]
                             and len(s.in_sync_replicas) == 3)  # type: ignore[attr-defined]
            await admin.create_topic(TOPIC, broker_addr=first.addr, read_queue_nums=2,
                                     write_queue_nums=2)
            for replica in others:
                await eventually(lambda r=replica: has_topic(admin, r.addr), bool)
            yield g
    finally:
        for b in brokers:
            b.kill9()
        for link in [*links, ha_link]:
            await link.close()


class Senders:
    """A client sending to the first master's address directly and an ordered producer
    following routes, each on a queue of its own, recording every acknowledgement."""

    def __init__(self, admin: AdminClient, producer: Producer, direct_to: str) -> None:
        self.admin = admin
        self.producer = producer
        self.direct_to = direct_to
        self.acks: list[Ack] = []
        #: (when the request left, answer code, remark) of the direct client's refusals.
        self.refused: list[tuple[float, int, str]] = []
        self.stop = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._direct()),
                       asyncio.ensure_future(self._routed())]

    async def finish(self) -> None:
        self.stop = True
        await asyncio.gather(*self._tasks)

    def from_broker(self, addr: str) -> list[Ack]:
        return [a for a in self.acks if a.broker == addr]

    async def _direct(self) -> None:
        n = 0
        while not self.stop:
            n += 1
            body = b"direct-%06d" % n
            sent = time.monotonic()
            try:
                response = await self.admin.instance.request(
                    self.direct_to, wire.send(TOPIC, body, queue_id=DIRECT_QUEUE), 1.0)
            except TideMQError:
                await asyncio.sleep(0.02)
                continue
            if response.code == ResponseCode.SUCCESS:
                self.acks.append(Ack(broker_of(response.ext_fields["msgId"]), body, sent,
                                     time.monotonic()))
            else:
                self.refused.append((sent, response.code, response.remark or ""))
                await asyncio.sleep(0.02)

    async def _routed(self) -> None:
        n = 0
        queue = MessageQueue(TOPIC, GROUP, ROUTED_QUEUE)
        while not self.stop:
            n += 1
            body = b"routed-%06d" % n
            sent = time.monotonic()
            try:
                result = await self.producer.send(Message(TOPIC, body), queue=queue)
            except TideMQError:
                await asyncio.sleep(0.02)
                continue
            if result.status is SendStatus.SEND_OK:
                self.acks.append(Ack(broker_of(result.offset_msg_id), body, sent,
                                     time.monotonic()))
            else:
                await asyncio.sleep(0.02)


async def until(check, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    async def probe() -> bool:
        return bool(check())
    await eventually(probe, bool, timeout)


async def check_every_ack_read_once(admin: AdminClient, addr: str, acks: list[Ack]) -> None:
    for queue_id in (DIRECT_QUEUE, ROUTED_QUEUE):
        got = await read_queue(admin, addr, MessageQueue(TOPIC, GROUP, queue_id))
        prefix = b"direct-" if queue_id == DIRECT_QUEUE else b"routed-"
        acked = [a.body for a in acks if a.body.startswith(prefix)]
        missing = [b for b in acked if got.count(b) != 1]
        assert not missing, f"{addr} queue {queue_id}: {missing[:5]} not read exactly once"
        # acknowledged in order, stored in order
        assert [b for b in got if b in set(acked)] == acked


async def partition_and_heal(g: Group, *, cut_ha: bool, followed: bool = False) -> None:
    """``followed``: the brokers run ``masterWithoutControllerQuorum=SYNC_STATE_SET_FOLLOWS``
    (the old master may acknowledge after its lease lapsed, what its replicas hold)."""
    old = g.brokers[0]
    async with Producer("partition-p", config=g.config) as producer:
        senders = Senders(g.admin, producer, old.addr)
        senders.start()
        try:
            await until(lambda: len(senders.from_broker(old.addr)) >= 20)
            for link in g.controller_links:
                link.cut()
            if cut_ha:
                g.ha_link.cut()
            cut_at = time.monotonic()
            await until(lambda: len([a for a in senders.acks if a.broker != old.addr]) >= 20)

            def old_answered_late() -> bool:  # refused, or (a failure) acknowledged
                first_new = min(a.at for a in senders.acks if a.broker != old.addr)
                return (any(at > first_new for at, _, _ in senders.refused)
                        or any(a.at > first_new for a in senders.from_broker(old.addr)))

            await until(old_answered_late)
        finally:
            await senders.finish()

    s = await g.state()
    new_id = s.master_broker_id  # type: ignore[attr-defined]
    assert new_id in (2, 3) and s.master_epoch == 2  # type: ignore[attr-defined]
    new = g.brokers[new_id - 1]
    before = senders.from_broker(old.addr)
    after = senders.from_broker(new.addr)
    assert len(before) + len(after) == len(senders.acks)  # no third broker acknowledged
    if followed:
        # It went on past its lease. The last heartbeat round that renewed the lease was
        # sent before the cut, so the lease lapsed within lease_ms after the cut. The
        # controllers, which received that round after it was sent, replace the master no
        # earlier than their timeout after it, two heartbeat intervals later than the
        # lease's end, and the replicas go on confirming until they learn of it.
        lease_s = lease_ms(FOLLOWED_TIMEOUT_MS, FOLLOWED_HEARTBEAT_MS) / 1000
        assert any(a.sent > cut_at + lease_s for a in before)
    else:
        assert max(a.at for a in before) < min(a.at for a in after), (
            "two masters acknowledged at once")
    refusals = [remark for at, code, remark in senders.refused if at > cut_at]
    assert refusals
    if cut_ha:  # nothing sent after the cut can have its copy confirmed
        assert all(a.sent < cut_at for a in before)
    # It stepped down by its lease (its log says so). Whether a send reached it between the
    # lapse and the step-down, to be refused naming the lease, depends on the scheduling:
    # on a busy machine the refusals may all be the replicas' timeout or "a replica".
    old_log = old.log(100_000)
    assert "stops being master of epoch 1: its lease lapsed" in old_log, old_log[-6000:]
    # what the old master holds now (stepped down, it takes no more sends)
    old_end = (await broker_epoch_cache(g.admin.instance.request, old.addr)).max_offset

    for link in [*g.controller_links, g.ha_link]:
        link.heal()
    # the old master follows the new one without a restart, cutting what it alone held

    async def caught_up() -> tuple[object, object]:
        return (await broker_epoch_cache(g.admin.instance.request, old.addr),
                await broker_epoch_cache(g.admin.instance.request, new.addr))

    c = await eventually(caught_up, lambda c: (
        c[0].max_offset == c[1].max_offset  # type: ignore[attr-defined]
        and c[0].epoch_list == c[1].epoch_list))  # type: ignore[attr-defined]
    assert old.proc is not None and old.proc.poll() is None  # the same process
    new_start = max(e.start_offset for e in c[1].epoch_list  # type: ignore[attr-defined]
                    if e.epoch == 2)
    if old_end > new_start:
        # it stored sends that never reached the new master (whether any did depends on
        # the scheduling): a tail of its own, cut without a restart
        # logged by the thread that cut it, which may not have written the line yet
        # when the broker already answers with its new end
        async def cut_logged() -> bool:
            return "while running" in old.log(100_000)

        await eventually(cut_logged, bool)
    await check_every_ack_read_once(g.admin, new.addr, senders.acks)
    await eventually(lambda: _readable(g.admin, old.addr, senders.acks), bool)


async def _readable(admin: AdminClient, addr: str, acks: list[Ack]) -> bool:
    with contextlib.suppress(AssertionError):
        await check_every_ack_read_once(admin, addr, acks)
        return True
    return False


@pytest.mark.parametrize("group", [ALONE], indirect=True)
async def test_a_master_cut_off_from_the_controllers_stops_acknowledging_by_its_lease(
        group: Group) -> None:
    await partition_and_heal(group, cut_ha=False)


async def test_a_master_cut_off_from_replicas_and_controllers_acknowledges_nothing_more(
        group: Group) -> None:
    await partition_and_heal(group, cut_ha=True)


@pytest.mark.parametrize("group", [FOLLOWED], indirect=True)
async def test_a_followed_master_cut_off_from_the_controllers_loses_no_acknowledged_message(
        group: Group) -> None:
    await partition_and_heal(group, cut_ha=False, followed=True)
