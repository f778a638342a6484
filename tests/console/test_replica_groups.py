"""The cluster page's broker groups, from the brokers' runtime info."""

from __future__ import annotations

import json
from typing import Any

from tidemq.console.replica_groups import ReplicaView, broker_groups


def row(name: str, broker_id: int, address: str, **status: str) -> dict[str, Any]:
    return {"cluster": "c", "broker_name": name, "broker_id": broker_id, "address": address,
            "s": status}


def test_replicas_are_matched_to_the_masters_figures_by_their_ha_address() -> None:
    master_status = json.dumps([
        {"address": "10.0.0.2:5000", "ackedOffset": 90, "lagBytes": 10, "lagMs": 1500,
         "inSync": True},
        {"address": "10.0.0.3:6000", "ackedOffset": 0, "lagBytes": 100, "lagMs": 9000,
         "inSync": False}])
    rows = [row("a", 0, "m:1", haReplicaStatus=master_status),
            row("a", 2, "r2:1", haLocalAddress="10.0.0.3:6000"),
            row("a", 1, "r1:1", haLocalAddress="10.0.0.2:5000"),
            row("a", 3, "r3:1", haLocalAddress="10.0.0.9:1"),  # not copying this master
            row("b", 1, "s:1", haLocalAddress="x:1")]  # a group whose master is down
    a, b = broker_groups(rows)
    assert (a.name, a.master, a.in_sync) == ("a", "m:1", 1)
    assert a.replicas == (ReplicaView(1, "r1:1", True, True, 10, 1500),
                          ReplicaView(2, "r2:1", True, False, 100, 9000),
                          ReplicaView(3, "r3:1", False))
    assert (b.master, b.replicas) == (None, (ReplicaView(1, "s:1", False),))


def test_unreadable_master_figures_leave_its_replicas_unmatched() -> None:
    for bad in ("not json", "{}", "[1, 2]", ""):
        (group,) = broker_groups([row("a", 0, "m:1", haReplicaStatus=bad),
                                  row("a", 1, "r:1", haLocalAddress="h:1")])
        assert group.replicas == (ReplicaView(1, "r:1", False),)
