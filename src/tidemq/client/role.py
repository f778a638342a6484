"""What every client role shares: ``async with`` starts and closes it, and
:attr:`InstanceRole.instance` is the :class:`~tidemq.client.instance.ClientInstance` it
runs on.

The producer, the pull, LMQ and push consumers and the admin client each hold their
instance in ``_instance`` -- ``None`` before :meth:`start` and after :meth:`close`,
which they implement.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self

from tidemq.client.errors import ClientClosedError
from tidemq.client.instance import ClientInstance

__all__ = ["InstanceRole"]


class InstanceRole(abc.ABC):
    """Base of the client roles: the context-manager protocol and ``instance``."""

    _instance: ClientInstance | None

    @abc.abstractmethod
    async def start(self) -> None:
        """Acquire the instance and announce the role to the brokers."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Withdraw the role and release the instance; ``instance`` raises after it."""

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
