"""Console sessions, kept in memory on the server: a random token (the cookie's value)
names a session, which holds its user's name, the password it was opened with and its
CSRF token.

A session ends at logout, after ``idle_timeout`` seconds without a request, after
``max_age`` seconds whatever happens, and when its user is removed or their password
changes (checked on every request). At most ``max_sessions`` are kept: a new one
pushes out the one used longest ago. A restart of the console ends every session.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from tidemq.console.users import ConsoleUser

__all__ = ["Session", "SessionStore", "same_token"]

TOKEN_BYTES = 32


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time equality of a token from a request and the one expected."""
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("ascii"))


@dataclasses.dataclass(slots=True)
class Session:
    token: str
    user: str
    credential: str
    csrf_token: str
    created: float
    last_seen: float


class SessionStore:
    def __init__(self, *, idle_timeout: float = 3600.0, max_age: float = 12 * 3600.0,
                 max_sessions: int = 10_000, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        if idle_timeout <= 0 or max_age <= 0 or max_sessions < 1:
            raise ValueError("session timeouts must be positive and max_sessions >= 1")
        self.idle_timeout = idle_timeout
        self.max_age = max_age
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, user: ConsoleUser) -> Session:
        now = self._clock()
        while self._sessions and (len(self._sessions) >= self.max_sessions
                                  or self._expired(next(iter(self._sessions.values())), now)):
            self._sessions.popitem(last=False)
        session = Session(secrets.token_urlsafe(TOKEN_BYTES), user.name, user.credential,
                          secrets.token_urlsafe(TOKEN_BYTES), now, now)
        self._sessions[session.token] = session
        return session

    def get(self, token: str | None) -> Session | None:
        """The live session ``token`` names (its idle time restarts), else None."""
        if not token:
            return None
        session = self._sessions.get(token)
        if session is None:
            return None
        now = self._clock()
        if self._expired(session, now):
            del self._sessions[token]
            return None
        session.last_seen = now
        self._sessions.move_to_end(token)
        return session

    def _expired(self, session: Session, now: float) -> bool:
        return (now - session.last_seen >= self.idle_timeout
                or now - session.created >= self.max_age)

    def close(self, token: str | None) -> None:
        if token:
            self._sessions.pop(token, None)

    def close_user(self, name: str) -> int:
        """End every session of ``name``; how many there were."""
        doomed = [t for t, s in self._sessions.items() if s.user == name]
        for token in doomed:
            del self._sessions[token]
        return len(doomed)
