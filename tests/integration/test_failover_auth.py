"""Controller mode with ACL 2.0, real processes on loopback: every master the controllers
elect serves only replicas that authenticate, and the replicas of the group do, with the
broker's ``innerClientAuthenticationCredentials``: the first master's replicas join its
sync-state set, and after a kill -9 of it the replica left follows the new master with
its frame, is listed as authenticated, and its copies make the SYNC_MASTER's sends
SEND_OK (inSyncReplicas 2)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.integration.failover_group import (
    GROUP,
    TOPIC,
    broker_group,
    eventually,
    namesrvs,
    start_first_master,
)
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.client import broker_views as bv
from tidemq.client.controller_admin import ControllerAdmin, broker_epoch_cache
from tidemq.errors import TideMQError
from tidemq.types import MessageQueue, SendStatus

__all__ = ["namesrvs"]  # fixture

ROOT = ("root", "root-secret")
AUTH = {
    "authenticationEnabled": "true",
    "initAuthenticationUser": json.dumps({"username": ROOT[0], "password": ROOT[1]}),
    "innerClientAuthenticationCredentials": json.dumps({"accessKey": ROOT[0],
                                                        "secretKey": ROOT[1]}),
}


async def test_each_elected_master_takes_its_replicas_authenticated(
        namesrvs: list[ControllerProcess], tmp_path: Path) -> None:
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=addrs, request_timeout=3.0, access_key=ROOT[0],
                          secret_key=ROOT[1])
    with broker_group(namesrvs, tmp_path, **AUTH) as brokers:
        async with AdminClient(config=config) as admin, Producer("auth-p", config=config) as p:
            controllers = ControllerAdmin(admin.instance.request, addrs)
            await start_first_master(controllers, brokers)

            async def group() -> object:
                return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

            await eventually(group, lambda g: g.master_broker_id == 1  # type: ignore[attr-defined]
                             and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]

            async def signed_in(addr: str) -> list[tuple[bool, str]]:
                links = (await bv.ha_status(admin, addr))["haConnectionInfo"]
                return [(c["authenticated"], c["accessKey"]) for c in links]

            await eventually(lambda: signed_in(brokers[0].addr),
                             lambda got: got == [(True, "root")] * 2)
            await admin.create_topic(TOPIC, broker_addr=brokers[0].addr, read_queue_nums=1,
                                     write_queue_nums=1)
            queue = MessageQueue(TOPIC, GROUP, 0)
            result = await p.send(Message(TOPIC, b"before"), queue=queue)
            assert result.status is SendStatus.SEND_OK

            brokers[0].kill9()
            while True:  # until the new master's replica confirms a send
                try:
                    result = await p.send(Message(TOPIC, b"after"), queue=queue)
                except TideMQError:  # no master until the controllers elect one
                    await asyncio.sleep(0.05)
                    continue
                if result.status is SendStatus.SEND_OK:
                    break
                await asyncio.sleep(0.05)
            g = await group()
            new = brokers[g.master_broker_id - 1]  # type: ignore[attr-defined]
            assert await signed_in(new.addr) == [(True, "root")]
            assert "HA connection from" not in new.log(400)  # no refusal


async def test_a_member_the_master_refuses_is_never_in_sync(
        namesrvs: list[ControllerProcess], tmp_path: Path) -> None:
    """Broker 2 does not sign its HA connections: the master refuses it, and however
    well its own log seems to keep up, the master never puts it in the sync-state set (it
    could be elected without the messages acknowledged meanwhile)."""
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=addrs, request_timeout=3.0, access_key=ROOT[0],
                          secret_key=ROOT[1])
    with broker_group(namesrvs, tmp_path, **AUTH) as brokers:
        brokers[1].settings["haAuthFrameEnable"] = "false"
        async with AdminClient(config=config) as admin:
            controllers = ControllerAdmin(admin.instance.request, addrs)
            await start_first_master(controllers, brokers)

            async def group() -> Any:
                return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

            async def follows(addr: str) -> Any:
                return await broker_epoch_cache(admin.instance.request, addr)

            # broker 2 follows epoch 1 (it learnt it over remoting) but is refused on the
            # HA port; broker 3 copies and is in sync
            await eventually(lambda: follows(brokers[1].addr),
                             lambda c: [e.epoch for e in c.epoch_list] == [1])
            await eventually(lambda: asyncio.sleep(0, brokers[0].log(400)),
                             lambda text: "refused (unauthenticated)" in text)
            g = await eventually(group, lambda g: 3 in {r.broker_id
                                                        for r in g.in_sync_replicas})
            assert {r.broker_id for r in g.in_sync_replicas} == {1, 3}
