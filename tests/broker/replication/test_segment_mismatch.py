"""A replica whose ``mappedFileSizeCommitLog`` differs from its master's, over real TCP:
it keeps the master's records up to the first segment end where the two logs part,
stops copying, and says why in its runtime info; the master serves on."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.broker.wire import Peer, create_topic, dispatched, send

from tidemq.errors import ResponseCode
from tidemq.testing import Cluster

MASTER_SEGMENT = 64 * 1024


async def test_a_replica_with_larger_segments_stops_at_the_masters_first_segment_end(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, store={"mapped_file_size_commit_log": MASTER_SEGMENT}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(
            master, store={"mapped_file_size_commit_log": 2 * MASTER_SEGMENT})
        client = replica.ctx.replication.client
        assert client is not None
        async with Peer(master.broker_addr) as peer:
            await peer.ok(create_topic("T", 1))
            ends = []
            while master.store.commitlog.max_offset < 2 * MASTER_SEGMENT:
                resp = await peer(send("T", b"m%04d" % len(ends) + b"." * 900))
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                ends.append(master.store.commitlog.max_offset)
            await asyncio.wait_for(client.ended.wait(), 30)
            info = replica.ctx.replication.runtime_info()
            assert "mappedFileSizeCommitLog" in info["haLastError"]
            assert info["haConnected"] == "false"
            # the replica holds the master's records of its first segment, whole
            kept = [end for end in ends if end <= MASTER_SEGMENT]
            assert replica.store.commitlog.max_offset == kept[-1]
            await dispatched(replica)
            assert replica.store.max_offset("T", 0) == len(kept)
            got = replica.store.get("T", 0, 0, max_count=len(ends), max_bytes=1 << 30)
            assert (got.message_count, got.total_bytes) == (len(kept), kept[-1])
            # the master serves on
            resp = await peer(send("T", b"after"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
