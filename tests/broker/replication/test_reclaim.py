"""The bodies a returning master reads from its replicas: what is accepted, and what is
refused with a reason."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.held import Held, answered_meanwhile
from tests.broker.replication.test_group import caught_up
from tests.broker.test_lmq import LMQ_STORE, fan_out
from tests.broker.wire import Peer, dispatched

import tidemq.broker.replication.reclaim as reclaim_module
from tidemq.broker.app import BrokerApp
from tidemq.broker.replication.reclaim import (
    parse_delay_progress,
    parse_lmq_offsets,
    parse_lmq_tombstones,
    parse_offset_table,
)
from tidemq.broker.timers import TimerCheckpoint
from tidemq.codec.command import RequestCode
from tidemq.testing import Cluster

TABLES = st.dictionaries(
    st.tuples(st.text("abT", min_size=1, max_size=3), st.text("gh", min_size=1, max_size=3))
    .map(lambda tg: f"{tg[0]}@{tg[1]}"),
    st.dictionaries(st.integers(0, 100), st.integers(0, 2**62), max_size=4), max_size=4)


@given(TABLES)
def test_an_offset_table_reads_back_as_served(table: dict[str, dict[int, int]]) -> None:
    served = json.loads(json.dumps(
        {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in table.items()}}))
    assert parse_offset_table(served) == table


@pytest.mark.parametrize("body, reason", [
    ([], "offsetTable"),
    ({"offsetTable": []}, "offsetTable"),
    ({"offsetTable": {"nogroup": {"0": 1}}}, "topic@group"),
    ({"offsetTable": {"T@g": {"0": -1}}}, "negative"),
    ({"offsetTable": {"T@g": {"x": 1}}}, "invalid literal"),
])
def test_a_bad_offset_table_is_refused_saying_why(body: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_offset_table(body)


NAMES = st.text(min_size=1, max_size=6)


@given(st.lists(st.tuples(NAMES, NAMES, st.integers(0, 2**62)), max_size=5), st.booleans(),
       st.lists(st.tuples(NAMES, st.integers(0, 2**62)), max_size=5))
def test_an_lmq_page_reads_back_as_served(offsets: list[tuple[str, str, int]], more: bool,
                                          tombstones: list[tuple[str, int]]) -> None:
    """Both readers of a GET_LMQ_METADATA page (a replica's copy, a master's reclaim)
    read it through these two."""
    assert parse_lmq_offsets(json.loads(json.dumps({"rows": offsets, "more": more}))) \
        == (offsets, more)
    assert parse_lmq_tombstones(json.loads(json.dumps({"rows": tombstones, "more": more}))) \
        == (tombstones, more)


@pytest.mark.parametrize("page, reason", [
    ([], "not a page"),
    ({"rows": []}, "more"),
    ({"rows": [["%LMQ%a", "g"]], "more": False}, "not enough values"),
    ({"rows": [["%LMQ%a", "g", -1]], "more": False}, "negative"),
])
def test_a_bad_lmq_page_is_refused_saying_why(page: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_lmq_offsets(page)


@given(st.dictionaries(st.integers(1, 18), st.integers(0, 2**40), max_size=6),
       st.none() | st.builds(TimerCheckpoint, st.integers(0, 2**40), st.integers(0, 2**45),
                             st.integers(0, 2**40)))
def test_delay_progress_reads_back_as_served(levels: dict[int, int],
                                             timer: TimerCheckpoint | None) -> None:
    body: dict[str, Any] = {"offsetTable": {str(k): v for k, v in levels.items()}}
    if timer is not None:
        body["timerCheckpoint"] = timer.to_json()
    assert parse_delay_progress(json.loads(json.dumps(body))) == (levels, timer)


def test_a_bad_timer_checkpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="not a timer checkpoint"):
        parse_delay_progress({"offsetTable": {}, "timerCheckpoint": {"frontierMs": -3}})


async def test_a_restarted_master_starts_with_what_its_replica_took(tmp_path: Path) -> None:
    """In one process: the replica takes commits (LMQ ones too) while its master is
    stopped; the master, started again, holds them before it registers."""
    async with Cluster(tmp_path, store={**LMQ_STORE, "mapped_file_size_commit_log": 65536},
                       broker={"slave_acting_master": True}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=60_000)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Parent", 1))
            for i in range(6):
                await peer.ok(fan_out("%LMQ%a", b"m%d" % i))
            await dispatched(master)
        await caught_up(master, replica)
        await asyncio.wait_for(replica.metadata_sync.synced.wait(), 30)
        await master.stop()
        async with Peer(replica.broker_addr) as rpeer:  # consumers commit to the replica
            for topic in ("Parent", "%LMQ%a"):
                await rpeer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic=topic,
                                            queueId=0, consumerGroup="g", commitOffset=5))
        back = await group.restart_broker(0)  # returns once it registered
        assert back.ctx.offsets.query("g", "Parent", 0) == 5
        assert back.store.lmq is not None
        assert back.store.lmq.committed_offset("g", "%LMQ%a") == 5
        assert (back.reclaim.offsets_raised, back.reclaim.lmq_offsets_raised) == (1, 1)


@pytest.mark.parametrize("step", ["_raised_offsets", "_raised_lmq_offsets"])
async def test_a_restarted_master_reads_its_replicas_progress_off_the_loop(
        tmp_path: Path, held: Held, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """The replica's tables are decoded and compared on a thread: the master, serving
    already, answers others meanwhile."""
    async with Cluster(tmp_path, store={**LMQ_STORE, "mapped_file_size_commit_log": 65536},
                       broker={"slave_acting_master": True}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, slave_metadata_sync_interval=60_000)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Parent", 1))
            for i in range(6):
                await peer.ok(fan_out("%LMQ%a", b"m%d" % i))
            await dispatched(master)
        await caught_up(master, replica)
        await asyncio.wait_for(replica.metadata_sync.synced.wait(), 30)
        async with Peer(replica.broker_addr) as rpeer:
            for topic in ("Parent", "%LMQ%a"):
                await rpeer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, topic=topic,
                                            queueId=0, consumerGroup="g", commitOffset=5))
        original = getattr(reclaim_module, step)

        def slow(*args: Any) -> Any:
            held.hold()
            return original(*args)

        monkeypatch.setattr(reclaim_module, step, slow)
        await master.stop()
        back = group.brokers[0] = BrokerApp(master.config, master.store_config)
        start = asyncio.create_task(back.start())
        await held.entered_soon()
        async with Peer(f"127.0.0.1:{back.server.port}") as other:
            await answered_meanwhile(other, held)
        await start
        assert held.gave_up == [False]
        assert back.ctx.offsets.query("g", "Parent", 0) == 5
        assert back.store.lmq is not None
        assert back.store.lmq.committed_offset("g", "%LMQ%a") == 5
