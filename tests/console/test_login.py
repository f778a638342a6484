"""Logging in to the console over HTTP against a real server and cluster: sessions,
roles, CSRF, the login limit and its metrics, and who may start where."""

from __future__ import annotations

import asyncio
import re
import ssl
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.console.conftest import Http
from tests.tls_certs import Certs

from tidemq.console import ConsoleServer
from tidemq.console.config import ConsoleConfig
from tidemq.console.users import Role, edit_users_file
from tidemq.errors import ConfigError
from tidemq.net.tls import ServerTlsContext, TlsMode, TlsServerSettings
from tidemq.testing import Cluster

CHEAP = (10, 1, 1)


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "console-users.yml"
    edit_users_file(path, "alice", role=Role.ADMIN, password="alice-pw", cost=CHEAP)
    edit_users_file(path, "victor", role=Role.VIEWER, password="victor-pw", cost=CHEAP)
    return path


@pytest.fixture
async def web(cluster: Cluster, users_file: Path) -> AsyncIterator[ConsoleServer]:
    config = ConsoleConfig(users_file=str(users_file), login_attempts=3,
                           metrics_auth_token="scrape-me")
    async with ConsoleServer(cluster.namesrv_addr, port=0, config=config) as server:
        yield server


def cookie(http: Http, name: str) -> dict[str, object] | None:
    for c in http.cookies:
        if c.name == name:
            return {"value": c.value, "path": c.path, "secure": c.secure,
                    **{k.lower(): v for k, v in c._rest.items()}}  # type: ignore[attr-defined]
    return None


async def test_nothing_is_served_before_logging_in(http: Http, cluster: Cluster) -> None:
    page = await http.get("/topics?system=1")
    assert page.status == 200 and "/login?next=%2Ftopics%3Fsystem%3D1" in page.url
    assert 'id="login-form"' in page.text and 'id="topics"' not in page.text
    assert cluster.namesrv_addr not in page.text  # nothing about the cluster before a login
    assert (await http.get("/api/groups/g/lag")).status == 401
    posted = await http.post("/topics", {"topic": "Anon", "read_queues": "1"}, csrf=False)
    assert posted.status == 401 and cluster.brokers[0].topics.get("Anon") is None
    assert (await http.get("/healthz")).text == "ok"


async def test_login_use_and_logout(http: Http, cluster: Cluster) -> None:
    wrong = await http.login("alice", "nope")
    assert wrong.status == 401 and "Wrong user name or password" in wrong.text
    assert cookie(http, "tidemq_session") is None
    page = await http.login("alice", "alice-pw")
    assert page.status == 200 and page.url.endswith("/cluster"), page.url
    assert re.search(r'id="user">alice<', page.text) and 'id="readonly"' not in page.text
    session = cookie(http, "tidemq_session")
    assert session is not None and session["httponly"] is None  # the flag is present
    assert session["samesite"] == "strict" and session["path"] == "/"
    assert not session["secure"]  # plain HTTP here

    made = await http.post("/topics", {"topic": "ByAlice", "read_queues": "1",
                                       "write_queues": "1"})
    assert made.status == 200 and cluster.brokers[0].topics.get("ByAlice") is not None
    forged = await http.post("/topics", {"topic": "Forged", "csrf_token": "x" * 43},
                             csrf=False)
    assert forged.status == 403 and "CSRF token" in forged.text
    assert cluster.brokers[0].topics.get("Forged") is None

    old_token = session["value"]
    out = await http.post("/logout", {})
    assert out.status == 200 and "/login" in out.url
    assert cookie(http, "tidemq_session") is None
    # the old session is gone on the server, not only from this browser
    stolen = Http(http.base)
    replayed = await stolen.get("/cluster", Cookie=f"tidemq_session={old_token}")
    assert "/login" in replayed.url


async def test_a_viewer_sees_disabled_forms_and_is_refused_changes(
        http: Http, cluster: Cluster) -> None:
    await http.login("victor", "victor-pw")
    page = await http.get("/topics")
    assert 'id="readonly"' in page.text and 'id="role">viewer<' in page.text
    assert page.text.count('<fieldset class="controls" disabled>') == 1
    lq = await http.get("/logical-queues")
    assert lq.text.count('<fieldset class="controls" disabled>') == 2
    refused = await http.post("/topics", {"topic": "ByVictor", "read_queues": "1",
                                          "write_queues": "1"})
    assert refused.status == 403 and "viewers cannot change anything" in refused.text
    assert cluster.brokers[0].topics.get("ByVictor") is None
    assert (await http.post("/logical-queues", {"action": "create", "topic": "L",
                                                "queues": "2"})).status == 403
    assert (await http.get("/messages")).status == 200  # looking is fine
    assert "/login" in (await http.post("/logout", {})).url


async def test_a_password_change_ends_the_users_sessions(http: Http, users_file: Path) -> None:
    await http.login("alice", "alice-pw")
    assert "/cluster" in (await http.get("/cluster")).url
    edit_users_file(users_file, "alice", password="rotated", cost=CHEAP)
    assert "/login" in (await http.get("/cluster")).url
    assert (await http.login("alice", "rotated")).url.endswith("/cluster")


async def test_failed_logins_are_limited_counted_and_logged(
        http: Http, web: ConsoleServer, caplog: pytest.LogCaptureFixture) -> None:
    for _ in range(3):
        assert (await http.login("alice", "guess")).status == 401
    throttled = await http.login("alice", "alice-pw")  # right, but refused unchecked
    assert throttled.status == 429 and "Too many failed logins" in throttled.text
    assert "console login failed for user 'alice' from 127.0.0.1" in caplog.text
    assert "refused unchecked" in caplog.text

    metrics = Http(web.url)
    assert (await metrics.get("/metrics")).status == 401
    text = (await metrics.get("/metrics", Authorization="Bearer scrape-me")).text
    assert 'tidemq_console_login_failures_total{reason="password"} 3.0' in text
    assert 'tidemq_console_login_failures_total{reason="throttled"} 1.0' in text


async def test_the_login_form_token_must_match_its_cookie(http: Http) -> None:
    await http.get("/login")
    page = await http.post("/login", {"login_token": "forged", "username": "alice",
                                      "password": "alice-pw"}, csrf=False)
    assert page.status == 400 and "expired" in page.text
    assert cookie(http, "tidemq_session") is None


async def test_next_stays_on_the_console(http: Http) -> None:
    await http.get("/login?next=//evil.example/x")
    page = await http.login("alice", "alice-pw")
    assert page.url.endswith("/cluster")


def test_an_anonymous_console_beyond_loopback_needs_saying_so(users_file: Path) -> None:
    with pytest.raises(ConfigError, match="no users") as info:
        ConsoleServer("127.0.0.1:9876", host="0.0.0.0", port=0)
    assert info.value.key == "consoleUsersFile"
    ConsoleServer("127.0.0.1:9876", host="0.0.0.0", port=0,
                  config=ConsoleConfig(allow_anonymous=True))
    ConsoleServer("127.0.0.1:9876", host="0.0.0.0", port=0,
                  config=ConsoleConfig(users_file=str(users_file)))




async def test_big_or_unsized_bodies_are_not_read(http: Http, web: ConsoleServer) -> None:
    big = await http.post("/login", {"login_token": "x", "username": "a" * 70_000,
                                     "password": "p"}, csrf=False)
    assert big.status == 413 and "at most 65536" in big.text
    await http.login("alice", "alice-pw")
    session = next(c.value for c in http.cookies if c.name == "tidemq_session")
    reader, writer = await asyncio.open_connection("127.0.0.1", web.port)
    writer.write(f"POST /topics HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: tidemq_session="
                 f"{session}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                 "5\r\nab=cd\r\n0\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 411 "), answer[:200]


async def test_over_https_the_session_cookie_is_secure(tls_certs: Certs) -> None:
    https = ServerTlsContext(TlsServerSettings(
        mode=TlsMode.ENFORCING, cert_path=str(tls_certs.server_cert),
        key_path=str(tls_certs.server_key)))
    context = ssl.create_default_context(cafile=str(tls_certs.ca))

    def first_cookie(url: str) -> str:
        with urllib.request.urlopen(url, timeout=10, context=context) as answer:
            return str(answer.headers["Set-Cookie"])

    async with ConsoleServer("127.0.0.1:9", port=0, https=https) as web:
        cookie = await asyncio.to_thread(first_cookie, f"{web.url}/messages")
    attributes = [part.strip().lower() for part in cookie.split(";")]
    assert attributes[0].startswith("tidemq_session=")
    assert {"httponly", "secure", "samesite=strict", "path=/"} <= set(attributes)
