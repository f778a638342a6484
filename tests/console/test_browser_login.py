"""The console's login, roles and cross-site defences in a real headless Chromium
against ``tidemq standalone`` subprocesses: one with a users file, one with none
(anonymous, on loopback).

Other sites are simulated with Chromium's resolver rules: ``attacker.example`` and
``rebind.example`` resolve to 127.0.0.1, as a DNS-rebinding attacker's name would. The
attacker's page is served by a small HTTP server on another port.
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.console.browser import Browser, chromium_path
from tests.console.test_browser import Standalone

from tidemq.console.users import Role, edit_users_file

pytestmark = pytest.mark.skipif(
    chromium_path() is None,
    reason="chromium is not installed (apt-get install chromium; `make test` does it)")

CHEAP = (10, 1, 1)
TOKEN = "scrape-token-1"
RESOLVE = ["--host-resolver-rules=MAP attacker.example 127.0.0.1, MAP rebind.example 127.0.0.1",
           "--no-proxy-server"]


@pytest.fixture(scope="module")
def with_users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    root = tmp_path_factory.mktemp("with-users")
    users = root / "console-users.yml"
    edit_users_file(users, "alice", role=Role.ADMIN, password="alice-pw", cost=CHEAP)
    edit_users_file(users, "victor", role=Role.VIEWER, password="victor-pw", cost=CHEAP)
    server = Standalone(root / "data", "--console-users", str(users),
                        "--set", f"metricsAuthToken={TOKEN}")
    yield server
    server.stop()
    assert server.returncode == 0, server.log(40)


@pytest.fixture(scope="module")
def anonymous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    server = Standalone(tmp_path_factory.mktemp("anonymous") / "data")
    yield server
    server.stop()
    assert server.returncode == 0, server.log(40)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with Browser(tmp_path_factory.mktemp("chromium") / "profile", flags=RESOLVE) as b:
        yield b


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def attacker(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A directory served at http://attacker.example:<port>/ (on 127.0.0.1)."""
    site = tmp_path / "attacker"
    site.mkdir()
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(10)


def forged_form(console: str, topic: str) -> str:
    return (f'<!doctype html><title>win a prize</title><form id="f" method="post" '
            f'action="{console}/topics"><input name="topic" value="{topic}">'
            '<input name="read_queues" value="1"><input name="write_queues" value="1">'
            '<button id="go" type="submit">Claim</button></form>')


def shot(b: Browser, name: str) -> None:
    """Save the page for docs/console.md when TIDEMQ_CONSOLE_SCREENSHOTS names a directory."""
    where = os.environ.get("TIDEMQ_CONSOLE_SCREENSHOTS")
    if where:
        b.screenshot(Path(where) / f"{name}.png")


def body(b: Browser) -> str:
    return str(b.eval("document.body ? document.body.innerText : ''"))


def login(b: Browser, base: str, user: str, password: str) -> None:
    b.goto(base + "/login")
    b.submit("#login-form", {"username": user, "password": password})


def topic_listed(b: Browser, base: str, topic: str) -> bool:
    b.goto(base + "/topics")
    assert b.exists("#create-topic"), body(b)
    return b.exists(f'tr[data-topic="{topic}"]')


def test_login_logout_and_a_forged_post(with_users: Standalone, browser: Browser,
                                        attacker: tuple[Path, int]) -> None:
    b, base = browser, with_users.console
    b.goto(base + "/topics")
    assert b.eval("location.pathname") == "/login" and b.exists("#login-form")
    assert not b.exists("nav")
    b.submit("#login-form", {"username": "alice", "password": "wrong"})
    assert "Wrong user name or password" in b.text("#error")
    shot(b, "login")
    b.submit("#login-form", {"username": "alice", "password": "alice-pw"})
    assert b.eval("location.pathname") == "/topics"  # back where the login started
    assert b.text("#user") == "alice" and b.text("#role") == "admin"
    assert b.eval("document.cookie") == ""  # the session cookie is HttpOnly

    b.submit("#create-topic", {"topic": "ByAlice", "read_queues": "2", "write_queues": "2"})
    assert "Topic ByAlice saved" in b.text("#flash")

    # Another site's page posts the same form to the console: refused, nothing created.
    site, port = attacker
    (site / "prize.html").write_text(forged_form(base, "Forged"))
    b.goto(f"http://attacker.example:{port}/prize.html")
    b.click("#go")
    assert "log in first" in body(b) or "refused" in body(b), body(b)
    assert not topic_listed(b, base, "Forged") and topic_listed(b, base, "ByAlice")

    b.click("#logout button")
    assert b.eval("location.pathname") == "/login"
    b.goto(base + "/cluster")
    assert b.eval("location.pathname") == "/login"


def test_a_viewer_sees_the_forms_disabled_and_cannot_force_them(
        with_users: Standalone, browser: Browser) -> None:
    b, base = browser, with_users.console
    login(b, base, "victor", "victor-pw")
    assert b.text("#role") == "viewer" and b.exists("#readonly")
    b.goto(base + "/topics")
    shot(b, "viewer")
    assert b.eval("document.querySelector('#create-topic button').matches(':disabled')")
    assert b.eval("document.querySelector('#create-topic input[name=topic]').matches(':disabled')")
    b.goto(base + "/logical-queues")
    assert b.eval("[...document.querySelectorAll('form[method=post] fieldset')]"
                  ".every(f => f.disabled)")
    # Whatever the page shows, the server decides: enable the form and submit it.
    b.goto(base + "/topics")
    b.eval("document.querySelector('#create-topic fieldset').disabled = false")
    b.submit("#create-topic", {"topic": "ByVictor", "read_queues": "1", "write_queues": "1"})
    assert "viewers cannot change anything" in b.text("#error")
    b.goto(base + "/topics")
    assert not b.exists('tr[data-topic="ByVictor"]')
    b.click("#logout button")  # a viewer may still log out
    assert b.eval("location.pathname") == "/login"


def test_a_cross_site_post_is_refused_without_users(anonymous: Standalone, browser: Browser,
                                                    attacker: tuple[Path, int]) -> None:
    b, base = browser, anonymous.console
    b.goto(base + "/topics")
    assert not b.exists("#login-form") and not b.exists("#logout")  # no login here
    site, port = attacker
    (site / "prize.html").write_text(forged_form(base, "ForgedAnon"))
    b.goto(f"http://attacker.example:{port}/prize.html")
    b.click("#go")
    assert "refused" in body(b), body(b)
    assert not topic_listed(b, base, "ForgedAnon")


def test_a_rebinding_host_is_refused(anonymous: Standalone, browser: Browser) -> None:
    b = browser
    port = anonymous.console_port
    b.goto(f"http://rebind.example:{port}/topics")
    assert "does not answer to the name 'rebind.example'" in body(b), body(b)
    assert not b.exists("#create-topic")
    # A script on the rebound name (the attacker's origin, now pointing at the console)
    # posts the form: refused before any handler, nothing created.
    status = b.eval("""fetch("/topics", {method: "POST", headers: {"Content-Type":
        "application/x-www-form-urlencoded"}, body: "topic=Rebound&read_queues=1"})
        .then(r => r.status)""")
    assert status == 421
    assert not topic_listed(b, anonymous.console, "Rebound")


def scrape(url: str, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers.get("WWW-Authenticate", "")


def test_standalone_metrics_and_the_console_metrics_need_the_token(
        with_users: Standalone) -> None:
    for url, family in ((f"http://127.0.0.1:{with_users.metrics_port}/metrics",
                         "tidemq_broker_put_messages"),
                        (with_users.console + "/metrics", "tidemq_console_sessions")):
        assert scrape(url, None) == (401, 'Bearer realm="tidemq metrics"'), url
        assert scrape(url, "wrong")[0] == 401
        status, text = scrape(url, TOKEN)
        assert status == 200 and family in text, url
