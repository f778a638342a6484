"""``tidemq admin updateStaticTopic`` and ``remappingStaticTopic`` against a real
two-broker cluster: mqadmin's static-topic flags make and move logical queues, and the
messages sent before a move stay readable at their offsets."""

from __future__ import annotations

import json
import re

from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin
from tests.cli.test_logical_cli import flat, logical_route, run, send


def _leaders(mapping: dict[str, object]) -> dict[int, str]:
    queues = mapping["queues"]
    assert isinstance(queues, dict)
    return {int(lq): next(s["broker"] for s in segs if s["state"] == "NORMAL")
            for lq, segs in queues.items()}


def test_update_and_remap_a_static_topic(cluster: ThreadedCluster) -> None:
    out = admin(cluster, "updateStaticTopic", "-t", "StaticOrders", "-qn", "2", "-b",
                "broker-a")
    assert (out["total"], out["writable"]) == (2, 2)
    assert _leaders(out) == {0: "broker-a", 1: "broker-a"}
    logical_route(cluster, "StaticOrders", 2)
    assert send(cluster, "StaticOrders", 1, 3) == [0, 1, 2]

    same = run(cluster, "updateStaticTopic", "-t", "StaticOrders", "-qn", "2", "-c",
               "DefaultCluster")
    assert "StaticOrders has 2 queues already: nothing changed." in flat(same.stdout)
    lines = same.stdout.splitlines()
    assert re.fullmatch(r"StaticOrders \(epoch \d+, 2/2 writable\)", lines[-4]), lines
    assert lines[-3:] == [
        "#brokerName  #MessageQueue                            #LogicalQueue(range)  #QueueStatus",
        "broker-a     MessageQueue(StaticOrders, broker-a, 0)  LogicalQueue(0, 0-)   NORMAL",
        "broker-a     MessageQueue(StaticOrders, broker-a, 1)  LogicalQueue(1, 0-)   NORMAL"]
    grown = admin(cluster, "updateStaticTopic", "-t", "StaticOrders", "-qn", "3", "-c",
                  "DefaultCluster")
    assert (grown["total"], grown["writable"]) == (3, 3)
    fewer = admin(cluster, "updateStaticTopic", "-t", "StaticOrders", "-qn", "1", "-b",
                  "broker-a", code=1)
    assert "cannot decrease" in flat(fewer.stderr)

    moved = admin(cluster, "remappingStaticTopic", "-t", "StaticOrders", "-b", "broker-b")
    leaders = _leaders(moved["mapping"])
    assert set(leaders.values()) == {"broker-b"}
    assert {(m["queue"], m["from"], m["to"]) for m in moved["moves"]} == {
        (lq, "broker-a", "broker-b") for lq, b in _leaders(grown).items() if b == "broker-a"}
    assert send(cluster, "StaticOrders", 1, 1) == [3]  # offsets go on after the move
    queried = json.loads(run(cluster, "queryLogicalQueueMapping", "-t", "StaticOrders",
                             "--json").stdout)
    assert _leaders(queried) == leaders
    again = run(cluster, "remappingStaticTopic", "-t", "StaticOrders", "-c", "DefaultCluster")
    assert "nothing to move" in flat(again.stdout)


def test_an_upstream_mapping_file_is_refused(cluster: ThreadedCluster) -> None:
    refused = admin(cluster, "updateStaticTopic", "-t", "StaticOther", "-qn", "2", "-b",
                    "broker-a", "-mf", "/tmp/mapping.json", code=2)
    assert "updateLogicalQueueMapping -f" in flat(refused.output)
    neither = admin(cluster, "remappingStaticTopic", "-t", "StaticOther", code=2)
    assert "give -b (broker names) or -c (clusters)" in flat(neither.output)
