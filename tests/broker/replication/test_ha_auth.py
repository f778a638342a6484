"""The HA port of a master that checks ACLs serves only replicas that prove who they are
(docs/security.md): a replica with the broker's credentials authenticates, replicates and
counts for SYNC_MASTER sends; a peer that reports an offset without a frame, or with a
wrong secret, an unknown user, a user who is no admin, a stale timestamp or a frame used
before, is closed without a byte of the log, counted by reason, and never counts as a
replica. ``haAllowUnauthenticated`` lets frameless replicas in; a master without ACL
skips a frame; a replica made master takes its old master back as an authenticated
replica. Real brokers over TCP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import pytest
from tests.broker.wire import Peer, create_topic, send
from tests.net.acl.accounts import ADMIN, USER, write_accounts
from tests.net.acl.users import ACL2, ALICE, ROOT

from tidemq.broker.app import BrokerApp
from tidemq.broker.replication import replica as replica_module
from tidemq.broker.replication.master import HaServer
from tidemq.broker.replication.role import BrokerRole
from tidemq.codec.ha import FRAME_HEADER_SIZE, encode_report
from tidemq.codec.ha_auth import encode_auth
from tidemq.codec.signature import Credentials, SigningKey
from tidemq.errors import ResponseCode
from tidemq.net import RemotingClient
from tidemq.net.acl.policy import User
from tidemq.testing import Cluster

SYNC: dict[str, Any] = {**ACL2, "broker_role": BrokerRole.SYNC_MASTER, "slave_timeout": 500}


def _server(broker: BrokerApp) -> HaServer:
    server = broker.ctx.replication.server
    assert server is not None
    return server


def _frame(creds: Credentials, *, timestamp_ms: int | None = None,
           group: str = "broker-a") -> bytes:  # the brokers' default brokerName
    return encode_auth(creds.access_key, SigningKey(creds.secret_key),
                       timestamp_ms=int(time.time() * 1000) if timestamp_ms is None
                       else timestamp_ms, nonce=os.urandom(8), broker_name=group,
                       broker_id=9)


async def _served(master: BrokerApp, opening: bytes, *, want: int = 0) -> bytes:
    """What the master's HA port sends a peer that opens with ``opening`` and reports an
    empty log: everything until it closes, or the first ``want`` bytes."""
    host, _, port = master.ctx.replication.ha_address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(opening + encode_report(0))
    try:
        async with asyncio.timeout(20):
            return await (reader.readexactly(want) if want else reader.read())
    except ConnectionResetError:  # closed with our bytes unread
        return b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _with_messages(master: BrokerApp, creds: Credentials) -> None:
    async with Peer(master.broker_addr, RemotingClient(credentials=creds)) as peer:
        await peer.ok(create_topic("T", 1))
        resp = await peer(send("T", b"secret message"))
        assert resp.code in (ResponseCode.SUCCESS, ResponseCode.SLAVE_NOT_AVAILABLE)


async def test_an_authenticated_replica_copies_and_counts(tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker=SYNC) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master)
        client = replica.ctx.replication.client
        assert client is not None and client.identity is not None
        await asyncio.wait_for(client.connected.wait(), 10)
        async with Peer(master.broker_addr, RemotingClient(credentials=ROOT)) as peer:
            await peer.ok(create_topic("T", 1))
            for i in range(5):
                resp = await peer(send("T", b"m%d" % i))
                assert resp.code == ResponseCode.SUCCESS, resp.remark  # the replica holds it
        assert replica.store.commitlog.max_offset == master.store.commitlog.max_offset
        (link,) = _server(master).links
        assert (link.authenticated, link.access_key) == (True, ROOT.access_key)
        (row,) = _server(master).replica_status(0)
        assert (row["authenticated"], row["accessKey"]) == (True, "root")
        # what controller mode's sync-state set goes by: who copies, by broker id
        service = master.ctx.replication
        assert service.copies_here(1) and not service.copies_here(2)
        assert not master.ctx.replication.auth.refused


async def test_a_stranger_gets_nothing_and_counts_for_nothing(tmp_path: Path) -> None:
    """The defect: the HA port streamed the whole log to whoever reported an offset."""
    async with Cluster(tmp_path, broker=SYNC) as group:
        master = group.brokers[0]
        await _with_messages(master, ROOT)
        assert await _served(master, b"") == b""
        assert not _server(master).links
        assert master.ctx.replication.auth.refused == {"unauthenticated": 1}
        async with Peer(master.broker_addr, RemotingClient(credentials=ROOT)) as peer:
            resp = await peer(send("T", b"after the stranger"))
            assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE, resp.remark
        metrics = master.metrics.render().decode()
        assert 'tidemq_broker_ha_refused_total{reason="unauthenticated"} 1.0' in metrics


async def test_bad_frames_are_refused(tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker=SYNC) as group:
        master = group.brokers[0]
        await _with_messages(master, ROOT)
        master.auth_store.create_user(User(ALICE.access_key, ALICE.secret_key))  # Normal
        stale = int(time.time() * 1000) - 3_600_000
        replayed = _frame(ROOT)
        assert await _served(master, replayed, want=FRAME_HEADER_SIZE)  # once: served
        cases = [(_frame(Credentials("root", "wrong")), "signature"),
                 (_frame(Credentials("nobody", "x")), "account"),
                 (_frame(ROOT, timestamp_ms=stale), "timestamp"),
                 (_frame(ALICE), "admin"), (replayed, "replay"),
                 (_frame(ROOT, group="broker-b"), "group"),
                 (b"\xfe\x54\x48\x41\x00\x01", "malformed")]
        for opening, _reason in cases:
            assert await _served(master, opening) == b""
        assert master.ctx.replication.auth.refused == {reason: 1 for _, reason in cases}
        assert not _server(master).links


async def test_a_refused_replica_says_why_it_gets_nothing(tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker=SYNC) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, ha_auth_frame_enable=False)
        client = replica.ctx.replication.client
        assert client is not None
        async with asyncio.timeout(20):  # no event marks a failed attempt: look again
            while "before sending anything" not in client.last_error:
                await asyncio.sleep(0.05)
        assert "ACL" in client.last_error and not _server(master).links
        assert master.ctx.replication.auth.refused["unauthenticated"] >= 1


async def test_a_refused_replica_does_not_flood_the_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_module, "RECONNECT_DELAY", 0.01)  # many attempts, fast
    async with Cluster(tmp_path, broker=SYNC) as group:
        master = group.brokers[0]
        await group.add_replica(master, ha_auth_frame_enable=False)
        refused = master.ctx.replication.auth.refused
        async with asyncio.timeout(30):  # no event marks a failed attempt: look again
            while refused["unauthenticated"] < 60:
                await asyncio.sleep(0.05)
    stops = [r for r in caplog.records if "replication from" in r.getMessage()]
    assert 0 < len(stops) <= 21  # a burst of 20, and the count of those left out


async def test_allow_unauthenticated_lets_a_frameless_replica_in(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with Cluster(tmp_path, broker={**SYNC, "ha_allow_unauthenticated": True}) as group:
        master = group.brokers[0]
        assert "haAllowUnauthenticated=true" in caplog.text
        await _with_messages(master, ROOT)
        head = await _served(master, b"", want=FRAME_HEADER_SIZE)
        assert head[:8] == bytes(8)  # the log from offset 0
        assert await _served(master, _frame(Credentials("root", "wrong"))) == b""
        # a replica told not to sign (as for a RocketMQ master) is let in unauthenticated
        replica = await group.add_replica(master, ha_auth_frame_enable=False)
        assert replica.ctx.replication.identity is None
        async with Peer(master.broker_addr, RemotingClient(credentials=ROOT)) as peer:
            resp = await peer(send("T", b"copied"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert [link.authenticated for link in _server(master).links] == [False]
        assert master.ctx.replication.copies_here(1)  # it cannot tell: as without ACL


async def test_acl1_admits_an_admin_account_only(tmp_path: Path) -> None:
    acl = {"acl_enable": True, "acl_file": str(write_accounts(tmp_path)),
           "access_key": ADMIN.access_key, "secret_key": ADMIN.secret_key,
           "broker_role": BrokerRole.SYNC_MASTER}
    async with Cluster(tmp_path, broker=acl) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master)
        async with Peer(master.broker_addr, RemotingClient(credentials=ADMIN)) as peer:
            await peer.ok(create_topic("T", 1))
            resp = await peer(send("T", b"m"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert replica.store.commitlog.max_offset == master.store.commitlog.max_offset
        assert [link.access_key for link in _server(master).links] == ["admin"]
        assert await _served(master, _frame(USER)) == b""
        assert master.ctx.replication.auth.refused == {"admin": 1}


async def test_a_master_without_acl_skips_the_frame(tmp_path: Path) -> None:
    broker = {"broker_role": BrokerRole.SYNC_MASTER, "access_key": "ak", "secret_key": "sk"}
    async with Cluster(tmp_path, broker=broker) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master)
        assert replica.ctx.replication.identity is not None
        async with Peer(master.broker_addr) as peer:
            await peer.ok(create_topic("T", 1))
            resp = await peer(send("T", b"m"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        (link,) = _server(master).links
        assert (link.authenticated, link.access_key) == (False, "")
        # a plain replica (RocketMQ's) is served as ever
        assert await _served(master, b"", want=FRAME_HEADER_SIZE)


async def test_a_new_master_takes_its_old_master_back_authenticated(tmp_path: Path) -> None:
    """What a controller's election does: the replica is made master, the old master its
    replica; the old master connects with its frame and is admitted."""
    async with Cluster(tmp_path, broker=SYNC) as group:
        old = group.brokers[0]
        new = await group.add_replica(old)
        client = new.ctx.replication.client
        assert client is not None
        await asyncio.wait_for(client.connected.wait(), 10)
        await new.role.become_master(1)
        await old.role.become_replica(new.ctx.replication.ha_address, 2, 1)
        server = _server(new)
        reported = asyncio.Event()
        server.on_report.append(reported.set)
        async with asyncio.timeout(20):
            while not server.links:
                reported.clear()
                await reported.wait()
        (link,) = server.links
        assert (link.authenticated, link.access_key) == (True, ROOT.access_key)
        assert not new.ctx.replication.auth.refused
