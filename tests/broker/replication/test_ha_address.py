"""A broker whose HA port is chosen when it binds (``haListenPort=0``) names no HA address
until it has one: it never tells the controllers ``host:0``, which its replicas would try
to copy from (and the master would refuse SYNC sends until it named the real port)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.broker.replication.test_metadata_push import pair

from tidemq.broker.app import BrokerApp
from tidemq.broker.controller_link import ControllerLink

__all__ = ["pair"]  # fixture


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every HA address a controller link registers, in order."""
    seen: list[str] = []
    register = ControllerLink._register

    async def recording(self: ControllerLink) -> Any:
        seen.append(self._ha_address())
        return await register(self)

    monkeypatch.setattr(ControllerLink, "_register", recording)
    return seen


async def test_no_unbound_ha_address_is_registered(
        registered: list[str], pair: tuple[BrokerApp, BrokerApp]) -> None:
    master, replica = pair
    assert registered, "nothing registered"
    assert not [a for a in registered if a.endswith(":0")], registered
    assert master.ctx.replication.ha_address in registered
    state = replica.role.state
    assert state.master_ha_address == master.ctx.replication.ha_address
