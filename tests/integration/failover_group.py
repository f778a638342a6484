"""A failover group as processes for integration tests: three name servers with the
controller embedded, broker-a as three brokers in controller mode (SYNC_MASTER,
inSyncReplicas 2, short leases), and helpers to wait, read queues and check topics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.integration.warm_broker import WarmBroker
from tests.namesrv.controller.processes import ControllerProcess, controller_trio

from tidemq.client import AdminClient
from tidemq.client import offsets as ofs
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.client.pull import pull_request, read_pull_response
from tidemq.client.subscription import Subscription
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import GetTopicConfigRequestHeader
from tidemq.errors import ResponseCode, TideMQError
from tidemq.types import MessageQueue, PullStatus

TOPIC = "Failover"
GROUP = "broker-a"
#: The controllers replace a master not heard from for this long.
TIMEOUT_MS = 1500
HEARTBEAT_MS = 300
SEGMENT = 64 * 1024


def broker_settings(controllers: str) -> dict[str, str]:
    return {
        "enableControllerMode": "true", "controllerAddr": controllers,
        "brokerRole": "SYNC_MASTER", "inSyncReplicas": "2",
        "brokerHeartbeatInterval": str(HEARTBEAT_MS),
        "controllerHeartBeatTimeoutMills": str(TIMEOUT_MS),
        "slaveMetadataSyncInterval": "500", "haSendHeartbeatInterval": "500",
        "mappedFileSizeCommitLog": str(SEGMENT),
    }


@pytest.fixture
def namesrvs(tmp_path: Path) -> Iterator[list[ControllerProcess]]:
    trio = controller_trio(tmp_path / "home", {"controllerBrokerHeartbeatTimeout": str(TIMEOUT_MS)},
                           command="namesrv")
    try:
        for c in trio:
            c.start()
        yield trio
    finally:
        for c in trio:
            c.kill9()


@contextlib.contextmanager
def broker_group(namesrvs: list[ControllerProcess], tmp_path: Path,
                 **extra: str) -> Iterator[list[WarmBroker]]:
    """Brokers 1, 2 and 3 of the group (not started), with ``extra`` settings; each is
    killed -9 at the end, with a start it prepared."""
    addrs = ";".join(c.addr for c in namesrvs)
    group = [WarmBroker(tmp_path / f"b{i}", addrs,
                        {**broker_settings(addrs), "brokerId": str(i), **extra})
             for i in (1, 2, 3)]
    try:
        yield group
    finally:
        for b in group:
            b.kill9()
            b.discard()


@pytest.fixture
def brokers(namesrvs: list[ControllerProcess], tmp_path: Path) -> Iterator[list[WarmBroker]]:
    with broker_group(namesrvs, tmp_path) as group:
        yield group


async def eventually(probe, ok, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if ok(value):
            return value
        assert loop.time() < deadline, f"not reached in {timeout}s: {value!r}"
        await asyncio.sleep(0.1)


async def start_first_master(controllers: ControllerAdmin, brokers: Sequence[Any]) -> None:
    """Start ``brokers[0]``, wait until the controllers name it master, then start the
    others: the first master is whichever broker asks for an election first, which on a
    fast machine need not be the first one started."""
    async def group() -> object:
        return (await controllers.sync_state_set([GROUP])).replicas_info_table.get(GROUP)

    brokers[0].start()
    await eventually(group, lambda g: g is not None
                     and g.master_broker_id == 1)  # type: ignore[attr-defined]
    for b in brokers[1:]:
        b.start()


async def has_topic(admin: AdminClient, address: str) -> bool:
    header = GetTopicConfigRequestHeader(topic=TOPIC)
    response = await admin.instance.request(address, RemotingCommand.request(
        RequestCode.GET_TOPIC_CONFIG, header.to_ext()))
    return response.code == ResponseCode.SUCCESS


async def read_queue(admin: AdminClient, address: str, queue: MessageQueue) -> list[bytes]:
    sub = Subscription.parse(queue.topic)
    out: list[bytes] = []
    offset = 0
    while True:
        cmd = pull_request("failover-check", queue, offset, max_nums=32, subscription=sub)
        result = read_pull_response(await admin.instance.request(address, cmd), queue, sub,
                                    address=address, offset=offset)
        if result.status is not PullStatus.FOUND:
            return out
        out += [bytes(m.body) for m in result.messages]
        offset = result.next_offset


async def queue_offsets(admin: AdminClient, address: str, group: str,
                        queue: MessageQueue) -> tuple[int | None, int] | None:
    """What ``group`` committed for ``queue`` on the broker at ``address`` (``None``:
    nothing) and the queue's max offset there; ``None`` when the broker does not answer
    both."""
    try:
        mine = await admin.instance.request(address, ofs.query_offset_request(group, queue))
        top = await admin.instance.request(address, ofs.max_offset_request(queue))
        return (ofs.read_committed(mine, address=address),
                ofs.read_offset(top, address=address))
    except TideMQError:
        return None
