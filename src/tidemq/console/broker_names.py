"""Which broker an address is, for a page that names a broker that did not answer: the
name server's cluster table, read again when the copy is older than a few seconds."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from tidemq.errors import TideMQError

if TYPE_CHECKING:
    from tidemq.client import AdminClient

__all__ = ["BrokerNames"]

log = logging.getLogger(__name__)

#: Seconds a copy of the cluster table is used.
FRESH = 10.0


class BrokerNames:
    """Address -> ``broker-a`` (``broker-a, replica 1`` for a replica)."""

    def __init__(self, admin: AdminClient, fresh: float = FRESH) -> None:
        self._admin = admin
        self._fresh = fresh
        self._names: dict[str, str] = {}
        self._read_at: float | None = None

    async def refresh(self) -> None:
        """Read the cluster table when the copy is stale; a failure keeps the old copy
        (the page that follows will say what failed)."""
        now = asyncio.get_running_loop().time()
        if self._read_at is not None and now - self._read_at < self._fresh:
            return
        self._read_at = now
        try:
            brokers = await self._admin.cluster_list()
        except TideMQError as exc:
            log.info("broker names: %s", exc)
            return
        self._names = {b.address: b.broker_name if b.broker_id == 0
                       else f"{b.broker_name}, replica {b.broker_id}" for b in brokers}

    def name(self, address: str) -> str:
        """The broker's name, or ``a broker`` when the name server did not list it."""
        return self._names.get(address, "a broker")
