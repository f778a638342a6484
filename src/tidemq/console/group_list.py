"""The rows of the groups page, sorted by name or, as RocketMQ Dashboard sorts its group
list, by lag, consume TPS or consumers online, on the server before the page is cut.

Sorted by name, a page asks the brokers only for the figures of the rows it shows.
Sorted by a figure, every group matching the filter is asked for it first (a figure
cannot be sorted on without being read), then the page is cut from the sorted rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tidemq.client import monitor
from tidemq.client.monitor import ConsumeStats
from tidemq.console.model import is_system_group, offsets_only, owner_group, spark_group

if TYPE_CHECKING:
    from tidemq.client import AdminClient

__all__ = ["SORTS", "group_rows", "sort_key", "sort_of"]

#: ``?sort=`` values: the row member sorted on, largest first ("name": A to Z).
SORTS: dict[str, str] = {"name": "name", "lag": "lag", "tps": "tps", "consumers": "online"}

#: Concurrent per-group requests while building the rows.
_AT_ONCE = 8


def sort_of(params: Mapping[str, str]) -> str:
    """The page's sort (an unknown one reads as by name)."""
    sort = params.get("sort", "name")
    return sort if sort in SORTS else "name"


def sort_key(sort: str) -> Callable[[dict[str, Any]], Any]:
    """A key for ``sorted``: by name, or by the figure, largest first, a group whose
    figure could not be read last; ties by name."""
    member = SORTS[sort]
    if member == "name":
        return lambda row: row["name"]
    return lambda row: (not isinstance(row[member], int | float), -(row[member]
                        if isinstance(row[member], int | float) else 0), row["name"])


async def group_rows(admin: AdminClient, names: Sequence[str],
                     configs: Mapping[str, Mapping[str, Any]],
                     committed: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """One row per group of ``names``: its topics, lag, consume TPS, consumers online
    (lag "-" and TPS None when the brokers' consume stats of it could not be read)."""
    limit = asyncio.Semaphore(_AT_ONCE)

    async def one(name: str) -> tuple[ConsumeStats | BaseException,
                                      list[dict[str, Any]] | BaseException]:
        async with limit:
            stats, conns = await asyncio.gather(
                monitor.consume_stats(admin, name), monitor.consumer_connections(admin, name),
                return_exceptions=True)
            return stats, conns

    found = await asyncio.gather(*(one(n) for n in names))
    rows = []
    for name, (st, conns) in zip(names, found, strict=True):
        count = len(conns) if isinstance(conns, list) else 0
        configured = name in configs
        rows.append({"name": name, "system": is_system_group(name),
                     "topics": [t for t in (st.topics if isinstance(st, ConsumeStats)
                                            else committed.get(name, []))
                                if owner_group(t) is None],  # its retry topic is no news
                     "lag": st.lag if isinstance(st, ConsumeStats) else "-",
                     "tps": st.consume_tps if isinstance(st, ConsumeStats) else None,
                     "online": count, "configured": configured,
                     "offsets_only": offsets_only(configured, count),
                     "spark": spark_group(name, configured, count),
                     "enabled": (bool(configs[name].get("consumeEnable", True))
                                 if configured else None)})
    return rows
