"""What a master tells of its replicas: the bytes each lacks and the age of the oldest
record it lacks, and each replica's end of the HA connection, which names it there."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.broker.replication.test_group import SMALL, caught_up
from tests.broker.wire import Peer, create_topic, dispatched, send

from tidemq.broker.replication.master import ReplicaLink
from tidemq.testing import Cluster


async def test_a_master_reports_each_replicas_lag_in_bytes_and_time(tmp_path: Path) -> None:
    async with Cluster(tmp_path, store=SMALL) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(create_topic("T", 1))
            for i in range(3):
                await peer.ok(send("T", b"m%d" % i))
        await caught_up(master, replica)
        await dispatched(master)
        info = master.ctx.replication.runtime_info()
        local = replica.ctx.replication.runtime_info()["haLocalAddress"]
        (status,) = json.loads(info["haReplicaStatus"])
        assert status == {"address": local, "ackedOffset": master.store.commitlog.max_offset,
                          "lagBytes": 0, "lagMs": 0, "inSync": True,
                          "authenticated": False, "accessKey": ""}

        # a replica that lacks the records from the second one on
        server = master.ctx.replication.server
        assert server is not None
        second = master.store.get("T", 0, 1, 1, 1 << 20)
        phys = int.from_bytes(bytes(second.buffers[0][28:36]), "big")
        stored = int.from_bytes(bytes(second.buffers[0][56:64]), "big")
        server.links.append(ReplicaLink("behind:1", acked=phys))
        now = int(time.time() * 1000)
        rows = {r["address"]: r for r in server.replica_status(now)}
        assert rows["behind:1"] == {"address": "behind:1", "ackedOffset": phys,
                                    "lagBytes": master.store.commitlog.max_offset - phys,
                                    "lagMs": now - stored, "inSync": True,
                                    "authenticated": False, "accessKey": ""}
        server.links.pop()

        # a replica's report may fall inside a record (frames are cut at any byte): the
        # age is still that of the record holding the offset
        for inside in (phys + 4, phys + 30, phys + 60):
            server.links.append(ReplicaLink("inside:1", acked=inside))
            (row,) = [r for r in server.replica_status(now) if r["address"] == "inside:1"]
            assert row["lagMs"] == now - stored, inside
            server.links.pop()
