"""The HA port with TLS: a SYNC_MASTER and its replica, both with
``tls.server.mode=enforcing`` and ``tls.enable``, replicate over TLS; a plain connection to
the master's HA port is closed without a byte of the log; with ACL on, the replica's
authentication frame travels inside TLS."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from tests.broker.wire import Peer, create_topic, send
from tests.net.acl.users import ACL2, ROOT
from tests.tls_certs import Certs

from tidemq.broker.replication.role import BrokerRole
from tidemq.codec.ha import encode_report
from tidemq.errors import ResponseCode
from tidemq.net import RemotingClient
from tidemq.net.tls import TlsClientSettings
from tidemq.testing import Cluster


async def test_replication_over_tls(tmp_path: Path, tls_certs: Certs) -> None:
    tls = {"tls_server_mode": "enforcing", "tls_server_cert_path": str(tls_certs.server_cert),
           "tls_server_key_path": str(tls_certs.server_key), "tls_enable": True,
           "tls_client_trust_cert_path": str(tls_certs.ca)}
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.SYNC_MASTER, **tls},
                       namesrv={k: v for k, v in tls.items() if k.startswith("tls_server")},
                       store={"mapped_file_size_commit_log": 64 * 1024}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master)
        client = replica.ctx.replication.client
        assert client is not None and client.tls is not None
        await asyncio.wait_for(client.connected.wait(), 10)
        client_tls = TlsClientSettings(enable=True, trust_cert_path=str(tls_certs.ca))
        async with Peer(master.broker_addr,
                        RemotingClient(request_timeout=10.0, tls=client_tls)) as peer:
            await peer.ok(create_topic("T", 1))
            for i in range(20):
                resp = await peer(send("T", b"m%d" % i))
                assert resp.code == ResponseCode.SUCCESS, resp.remark  # the replica holds it
        assert replica.store.commitlog.max_offset == master.store.commitlog.max_offset > 0
        host, _, port = master.ctx.replication.ha_address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(encode_report(0))  # a plain replica asking for the whole log
        try:  # closed with our report unread: a reset, or an end of stream
            data = await asyncio.wait_for(reader.read(), 10)
        except ConnectionResetError:
            data = b""
        assert data == b""
        writer.close()
        with contextlib.suppress(ConnectionResetError):
            await writer.wait_closed()


async def test_an_authenticated_replica_over_tls(tmp_path: Path, tls_certs: Certs) -> None:
    """The authentication frame travels inside TLS, and is checked there."""
    tls = {"tls_server_mode": "enforcing", "tls_server_cert_path": str(tls_certs.server_cert),
           "tls_server_key_path": str(tls_certs.server_key), "tls_enable": True,
           "tls_client_trust_cert_path": str(tls_certs.ca)}
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.SYNC_MASTER, **tls, **ACL2},
                       namesrv={k: v for k, v in tls.items() if k.startswith("tls_server")},
                       store={"mapped_file_size_commit_log": 64 * 1024}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master)
        client = replica.ctx.replication.client
        assert client is not None
        await asyncio.wait_for(client.connected.wait(), 10)
        client_tls = TlsClientSettings(enable=True, trust_cert_path=str(tls_certs.ca))
        async with Peer(master.broker_addr,
                        RemotingClient(request_timeout=10.0, tls=client_tls,
                                       credentials=ROOT)) as peer:
            await peer.ok(create_topic("T", 1))
            resp = await peer(send("T", b"m"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        server = master.ctx.replication.server
        assert server is not None
        assert [(link.authenticated, link.access_key) for link in server.links] == [
            (True, ROOT.access_key)]


async def test_a_plain_replica_of_an_enforcing_master_is_told_why(tmp_path: Path,
                                                                  tls_certs: Certs) -> None:
    """The master closes a plain replica at once: the replica's haLastError names TLS,
    where it sent the operator looking for an ACL the master does not have."""
    tls = {"tls_server_mode": "enforcing", "tls_server_cert_path": str(tls_certs.server_cert),
           "tls_server_key_path": str(tls_certs.server_key), "tls_enable": True,
           "tls_client_trust_cert_path": str(tls_certs.ca)}
    async with Cluster(tmp_path, broker={"broker_role": BrokerRole.SYNC_MASTER, **tls},
                       namesrv={k: v for k, v in tls.items() if k.startswith("tls_server")},
                       store={"mapped_file_size_commit_log": 64 * 1024}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master, tls_enable=False, namesrv_addr="")
        client = replica.ctx.replication.client
        assert client is not None and client.tls is None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while "before sending anything" not in client.last_error:
            assert loop.time() < deadline, client.last_error
            await asyncio.sleep(0.05)
        assert "tls.enable" in client.last_error and "enforcing" in client.last_error
        assert replica.store.commitlog.max_offset == 0
