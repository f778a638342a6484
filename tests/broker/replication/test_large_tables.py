"""A master and replica configured for frames above RocketMQ's default 16 MiB
(``maxFrameSize``) copy tables that large: the replica's own requests to its master
accept the frames the setting allows, not the default."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from tidemq.broker.offset_json import offset_json_parts
from tidemq.codec.frame import DEFAULT_MAX_FRAME_SIZE
from tidemq.inprocess import Cluster

LIMIT = 64 * 1024 * 1024


async def test_consumer_offsets_over_16_mib_reach_a_replica_that_allows_them(
        tmp_path: Path) -> None:
    table = {f"T{t:03d}@G{g:04d}": dict.fromkeys(range(8), 1_000_000 + g)
             for t in range(100) for g in range(1_700)}
    assert sum(map(len, offset_json_parts(table, list(table)))) > DEFAULT_MAX_FRAME_SIZE
    async with Cluster(tmp_path, broker={"max_frame_size": LIMIT}) as group:
        master = group.brokers[0]
        master.ctx.offsets.table = table
        replica = await group.add_replica(master, slave_metadata_sync_interval=100)
        sync = replica.metadata_sync
        async with asyncio.timeout(120):
            while sync.syncs == 0 and not sync.last_error:  # a copy done, or one failed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(sync.synced.wait(), 0.5)
        assert not sync.last_error, sync.last_error
        assert replica.ctx.offsets.table == table
