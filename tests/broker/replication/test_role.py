"""The role holder: the one object a static configuration and a controller both drive."""

from __future__ import annotations

import asyncio

import pytest

from tidemq.broker.config import load_broker_config
from tidemq.broker.replication.role import BrokerRole, RoleHolder, RoleState, StaleEpoch
from tidemq.errors import ConfigError


async def test_orders_reach_listeners_in_order_and_old_epochs_are_refused() -> None:
    holder = RoleHolder(RoleState(BrokerRole.SLAVE, 1, "127.0.0.1:1", epoch=0))
    seen: list[RoleState] = []

    async def slow(state: RoleState) -> None:
        seen.append(state)

    holder.add_listener(seen.append)
    holder.add_listener(slow)
    state = await holder.become_master(3)
    assert state == RoleState(BrokerRole.SYNC_MASTER, 0, "", 3)
    assert seen == [state, state]
    with pytest.raises(StaleEpoch) as err:
        await holder.become_replica("127.0.0.1:2", 1, epoch=2)
    assert (err.value.held, err.value.given) == (3, 2)
    assert holder.state is state  # nothing changed, nobody was told
    assert len(seen) == 2
    again = await holder.become_replica("127.0.0.1:2", 2, epoch=4)
    assert not again.is_master and again.master_ha_address == "127.0.0.1:2"


async def test_an_order_given_while_listeners_follow_another_waits_for_them() -> None:
    """The parts of the broker follow one order at a time: a step-down given while the
    HA parts are still taking up the master's role is applied after them, so the last
    state every listener saw is the holder's."""
    holder = RoleHolder(RoleState(BrokerRole.SLAVE, 1, "127.0.0.1:1", epoch=1))
    release = asyncio.Event()
    following: list[str] = []
    seen: list[RoleState] = []

    async def slow_part(state: RoleState) -> None:
        following.append("start")
        if state.is_master:
            await release.wait()  # the HA server starting, the copy stopping ...
        following.append("end")
        seen.append(state)

    holder.add_listener(slow_part)
    becoming = asyncio.ensure_future(holder.become_master(2))
    while not following:
        await asyncio.sleep(0)
    stepping = asyncio.ensure_future(holder.step_down(1))
    for _ in range(5):
        await asyncio.sleep(0)
    assert following == ["start"]  # the step-down waits
    release.set()
    await asyncio.gather(becoming, stepping)
    assert following == ["start", "end", "start", "end"]
    assert seen[-1] == holder.state and not holder.state.is_master


async def test_an_async_master_stays_async_unless_told() -> None:
    holder = RoleHolder(RoleState(BrokerRole.ASYNC_MASTER, 0))
    assert (await holder.become_master(1)).role is BrokerRole.ASYNC_MASTER
    assert (await holder.become_master(2, sync=True)).role is BrokerRole.SYNC_MASTER


def test_a_role_and_its_broker_id_must_agree() -> None:
    with pytest.raises(ValueError):
        RoleState(BrokerRole.SLAVE, 0, "h:1")
    with pytest.raises(ValueError):
        RoleState(BrokerRole.SYNC_MASTER, 1)


def test_config_keys() -> None:
    broker, _, unknown = load_broker_config(overrides={
        "brokerRole": "SLAVE", "brokerId": "2", "haMasterAddress": "127.0.0.1:10912",
        "listenPort": "10921", "inSyncReplicas": "2", "slaveReadEnable": "true"})
    assert unknown == []
    assert broker.broker_role is BrokerRole.SLAVE and broker.broker_id == 2
    assert broker.ha_port == 10922  # listenPort + 1
    assert broker.slave_read_enable
    with pytest.raises(ConfigError) as err:
        load_broker_config(overrides={"brokerRole": "SLAVE"})
    assert err.value.key == "brokerId"
    with pytest.raises(ConfigError) as err:
        load_broker_config(overrides={"brokerRole": "SYNC_MASTER", "brokerId": "1"})
    assert err.value.key == "brokerId"
    free, _, _ = load_broker_config(overrides={"listenPort": "0"})
    assert free.ha_port == 0
