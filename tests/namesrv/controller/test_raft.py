"""Three Raft nodes in-process over loopback TCP: a node that takes over as leader counts
as leading only once it has applied every entry committed before it took over.

The fault injected: a follower that receives the entries but none of the later messages
telling it they were committed (as when the old leader dies with them unsent). It still
holds the longest log, so it wins the election that follows; until its own term's first
entry is committed its state lacks what the controllers agreed on, and it must not
answer as leader meanwhile.

A node restarted from its journal still holds what it acknowledged, so a peer that never
received a committed change cannot be elected over it and the change survives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidemq.namesrv.controller.events import RegisterBroker
from tidemq.namesrv.controller.raft import RaftLog
from tidemq.net.ports import free_ports

GROUP = "broker-a"
T = TypeVar("T")


async def _until(probe: Callable[[], T | None], what: str, timeout: float = 30) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (found := probe()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return found


def _withhold_commits(raft: RaftLog) -> None:
    """From now on ``raft`` hears of no commit beyond the one it knows."""
    cap = raft._sync.raftCommitIndex
    transport: Any = raft._sync._SyncObj__transport
    deliver = transport._onMessageReceivedCallback

    def capped(node: Any, message: Any) -> None:
        if isinstance(message, dict) and message.get("type") == "append_entries":
            message = {**message, "commit_index": min(message["commit_index"], cap)}
        deliver(node, message)

    transport._onMessageReceivedCallback = capped


def _has_group(raft: RaftLog) -> bool:
    with raft.reading() as state:
        return GROUP in state.groups


async def test_a_new_leader_leads_only_once_it_has_applied_what_it_inherited() -> None:
    addrs = [f"127.0.0.1:{port}" for port in free_ports(3)]

    def node(address: str) -> RaftLog:
        return RaftLog(address, [a for a in addrs if a != address])

    nodes = [node(a) for a in addrs]
    try:
        leader = await _until(lambda: next((n for n in nodes if n.is_leader), None),
                              "a leader")
        survivor = next(n for n in nodes if n is not leader)
        _withhold_commits(survivor)
        register = RegisterBroker(cluster="c", broker_name=GROUP, broker_id=1,
                                  address="127.0.0.1:1")
        assert await leader.submit(register)
        committed = leader._sync.getStatus()["log_len"]
        await _until(lambda: survivor._sync.getStatus()["log_len"] >= committed,
                     "the survivor to hold the entry")
        assert not _has_group(survivor)  # held, never heard committed

        # the other two die; one comes back with nothing (no journal)
        for n in [n for n in nodes if n is not survivor]:
            nodes.remove(n)
            await asyncio.to_thread(n.close)
        # what the survivor's state holds whenever it counts as leader, checked on its
        # own thread after every round of applies
        seen: list[bool] = []

        def look() -> None:
            if survivor.is_leader:
                seen.append(_has_group(survivor))

        survivor._sync.addOnTickCallback(look)
        nodes.append(node(leader.self_address))

        await _until(lambda: seen, "the survivor to lead")
        assert all(seen), "the survivor led before applying the group it held"
        assert _has_group(survivor)
    finally:
        for n in nodes:
            await asyncio.to_thread(n.close)


# PySyncObj reads the journal's meta file without closing it
@pytest.mark.filterwarnings("ignore:Exception ignored in. <_io.FileIO name='.*raft.journal.meta'"
                            ":pytest.PytestUnraisableExceptionWarning")
async def test_a_node_restarted_with_its_journal_keeps_what_it_acknowledged(
        tmp_path: Path) -> None:
    addrs = [f"127.0.0.1:{port}" for port in free_ports(3)]

    def node(i: int) -> RaftLog:
        return RaftLog(addrs[i], [a for a in addrs if a != addrs[i]],
                       journal_dir=tmp_path / f"raft-{i}")

    # two of three commit the group while the third is down
    nodes = [node(0), node(1)]
    try:
        leader = await _until(lambda: next((n for n in nodes if n.is_leader), None),
                              "a leader")
        assert await leader.submit(RegisterBroker(cluster="c", broker_name=GROUP,
                                                  broker_id=1, address="127.0.0.1:1"))
        # both go down; one comes back from its journal, the third starts with nothing
        for n in list(nodes):
            nodes.remove(n)
            await asyncio.to_thread(n.close)
        nodes = [node(0), node(2)]
        leader = await _until(lambda: next((n for n in nodes if n.is_leader), None),
                              "a leader after the restart")
        assert leader is nodes[0], "the node that never held the group was elected"
        assert _has_group(leader)
        await _until(lambda: _has_group(nodes[1]), "the third node to receive the group")
    finally:
        for n in nodes:
            await asyncio.to_thread(n.close)
