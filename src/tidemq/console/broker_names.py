"""Which broker an address is, for a page that names a broker that did not answer: the
name server's cluster table, read at the start of every page, alongside the page's own
requests (a broker that did not answer is known only after the page's deadline, long
after the name server answered)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidemq.errors import TideMQError

if TYPE_CHECKING:
    from tidemq.client import AdminClient

__all__ = ["BrokerNames"]

log = logging.getLogger(__name__)

class BrokerNames:
    """Address -> ``broker-a`` (``broker-a, replica 1`` for a replica)."""

    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin
        self._names: dict[str, str] = {}

    async def refresh(self) -> None:
        """Read the cluster table; a failure keeps the copy read before (the page will
        say what failed)."""
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
