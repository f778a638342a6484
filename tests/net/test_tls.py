"""TLS on a RemotingServer over real TCP on 127.0.0.1: each tls.server.mode with TLS and
plain clients (asyncio and blocking), client certificates, and every refusal naming its
cause. Certificates come from ``tests/tls_certs.py``."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import shutil
import ssl
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.net.support import ECHO, RawPeer, make_server
from tests.tls_certs import KEY_PASSWORD, Certs, der, make_certs, renew

from tidemq.codec.command import RemotingCommand
from tidemq.errors import ConfigError, ConnectionLost, ResponseCode, TlsError
from tidemq.net import BlockingClient, RemotingClient, RemotingServer, tls_listener
from tidemq.net.rate_limited_log import RateLimitedLog
from tidemq.net.tls import (
    ClientAuth,
    ServerTlsContext,
    TlsClientSettings,
    TlsMode,
    TlsServerSettings,
)
from tidemq.net.tls_listener import PLAIN_REFUSED_REMARK, Admission, admit

pytestmark = pytest.mark.timeout(60)


def server_tls(certs: Certs, mode: str = "permissive", *, cert: Path | None = None,
               key: Path | None = None, client_auth: str = "none") -> TlsServerSettings:
    return TlsServerSettings.parse(
        mode=mode, cert_path=str(cert or certs.server_cert),
        key_path=str(key or certs.server_key), need_client_auth=client_auth,
        trust_cert_path=str(certs.ca))


def client_tls(certs: Certs, *, client_cert: bool = False, ca: Path | None = None,
               stranger: bool = False) -> TlsClientSettings:
    cert = key = ""
    if client_cert:
        cert = str(certs.stranger_client_cert if stranger else certs.client_cert)
        key = str(certs.stranger_client_key if stranger else certs.client_key)
    return TlsClientSettings(enable=True, trust_cert_path=str(ca or certs.ca),
                             cert_path=cert, key_path=key)


async def started(settings: TlsServerSettings) -> RemotingServer:
    server = make_server(tls=settings)  # type: ignore[arg-type]
    await server.start()
    return server


async def echo(client: RemotingClient, server: RemotingServer, text: str = "hi") -> bytes:
    response = await client.request(server.address, RemotingCommand.request(
        ECHO, {"k": "v"}, text.encode()))
    assert response.code == ResponseCode.SUCCESS
    return bytes(response.body)


@pytest.fixture(autouse=True)
def fresh_peer_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with the refusal log's whole burst: earlier tests in the process
    may have spent it (the limiter is per process, by design)."""
    monkeypatch.setattr(tls_listener, "peer_log", RateLimitedLog(tls_listener.log))


@pytest.fixture
async def servers() -> AsyncIterator[list[RemotingServer]]:
    running: list[RemotingServer] = []
    yield running
    for server in running:
        await server.close(drain_timeout=0.2)


@pytest.fixture
async def clients() -> AsyncIterator[list[RemotingClient]]:
    made: list[RemotingClient] = []
    yield made
    for client in made:
        await client.close()


def new_client(clients: list[RemotingClient], tls: TlsClientSettings | None = None
               ) -> RemotingClient:
    client = RemotingClient(request_timeout=5.0, connect_timeout=5.0, tls=tls)
    clients.append(client)
    return client


# ---------------------------------------------------------------- the admission table


@pytest.mark.parametrize(("first", "mode", "expected"), [
    (0x16, TlsMode.PERMISSIVE, Admission.TLS),
    (0x00, TlsMode.PERMISSIVE, Admission.PLAIN),
    (0x16, TlsMode.ENFORCING, Admission.TLS),
    (0x00, TlsMode.ENFORCING, Admission.REFUSE),
    (0x17, TlsMode.ENFORCING, Admission.REFUSE),
    (0x16, TlsMode.DISABLED, Admission.PLAIN),
])
def test_admission_by_first_byte(first: int, mode: TlsMode, expected: Admission) -> None:
    assert admit(first, mode) is expected


# ---------------------------------------------------------------- settings


def test_settings_parse_rocketmq_values(tls_certs: Certs) -> None:
    settings = server_tls(tls_certs, "ENFORCING", client_auth="require")
    assert settings.mode is TlsMode.ENFORCING
    assert settings.need_client_auth is ClientAuth.REQUIRE
    assert settings.active


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"mode": "strict"}, "tls.server.mode"),
    ({"need_client_auth": "always"}, "tls.server.need.client.auth"),
    ({"mode": "enforcing"}, "tls.server.certPath"),
    ({"cert_path": "/x.crt"}, "tls.server.keyPath"),
])
def test_bad_server_settings_name_their_key(kwargs: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        TlsServerSettings.parse(**kwargs)
    assert info.value.key == key


def test_permissive_without_certificate_is_plain() -> None:
    assert not TlsServerSettings.parse().active
    assert not TlsServerSettings.parse(mode="disabled").active


def test_unloadable_files_name_their_key(tls_certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        server_tls(tls_certs, cert=tmp_path / "missing.crt").context()
    assert info.value.key == "tls.server.certPath"
    with pytest.raises(ConfigError) as info:  # a key that is not the certificate's
        server_tls(tls_certs, key=tls_certs.client_key).context()
    assert info.value.key == "tls.server.keyPath"
    with pytest.raises(ConfigError) as info:
        TlsClientSettings(enable=True, trust_cert_path=str(tmp_path / "ca.crt")).context()
    assert info.value.key == "tls.client.trustCertPath"


def test_encrypted_key_needs_its_password(tls_certs: Certs) -> None:
    settings = TlsServerSettings.parse(
        mode="enforcing", cert_path=str(tls_certs.server_cert),
        key_path=str(tls_certs.encrypted_server_key), key_password=KEY_PASSWORD)
    assert isinstance(settings.context(), ssl.SSLContext)
    wrong = TlsServerSettings.parse(
        mode="enforcing", cert_path=str(tls_certs.server_cert),
        key_path=str(tls_certs.encrypted_server_key), key_password="wrong")
    with pytest.raises(ConfigError) as info:
        wrong.context()
    assert info.value.key == "tls.server.keyPath"
    assert "keyPassword" in str(info.value)
    assert KEY_PASSWORD not in repr(settings)


def test_server_context_follows_renewed_files(tls_certs: Certs, tmp_path: Path) -> None:
    cert, key = tmp_path / "s.crt", tmp_path / "s.key"
    shutil.copy(tls_certs.server_cert, cert)
    shutil.copy(tls_certs.server_key, key)
    now = [0.0]
    holder = ServerTlsContext(server_tls(tls_certs, cert=cert, key=key), clock=lambda: now[0])
    first = holder.current()
    shutil.copy(tls_certs.other_host_cert, cert)
    shutil.copy(tls_certs.other_host_key, key)
    stamp = os.stat(cert).st_mtime + 5
    os.utime(cert, (stamp, stamp))
    assert holder.current() is first  # not looked at again within a second
    now[0] = 2.0
    assert holder.current() is not first
    assert holder.reloads == 1
    key.write_text("not a key")  # a broken renewal keeps the working context
    os.utime(key, (stamp + 5, stamp + 5))
    now[0] = 4.0
    kept = holder.current()
    assert holder.reloads == 1
    now[0] = 6.0
    assert holder.current() is kept


async def presented(port: int, ca: Path, server_name: str | None) -> bytes:
    """The certificate a server presents to a client sending ``server_name`` (SNI) or none."""
    client = ssl.create_default_context(cafile=str(ca))
    client.check_hostname = False  # the renewal below names another host
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                              server_hostname=server_name or "")
    certificate = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    with contextlib.suppress(ssl.SSLError, ConnectionError):
        await writer.wait_closed()
    assert certificate is not None
    return bytes(certificate)


@pytest.mark.parametrize("server_name", [None, "localhost"])
async def test_a_handshake_context_moves_each_handshake_to_the_current_files(
        tls_certs: Certs, tmp_path: Path, server_name: str | None) -> None:
    cert, key = tmp_path / "s.crt", tmp_path / "s.key"
    shutil.copyfile(tls_certs.server_cert, cert)
    shutil.copyfile(tls_certs.server_key, key)
    holder = ServerTlsContext(server_tls(tls_certs, cert=cert, key=key), recheck=0.0)

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0,
                                        ssl=holder.handshake_context())
    async with server:
        port = server.sockets[0].getsockname()[1]
        assert await presented(port, tls_certs.ca, server_name) == der(tls_certs.server_cert)
        renew(cert, key, tls_certs.other_host_cert, tls_certs.other_host_key)
        assert await presented(port, tls_certs.ca, server_name) == der(
            tls_certs.other_host_cert)
    assert holder.reloads == 1


def test_a_file_finished_within_one_timestamp_tick_is_loaded(tls_certs: Certs,
                                                               tmp_path: Path) -> None:
    """File systems stamp modification times with a coarse clock (a kernel tick), so a
    certificate written in two steps can keep the time of its half-written state; the
    change of size must still be seen, or the renewal is never loaded."""
    cert, key = tmp_path / "s.crt", tmp_path / "s.key"
    shutil.copyfile(tls_certs.server_cert, cert)
    shutil.copyfile(tls_certs.server_key, key)
    now = [0.0]
    holder = ServerTlsContext(server_tls(tls_certs, cert=cert, key=key), clock=lambda: now[0])
    first = holder.current()
    renewed = tls_certs.other_host_cert.read_bytes()
    tick = os.stat(cert).st_mtime_ns + 5_000_000_000
    shutil.copyfile(tls_certs.other_host_key, key)
    os.utime(key, ns=(tick, tick))
    cert.write_bytes(renewed[:len(renewed) // 2])  # caught half-written
    os.utime(cert, ns=(tick, tick))
    now[0] = 2.0
    assert holder.current() is first and holder.reloads == 0
    cert.write_bytes(renewed)  # finished within the same tick
    os.utime(cert, ns=(tick, tick))
    now[0] = 4.0
    assert holder.current() is not first and holder.reloads == 1


# ---------------------------------------------------------------- modes over real TCP


async def test_permissive_serves_tls_and_plain_on_one_port(
        tls_certs: Certs, servers: list[RemotingServer], clients: list[RemotingClient]) -> None:
    server = await started(server_tls(tls_certs, "permissive"))
    servers.append(server)
    tls_client = new_client(clients, client_tls(tls_certs))
    plain_client = new_client(clients)
    assert await echo(tls_client, server, "over tls") == b"over tls"
    assert await echo(plain_client, server, "plain") == b"plain"
    tls_conn = (await tls_client.connection(server.address))
    plain_conn = (await plain_client.connection(server.address))
    assert tls_conn._transport is not None and plain_conn._transport is not None
    assert tls_conn._transport.get_extra_info("ssl_object") is not None
    assert plain_conn._transport.get_extra_info("ssl_object") is None


async def test_enforcing_refuses_plain_clients_naming_tls(
        tls_certs: Certs, servers: list[RemotingServer], clients: list[RemotingClient],
        caplog: pytest.LogCaptureFixture) -> None:
    server = await started(server_tls(tls_certs, "enforcing"))
    servers.append(server)
    assert await echo(new_client(clients, client_tls(tls_certs)), server) == b"hi"
    plain = new_client(clients)
    with caplog.at_level(logging.WARNING, logger="tidemq.net.tls_listener"):
        response = await plain.request(server.address, RemotingCommand.request(ECHO, {}, b"x"))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == PLAIN_REFUSED_REMARK
    assert "tls.server.mode=enforcing" in caplog.text
    peer = await RawPeer.connect(server.port)  # and the connection is then closed
    await peer.send(RemotingCommand.request(ECHO, {}, b"y"))
    assert (await peer.read_command()).code == ResponseCode.SYSTEM_ERROR
    await peer.wait_eof()
    await peer.close()


def test_enforcing_refuses_a_blocking_plain_client(tls_certs: Certs) -> None:
    async def run() -> None:
        server = await started(server_tls(tls_certs, "enforcing"))
        try:
            def call(client: BlockingClient) -> RemotingCommand:
                with client:
                    return client.request(server.address, RemotingCommand.request(
                        ECHO, {}, b"blocking"), timeout=5.0)
            refused = await asyncio.to_thread(call, BlockingClient())
            assert refused.code == ResponseCode.SYSTEM_ERROR
            assert refused.remark == PLAIN_REFUSED_REMARK
            answered = await asyncio.to_thread(call, BlockingClient(tls=client_tls(tls_certs)))
            assert answered.code == ResponseCode.SUCCESS and answered.body == b"blocking"
        finally:
            await server.close(drain_timeout=0.2)

    asyncio.run(run())


def test_blocking_client_reuses_a_tls_connection_and_sees_its_close(tls_certs: Certs) -> None:
    async def run() -> None:
        server = await started(server_tls(tls_certs, "enforcing"))
        client = BlockingClient(tls=client_tls(tls_certs))
        try:
            def two() -> list[bytes]:
                out = []
                for text in (b"one", b"two"):
                    out.append(bytes(client.request(server.address, RemotingCommand.request(
                        ECHO, {}, text), timeout=5.0).body))
                return out
            assert await asyncio.to_thread(two) == [b"one", b"two"]
            for conn in server.connections:  # the server drops the idle connection
                await conn.aclose("test")
            assert await asyncio.to_thread(two) == [b"one", b"two"]  # dialed again
        finally:
            client.close()
            await server.close(drain_timeout=0.2)

    asyncio.run(run())


async def test_disabled_mode_never_does_tls(
        tls_certs: Certs, servers: list[RemotingServer], clients: list[RemotingClient]) -> None:
    server = await started(server_tls(tls_certs, "disabled"))
    servers.append(server)
    assert server.tls is None
    assert await echo(new_client(clients), server) == b"hi"
    tls_client = RemotingClient(connect_timeout=1.0, tls=client_tls(tls_certs))
    clients.append(tls_client)
    with pytest.raises(TlsError) as info:
        await echo(tls_client, server)
    assert "TLS" in str(info.value)


# ---------------------------------------------------------------- refusals, client side


@pytest.mark.parametrize(("which", "cause"), [
    ("expired", "has expired"),
    ("self_signed", "not signed by a trusted CA"),
    ("other_host", "does not name this host"),
])
async def test_bad_server_certificates_are_refused_naming_why(
        tls_certs: Certs, servers: list[RemotingServer], clients: list[RemotingClient],
        which: str, cause: str) -> None:
    server = await started(server_tls(
        tls_certs, "enforcing", cert=getattr(tls_certs, f"{which}_cert"),
        key=getattr(tls_certs, f"{which}_key")))
    servers.append(server)
    client = new_client(clients, client_tls(tls_certs))
    with pytest.raises(TlsError) as info:
        await echo(client, server)
    assert cause in info.value.cause
    assert info.value.address == server.address
    assert isinstance(info.value, ConnectionLost)  # failover treats it as a lost broker

    def blocking() -> None:
        with BlockingClient(tls=client_tls(tls_certs)) as sync_client:
            sync_client.request(server.address, RemotingCommand.request(ECHO), timeout=5.0)
    with pytest.raises(TlsError) as info:
        await asyncio.to_thread(blocking)
    assert cause in info.value.cause


async def test_client_certificate_required(
        tls_certs: Certs, servers: list[RemotingServer], clients: list[RemotingClient],
        caplog: pytest.LogCaptureFixture) -> None:
    server = await started(server_tls(tls_certs, "enforcing", client_auth="require"))
    servers.append(server)
    with_cert = new_client(clients, client_tls(tls_certs, client_cert=True))
    assert await echo(with_cert, server) == b"hi"
    assert server.tls is not None
    without = new_client(clients, client_tls(tls_certs))
    with caplog.at_level(logging.WARNING, logger="tidemq.net.tls_listener"), \
            pytest.raises(ConnectionLost) as info:
        await echo(without, server)
    assert "client certificate" in str(info.value)
    stranger = new_client(clients, client_tls(tls_certs, client_cert=True, stranger=True))
    with pytest.raises(ConnectionLost) as info:
        await echo(stranger, server)
    assert "certificate" in str(info.value)
    assert "TLS handshake with 127.0.0.1" in caplog.text
    assert await echo(with_cert, server, "still") == b"still"  # others keep being served


async def test_optional_client_certificate(
        tls_certs: Certs, servers: list[RemotingServer], clients: list[RemotingClient]) -> None:
    server = await started(server_tls(tls_certs, "permissive", client_auth="optional"))
    servers.append(server)
    assert await echo(new_client(clients, client_tls(tls_certs)), server) == b"hi"
    assert await echo(new_client(clients, client_tls(tls_certs, client_cert=True)),
                      server) == b"hi"
    assert await echo(new_client(clients), server) == b"hi"


async def test_silent_and_failed_handshakes_leave_nothing_behind(
        tls_certs: Certs, servers: list[RemotingServer], clients: list[RemotingClient]) -> None:
    server = await started(server_tls(tls_certs, "enforcing", client_auth="require"))
    servers.append(server)
    assert server.tls is not None
    server.tls.handshake_timeout = 0.5
    _, silent = await asyncio.open_connection("127.0.0.1", server.port)
    for _ in range(3):
        with pytest.raises(ConnectionLost):
            await echo(new_client(clients, client_tls(tls_certs)), server)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert await reader.read() == b""  # a silent peer is closed after the timeout
    for stream in (silent, writer):
        stream.close()
        await stream.wait_closed()
    assert await echo(new_client(clients, client_tls(tls_certs, client_cert=True)),
                      server) == b"hi"
    assert len(server.connections) == 1


async def test_closing_while_a_connection_waits_for_its_first_byte_closes_it(
        tls_certs: Certs) -> None:
    server = await started(server_tls(tls_certs, "enforcing"))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert server.tls is not None
    async with asyncio.timeout(10):
        while not server.tls._admitting:  # accepted, waiting for the peer to speak
            await asyncio.sleep(0.01)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await server.close(drain_timeout=0.2)
        gc.collect()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    await writer.wait_closed()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


async def test_a_renewed_certificate_is_served_to_new_connections(
        tls_certs: Certs, tmp_path: Path, servers: list[RemotingServer],
        clients: list[RemotingClient]) -> None:
    cert, key = tmp_path / "live.crt", tmp_path / "live.key"
    shutil.copy(tls_certs.server_cert, cert)
    shutil.copy(tls_certs.server_key, key)
    server = await started(server_tls(tls_certs, "enforcing", cert=cert, key=key))
    servers.append(server)
    first = new_client(clients, client_tls(tls_certs))
    assert await echo(first, server) == b"hi"
    assert server.tls is not None
    server.tls.contexts.recheck = 0.0  # look at the files on every connection
    shutil.copy(tls_certs.other_host_key, key)  # a renewal that names another host
    shutil.copy(tls_certs.other_host_cert, cert)
    stamp = os.stat(cert).st_mtime + 5
    os.utime(cert, (stamp, stamp))
    with pytest.raises(TlsError) as info:
        await echo(new_client(clients, client_tls(tls_certs)), server)
    assert "does not name this host" in info.value.cause
    assert server.tls.contexts.reloads == 1
    assert await echo(first, server, "kept") == b"kept"  # open connections keep theirs


@pytest.fixture(scope="module")
def new_ca(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("new-ca"))


async def test_clients_follow_a_renewed_ca_and_client_certificate(
        tls_certs: Certs, new_ca: Certs, tmp_path: Path, servers: list[RemotingServer],
        clients: list[RemotingClient]) -> None:
    # The cluster moves to a new CA: the server's certificate is reissued by it and the
    # server asks for client certificates of the new CA. A running client whose CA and
    # certificate files are renewed in place dials with them, without a restart.
    new = new_ca
    live = {name: tmp_path / name for name in ("server.crt", "server.key", "trust.pem",
                                               "ca.pem", "client.crt", "client.key")}
    for name, source in (("server.crt", tls_certs.server_cert),
                         ("server.key", tls_certs.server_key), ("trust.pem", tls_certs.ca),
                         ("ca.pem", tls_certs.ca), ("client.crt", tls_certs.client_cert),
                         ("client.key", tls_certs.client_key)):
        shutil.copy(source, live[name])
    server = await started(TlsServerSettings.parse(
        mode="enforcing", cert_path=str(live["server.crt"]), key_path=str(live["server.key"]),
        need_client_auth="require", trust_cert_path=str(live["trust.pem"])))
    servers.append(server)
    assert server.tls is not None
    server.tls.contexts.recheck = 0.0
    settings = TlsClientSettings(enable=True, trust_cert_path=str(live["ca.pem"]),
                                 cert_path=str(live["client.crt"]),
                                 key_path=str(live["client.key"]))
    client = new_client(clients, settings)
    blocking = BlockingClient(connect_timeout=5.0, request_timeout=5.0, tls=settings)
    assert client.tls is not None and blocking.tls is not None
    client.tls.recheck = blocking.tls.recheck = 0.0
    try:
        assert await echo(client, server) == b"hi"

        def renew(pairs: tuple[tuple[str, Path], ...]) -> None:
            for name, source in pairs:
                shutil.copy(source, live[name])
                stamp = os.stat(live[name]).st_mtime + 5
                os.utime(live[name], (stamp, stamp))

        renew((("server.key", new.server_key), ("server.crt", new.server_cert),
               ("trust.pem", new.ca)))
        await client.close()  # connections are dialed again from here
        client = new_client(clients, settings)
        client.tls.recheck = 0.0  # type: ignore[union-attr]
        with pytest.raises(TlsError):  # the old CA does not sign the new certificate
            await echo(client, server)
        renew((("ca.pem", new.ca), ("client.key", new.client_key),
               ("client.crt", new.client_cert)))
        assert await echo(client, server, "renewed") == b"renewed"
        assert client.tls.reloads == 1  # type: ignore[union-attr]
        response = await asyncio.to_thread(blocking.request, server.address,
                                           RemotingCommand.request(ECHO, {}, b"blocking"))
        assert bytes(response.body) == b"blocking" and blocking.tls.reloads == 1
    finally:
        blocking.close()
