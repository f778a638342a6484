"""An idle master sends its replicas an empty frame every heartbeat interval; an idle
replica reports its offset every heartbeat interval all the same, so the master, which
drops a replica silent for the housekeeping interval, keeps it: a SYNC_MASTER group
at rest does not lose its replica, and its next send its copy, every few seconds."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.broker.wire import Peer, create_topic, send

from tidemq.broker.replication.role import BrokerRole
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster

HEARTBEAT_MS = 100
HOUSEKEEPING_MS = 1000


async def test_an_idle_replica_stays_connected(tmp_path: Path) -> None:
    ha = {"ha_send_heartbeat_interval": HEARTBEAT_MS,
          "ha_housekeeping_interval": HOUSEKEEPING_MS}
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.SYNC_MASTER, **ha},
                       store={"mapped_file_size_commit_log": 64 * 1024}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master)
        client = replica.ctx.replication.client
        server = master.ctx.replication.server
        assert client is not None and server is not None
        await asyncio.wait_for(client.connected.wait(), 10)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(create_topic("T", 1))
            assert (await peer(send("T", b"first"))).code == ResponseCode.SUCCESS
            link = [lk.address for lk in server.links]
            assert link == [client.local_address]
            # idle for three housekeeping intervals, counted in the master's empty frames
            frames = client.frames
            while client.frames < frames + 3 * HOUSEKEEPING_MS // HEARTBEAT_MS:
                await asyncio.sleep(HEARTBEAT_MS / 1000)
            assert [lk.address for lk in server.links] == link  # never dropped
            assert "silent" not in client.last_error and "closed" not in client.last_error
            answer = await peer(send("T", b"after a rest"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
