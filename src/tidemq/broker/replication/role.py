"""The role a broker plays in its group, and the one object that changes it.

A broker group is one broker name with one master (``brokerId`` 0) and replicas
(``brokerId`` > 0). A static configuration gives each broker its role once
(``brokerRole``, ``brokerId``, ``haMasterAddress``); a controller gives it again and
again, each time with an epoch. Both go through :class:`RoleHolder`:

* :meth:`RoleHolder.become_master` -- "you are the master of epoch E";
* :meth:`RoleHolder.become_replica` -- "you are replica ``broker_id`` of the master
  whose HA port is ``master_ha_address``, epoch E";
* :meth:`RoleHolder.step_down` -- "stop being master (or copying one); which broker
  is master is not known".

An order carrying an epoch older than the one held is refused with
:class:`StaleEpoch`; the listeners (the HA server, the HA client, the send path, the
registrar) are called with the new :class:`RoleState` once it is recorded, in
registration order, so the broker's parts follow one decision.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections.abc import Awaitable, Callable

from tidemq.errors import TideMQError

__all__ = ["BrokerRole", "RoleHolder", "RoleListener", "RoleState", "StaleEpoch"]

MASTER_ID = 0


class BrokerRole(enum.Enum):
    """RocketMQ's ``brokerRole``."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


@dataclasses.dataclass(frozen=True, slots=True)
class RoleState:
    """What a broker is in its group right now."""

    role: BrokerRole
    broker_id: int
    #: The master's HA address (``host:port``) for a replica; empty for a master.
    master_ha_address: str = ""
    #: The controller's epoch; 0 under a static configuration.
    epoch: int = 0
    #: A controller-mode master whose lease lapsed, stepped down in its epoch: it takes
    #: no sends, but its replicas stay connected to it (they copy nothing new), so that
    #: when the controllers name it master of the same epoch again it does not answer
    #: SLAVE_NOT_AVAILABLE while they connect again.
    lapsed: bool = False

    def __post_init__(self) -> None:
        if self.role.is_master and self.broker_id != MASTER_ID:
            raise ValueError(f"a master has brokerId {MASTER_ID}, not {self.broker_id}")
        if not self.role.is_master and self.broker_id == MASTER_ID:
            raise ValueError(f"a replica needs a brokerId other than {MASTER_ID}")

    @property
    def is_master(self) -> bool:
        return self.role.is_master


class StaleEpoch(TideMQError):
    """A role order carried an epoch older than the one the broker holds."""

    def __init__(self, held: int, given: int) -> None:
        super().__init__(f"epoch {given} is older than the epoch {held} this broker holds")
        self.held = held
        self.given = given


#: Called with the new state after every change; may be a coroutine function.
RoleListener = Callable[[RoleState], Awaitable[None] | None]


class RoleHolder:
    """The broker's current :class:`RoleState`; the only way to change it."""

    def __init__(self, initial: RoleState) -> None:
        self._state = initial
        self._listeners: list[RoleListener] = []
        #: One order at a time: the next waits until every listener followed this one.
        self._changing = asyncio.Lock()

    @property
    def state(self) -> RoleState:
        return self._state

    @property
    def is_master(self) -> bool:
        return self._state.is_master

    def add_listener(self, listener: RoleListener) -> None:
        self._listeners.append(listener)

    async def become_master(self, epoch: int = 0, *, sync: bool | None = None) -> RoleState:
        """Become the group's master (``brokerId`` 0) of ``epoch``. ``sync``: SYNC_MASTER
        (True) or ASYNC_MASTER (False); ``None`` keeps the current kind, SYNC_MASTER when
        the broker was a replica."""
        current = self._state
        if sync is None:
            sync = current.role is not BrokerRole.ASYNC_MASTER
        role = BrokerRole.SYNC_MASTER if sync else BrokerRole.ASYNC_MASTER
        return await self._change(RoleState(role, MASTER_ID, "", epoch))

    async def become_replica(self, master_ha_address: str, broker_id: int,
                             epoch: int = 0) -> RoleState:
        """Become replica ``broker_id`` of the master at ``master_ha_address``."""
        if not master_ha_address:
            raise ValueError("a replica needs its master's HA address")
        return await self._change(RoleState(BrokerRole.SLAVE, broker_id, master_ha_address,
                                            epoch))

    async def step_down(self, broker_id: int, *, lapsed: bool = False) -> RoleState:
        """Stop being master, or copying one, without knowing the next master: replica
        ``broker_id`` of no one, in the epoch held (a controller-mode master whose lease
        lapsed: ``lapsed``, see :attr:`RoleState.lapsed`; or a broker about to cut its
        log)."""
        return await self._change(RoleState(BrokerRole.SLAVE, broker_id, "",
                                            self._state.epoch, lapsed=lapsed))

    async def _change(self, new: RoleState) -> RoleState:
        """``new`` held and followed by every listener. An order given while the
        listeners still follow the previous one waits for them (and its epoch is checked
        then): two orders never interleave in the broker's parts."""
        async with self._changing:
            if new.epoch < self._state.epoch:
                raise StaleEpoch(self._state.epoch, new.epoch)
            self._state = new
            for listener in list(self._listeners):
                result = listener(new)
                if result is not None:
                    await result
            return new
