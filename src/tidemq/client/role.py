"""What every client role shares: its :class:`~tidemq.client.instance.ClientInstance`
and the lifecycle around it.

A role (the producer, the pull, LMQ and push consumers, the admin client) either runs on
an ``instance`` it was given, or acquires the instance shared by clients of its
name-server set on :meth:`InstanceRole.start` and releases it when it leaves.
:meth:`~InstanceRole.start` is the same for all: acquire, :meth:`~InstanceRole._register`
the role with the instance, start the instance, :meth:`~InstanceRole._joined` (a failure
so far gives the instance back), then :meth:`~InstanceRole._started`. Leaving ends with
:meth:`~InstanceRole._withdraw`: unregister and release. ``async with`` starts and
closes a role, and :attr:`~InstanceRole.instance` is the instance it runs on -- it
raises :class:`~tidemq.client.errors.ClientClosedError` before ``start`` and after
``close``. Consumers add their own shared part in :mod:`tidemq.client.consumer_role`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from tidemq.client.config import ClientConfig
from tidemq.client.errors import ClientClosedError
from tidemq.client.instance import ClientInstance

__all__ = ["InstanceRole"]


class InstanceRole(abc.ABC):
    """Base of the client roles; see the module docstring.

    ``config`` is the given ``instance``'s, else ``config`` for the name servers
    ``namesrv`` (:meth:`ClientConfig.for_namesrv`).
    """

    def __init__(self, namesrv: str | Sequence[str] | None, config: ClientConfig | None,
                 instance: ClientInstance | None) -> None:
        self.config = instance.config if instance is not None else ClientConfig.for_namesrv(
            namesrv, config)
        self._given = instance
        self._instance: ClientInstance | None = None

    async def start(self) -> None:
        """Join the client instance and announce the role (nothing if started)."""
        if self._instance is not None:
            return
        inst = self._given if self._given is not None else ClientInstance.acquire(self.config)
        try:
            self._register(inst)
            await inst.start()
            self._instance = inst
            await self._joined()
        except BaseException:
            self._instance = None
            if self._given is None:
                await inst.release()
            raise
        await self._started(inst)

    @abc.abstractmethod
    async def close(self) -> None:
        """Withdraw the role and release the instance; ``instance`` raises after it."""

    def _register(self, inst: ClientInstance) -> None:
        """Tell ``inst`` of the role before it starts (what its heartbeats announce)."""
        return None

    async def _unregister(self, inst: ClientInstance) -> None:
        """Withdraw the role from ``inst`` and the brokers."""
        return None

    async def _joined(self) -> None:
        """What the start needs done on the running instance before it counts as done;
        a failure here gives the instance back."""
        return None

    async def _started(self, inst: ClientInstance) -> None:
        """What follows a successful start (its failures leave the role started)."""
        return None

    async def _withdraw(self, inst: ClientInstance) -> None:
        """The end of every close: the role stops being started, is unregistered, and an
        instance it acquired is released."""
        self._instance = None
        await self._unregister(inst)
        if self._given is None:
            await inst.release()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    @property
    def instance(self) -> ClientInstance:
        """The running client instance (raises :class:`ClientClosedError` when not started)."""
        if self._instance is None:
            raise ClientClosedError(repr(self))
        return self._instance
