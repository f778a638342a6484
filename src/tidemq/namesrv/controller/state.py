"""The controllers' replicated state: every broker group's members, master, master epoch
and sync-state set, and every controller's request address.

Pure and synchronous: :meth:`ControllerState.apply` is the only writer, and it is called
with the events of the replicated log in log order, on every controller alike. An event
whose expectation no longer holds (an election decided against an older master epoch, a
sync-state-set change from a fenced master) leaves the state as it is and returns
``False``.
"""

from __future__ import annotations

import dataclasses

from tidemq.namesrv.controller.events import (
    AlterSyncStateSet,
    AnnounceController,
    CleanBrokerData,
    ElectMaster,
    Event,
    RegisterBroker,
)

__all__ = ["BrokerAddresses", "BrokerGroup", "ControllerState"]


@dataclasses.dataclass(slots=True)
class BrokerGroup:
    """One broker group (cluster + broker name) as the controllers know it."""

    cluster: str
    broker_name: str
    #: Controller broker id -> the broker's remoting address.
    brokers: dict[int, str] = dataclasses.field(default_factory=dict)
    #: Controller broker id -> the broker's HA endpoint (when it said).
    ha_addresses: dict[int, str] = dataclasses.field(default_factory=dict)
    master_id: int | None = None
    #: Rises by one with every master elected.
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    #: Rises by one with every change of the sync-state set (an election included).
    sync_state_set_epoch: int = 0

    @property
    def master_address(self) -> str | None:
        return None if self.master_id is None else self.brokers.get(self.master_id)

    @property
    def master_ha_address(self) -> str | None:
        return None if self.master_id is None else self.ha_addresses.get(self.master_id)

    @property
    def never_elected(self) -> bool:
        """No master was ever elected: the first election takes the broker that asks."""
        return self.master_epoch == 0


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerAddresses:
    """Where each group's brokers are, as of one moment of the state: (cluster, broker
    name, master's address or ``None``, every member's address) per group."""

    groups: tuple[tuple[str, str, str | None, frozenset[str]], ...] = ()

    def first_master(self) -> tuple[str, str] | None:
        """(address, cluster) of the master of the first group, clusters and names in
        sorted order; ``None`` when no group has a master."""
        for cluster, _name, master, _members in sorted(self.groups, key=lambda g: g[:2]):
            if master is not None:
                return master, cluster
        return None

    def cluster_of(self, addr: str) -> str:
        """The cluster of the broker at ``addr`` ("" when no group has it)."""
        return next((g[0] for g in self.groups if addr in g[3]), "")


@dataclasses.dataclass(slots=True)
class ControllerState:
    groups: dict[str, BrokerGroup] = dataclasses.field(default_factory=dict)
    #: Raft endpoint -> request address of every controller that announced itself.
    controllers: dict[str, str] = dataclasses.field(default_factory=dict)

    def addresses(self) -> BrokerAddresses:
        return BrokerAddresses(tuple(
            (g.cluster, g.broker_name, g.master_address, frozenset(g.brokers.values()))
            for g in self.groups.values()))

    def apply(self, event: Event) -> bool:
        """Apply one event of the log; ``False`` when its expectation no longer holds."""
        match event:
            case RegisterBroker():
                return self._register(event)
            case ElectMaster():
                return self._elect(event)
            case AlterSyncStateSet():
                return self._alter(event)
            case CleanBrokerData():
                return self._clean(event)
            case AnnounceController():
                self.controllers[event.raft_address] = event.address
                return True

    def _register(self, event: RegisterBroker) -> bool:
        group = self.groups.get(event.broker_name)
        if group is None:
            group = self.groups[event.broker_name] = BrokerGroup(event.cluster, event.broker_name)
        group.brokers[event.broker_id] = event.address
        if event.ha_address:
            group.ha_addresses[event.broker_id] = event.ha_address
        else:
            group.ha_addresses.pop(event.broker_id, None)
        return True

    def _elect(self, event: ElectMaster) -> bool:
        group = self.groups.get(event.broker_name)
        if group is None or group.master_epoch != event.expected_master_epoch:
            return False
        if event.new_master is None:
            group.master_id = None  # the set stays: its members may come back
            return True
        if event.new_master not in group.brokers:
            return False
        group.master_id = event.new_master
        group.master_epoch += 1
        group.sync_state_set = frozenset({event.new_master})
        group.sync_state_set_epoch += 1
        return True

    def _alter(self, event: AlterSyncStateSet) -> bool:
        group = self.groups.get(event.broker_name)
        if (group is None or group.master_id != event.master_id
                or group.master_epoch != event.master_epoch
                or group.sync_state_set_epoch != event.expected_epoch
                or event.master_id not in event.sync_state_set
                or not event.sync_state_set <= group.brokers.keys()):
            return False
        group.sync_state_set = event.sync_state_set
        group.sync_state_set_epoch += 1
        return True

    def _clean(self, event: CleanBrokerData) -> bool:
        group = self.groups.get(event.broker_name)
        if group is None:
            return False
        if not event.broker_ids:
            del self.groups[event.broker_name]
            return True
        for broker_id in event.broker_ids:
            group.brokers.pop(broker_id, None)
            group.ha_addresses.pop(broker_id, None)
        if group.sync_state_set & event.broker_ids:
            group.sync_state_set -= event.broker_ids
            group.sync_state_set_epoch += 1
        if group.master_id in event.broker_ids:
            group.master_id = None
        if not group.brokers:
            del self.groups[event.broker_name]
        return True
