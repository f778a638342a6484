"""The decision on a state-changing request (CSRF token, Origin, Sec-Fetch-Site, role)
and who a request's visitor is, on Starlette requests built from ASGI scopes."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from tidemq.console.auth import ANONYMOUS, ConsoleAuth, Visitor, same_origin
from tidemq.console.login import safe_next
from tidemq.console.sessions import SessionStore
from tidemq.console.users import ConsoleUser, Role

ALICE = ConsoleUser("alice", Role.ADMIN, "c-a")
VICTOR = ConsoleUser("victor", Role.VIEWER, "c-v")


def request(method: str = "POST", **headers: str) -> Request:
    raw = [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()]
    if not any(k == b"host" for k, _ in raw):
        raw.append((b"host", b"127.0.0.1:8080"))
    return Request({"type": "http", "method": method, "path": "/topics", "headers": raw,
                    "query_string": b"", "scheme": "http", "server": ("127.0.0.1", 8080)})


class Directory:
    def __init__(self, *users: ConsoleUser) -> None:
        self.users = {u.name: u for u in users}

    def lookup(self, name: str) -> ConsoleUser | None:
        return self.users.get(name)

    def authenticate(self, name: str, password: str) -> ConsoleUser | None:
        return self.users.get(name) if password == "pw" else None


@pytest.fixture
def alice() -> Visitor:
    return Visitor(ALICE, SessionStore().open(ALICE))


def test_a_change_needs_the_sessions_token(alice: Visitor) -> None:
    token = alice.session.csrf_token
    refuse = ConsoleAuth.refuse_change
    assert refuse(request(), alice, {"csrf_token": token}) is None
    assert refuse(request(X_CSRF_Token=token), alice, {}) is None  # scripts: the header
    missing = refuse(request(), alice, {})  # no Origin, no token: no longer enough
    assert missing is not None and missing.kind == "csrf" and "CSRF token" in missing.message
    other = refuse(request(), alice, {"csrf_token": SessionStore().open(ALICE).csrf_token})
    assert other is not None and other.kind == "csrf"


def test_another_site_is_refused_even_with_the_token(alice: Visitor) -> None:
    form = {"csrf_token": alice.session.csrf_token}
    for headers in ({"origin": "http://evil.example"}, {"origin": "null"},
                    {"origin": "http://127.0.0.1:8081"}, {"sec_fetch_site": "cross-site"}):
        refusal = ConsoleAuth.refuse_change(request(**headers), alice, form)
        assert refusal is not None and refusal.kind == "csrf", headers
    assert ConsoleAuth.refuse_change(request(origin="http://127.0.0.1:8080",
                                             sec_fetch_site="same-origin"), alice, form) is None


def test_a_viewer_may_log_out_and_nothing_else() -> None:
    viewer = Visitor(VICTOR, SessionStore().open(VICTOR))
    form = {"csrf_token": viewer.session.csrf_token}
    refusal = ConsoleAuth.refuse_change(request(), viewer, form)
    assert refusal is not None and refusal.kind == "role"
    assert ConsoleAuth.refuse_change(request(), viewer, form, needs_admin=False) is None


def test_same_origin() -> None:
    assert same_origin(request())
    assert same_origin(request(origin="http://127.0.0.1:8080"))
    assert not same_origin(request(origin="http://127.0.0.1"))


def test_visitors_with_users_need_a_live_session_of_a_current_user() -> None:
    directory = Directory(ALICE)
    auth = ConsoleAuth(directory, SessionStore())
    assert auth.logins and auth.visitor(request("GET")) is None
    session = auth.sessions.open(ALICE)
    cookie = {"cookie": f"tidemq_session={session.token}"}
    found = auth.visitor(request("GET", **cookie))
    assert found is not None and found.user == ALICE and not found.new
    directory.users["alice"] = ConsoleUser("alice", Role.ADMIN, "changed-password")
    assert auth.visitor(request("GET", **cookie)) is None
    assert len(auth.sessions) == 0  # ended, not only refused


def test_without_users_everyone_is_an_anonymous_admin_with_a_session() -> None:
    auth = ConsoleAuth(None, SessionStore())
    first = auth.visitor(request("GET"))
    assert first is not None and first.user == ANONYMOUS and first.new
    again = auth.visitor(request("GET", cookie=f"tidemq_session={first.session.token}"))
    assert again is not None and again.session is first.session and not again.new


@pytest.mark.parametrize(("target", "expected"), [
    ("/topics?system=1", "/topics?system=1"), (None, "/cluster"), ("", "/cluster"),
    ("https://evil.example/", "/cluster"), ("//evil.example/", "/cluster"),
    ("/\\evil.example", "/cluster"), ("/\t/evil.example", "/cluster"),
    ("/\n/evil.example", "/cluster"), ("topics", "/cluster"),
])
def test_after_a_login_only_paths_of_the_console(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected
