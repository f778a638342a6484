"""Sessions (expiry, bounds), CSRF token comparison and the login limiter, on a
clock the tests move."""

from __future__ import annotations

from tidemq.console.login_limit import LoginLimiter
from tidemq.console.sessions import SessionStore, same_token
from tidemq.console.users import ConsoleUser, Role

ALICE = ConsoleUser("alice", Role.ADMIN, "c1")
BOB = ConsoleUser("bob", Role.VIEWER, "c2")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_lives_while_used_and_ends_when_idle_or_old() -> None:
    clock = Clock()
    store = SessionStore(idle_timeout=60, max_age=300, clock=clock)
    s = store.open(ALICE)
    assert len(s.token) >= 40 and s.csrf_token != s.token
    for _ in range(4):
        clock.now += 59
        assert store.get(s.token) is s  # each use restarts the idle time
    clock.now += 60
    assert store.get(s.token) is None and len(store) == 0
    old = store.open(ALICE)
    for _ in range(5):
        clock.now += 59
        assert store.get(old.token) is old
    clock.now += 59  # 354 s after login: past max_age however busy
    assert store.get(old.token) is None


def test_logout_and_unknown_tokens() -> None:
    store = SessionStore()
    s = store.open(ALICE)
    assert store.get("") is None and store.get(None) is None and store.get("nope") is None
    store.close(s.token)
    assert store.get(s.token) is None
    a, _b, c = store.open(ALICE), store.open(BOB), store.open(ALICE)
    assert store.close_user("alice") == 2 and store.get(a.token) is None
    assert store.get(c.token) is None and len(store) == 1


def test_sessions_are_bounded_least_recently_used_out_first() -> None:
    clock = Clock()
    store = SessionStore(max_sessions=3, clock=clock)
    first, second, third = (store.open(ALICE) for _ in range(3))
    assert store.get(first.token) is first  # used: second is now the oldest
    store.open(BOB)
    assert len(store) == 3 and store.get(second.token) is None
    assert store.get(first.token) is first and store.get(third.token) is third


def test_expired_sessions_are_dropped_when_new_ones_open() -> None:
    clock = Clock()
    store = SessionStore(idle_timeout=10, clock=clock)
    for _ in range(5):
        store.open(ALICE)
    clock.now += 11
    store.open(BOB)
    assert len(store) == 1


def test_same_token() -> None:
    assert same_token("abc", "abc")
    assert not same_token("abd", "abc") and not same_token("", "abc")
    assert not same_token(None, "abc") and not same_token("abc\u00e9", "abc")


def test_the_limiter_blocks_an_address_after_its_failures_for_the_window() -> None:
    clock = Clock()
    limit = LoginLimiter(attempts=3, window=60, clock=clock)
    for _ in range(3):
        assert limit.blocked_for("10.0.0.1") == 0
        limit.failed("10.0.0.1")
    assert limit.blocked_for("10.0.0.1") == 60
    assert limit.blocked_for("10.0.0.2") == 0  # per address
    clock.now += 45
    assert limit.blocked_for("10.0.0.1") == 15
    clock.now += 15
    assert limit.blocked_for("10.0.0.1") == 0
    limit.failed("10.0.0.2")
    limit.succeeded("10.0.0.2")
    assert limit.blocked_for("10.0.0.2") == 0


def test_the_limiter_tracks_a_bounded_number_of_addresses() -> None:
    limit = LoginLimiter(attempts=1, max_addresses=100, clock=Clock())
    for i in range(1000):
        limit.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(limit._failures) == 100
    assert limit.blocked_for("10.0.3.231") > 0 and limit.blocked_for("10.0.0.0") == 0
