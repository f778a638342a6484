"""Broker groups as the cluster page shows them: each group's master, its replicas, which
of them are in sync and how far each one is behind, in bytes and in seconds.

Read from the brokers' runtime info (GET_BROKER_RUNTIME_INFO), without I/O here: a
master lists its connected replicas in ``haReplicaStatus`` (JSON rows of the replica's
end of the HA connection, the offset it reported, the bytes it lacks, the age of the
oldest record it lacks and whether it is in sync); each replica gives its own end of
that connection as ``haLocalAddress``, which is how a replica's broker row is matched
to the master's figures. A replica the master does not list is not copying it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BrokerGroup", "ReplicaView", "broker_groups"]


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaView:
    broker_id: int
    address: str
    #: Copying from the master (the master lists it).
    connected: bool
    in_sync: bool = False
    lag_bytes: int = 0
    #: Age of the oldest record it lacks, ms (-1: unknown).
    lag_ms: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerGroup:
    cluster: str
    name: str
    #: The master's address, ``None`` while the group has none.
    master: str | None
    replicas: tuple[ReplicaView, ...]

    @property
    def in_sync(self) -> int:
        return sum(1 for r in self.replicas if r.in_sync)


def _statuses(raw: object) -> dict[str, Mapping[str, Any]]:
    """The master's ``haReplicaStatus`` rows by replica address (none if unreadable)."""
    if not isinstance(raw, str) or not raw:
        return {}
    try:
        rows = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(rows, list):
        return {}
    return {str(r["address"]): r for r in rows if isinstance(r, dict) and "address" in r}


def _int(value: object, default: int = 0) -> int:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return default


def broker_groups(rows: Iterable[Mapping[str, Any]]) -> list[BrokerGroup]:
    """The broker groups of the cluster page's broker rows (``cluster``, ``broker_name``,
    ``broker_id``, ``address`` and the runtime info as ``s``), in their order."""
    members: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        members.setdefault((row["cluster"], row["broker_name"]), []).append(row)
    out = []
    for (cluster, name), group in members.items():
        master = next((r for r in group if r["broker_id"] == 0), None)
        statuses = _statuses((master or {}).get("s", {}).get("haReplicaStatus"))
        replicas = []
        for row in sorted(group, key=lambda r: int(r["broker_id"])):
            if row["broker_id"] == 0:
                continue
            status = statuses.get(str(row.get("s", {}).get("haLocalAddress", "")))
            if status is None:
                replicas.append(ReplicaView(int(row["broker_id"]), row["address"], False))
                continue
            replicas.append(ReplicaView(
                int(row["broker_id"]), row["address"], True, status.get("inSync") is True,
                _int(status.get("lagBytes")), _int(status.get("lagMs"), -1)))
        out.append(BrokerGroup(cluster, name, master["address"] if master else None,
                               tuple(replicas)))
    return out
