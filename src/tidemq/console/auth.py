"""Who is asking, and whether they may change anything: the console's sessions, CSRF
tokens and roles, decided per request before a handler runs.

With a :class:`~tidemq.console.users.UserDirectory` every page needs a session opened by
logging in. Without one (no users configured) every visitor is :data:`ANONYMOUS`, an
admin, and gets a session on their first request all the same, so that the CSRF check
below holds for them too.

A state-changing request (any method but GET, HEAD, OPTIONS) is refused (403) unless
all of these hold: the browser does not call it cross-site (``Sec-Fetch-Site``); an
``Origin`` header, if there is one, names the console itself; it carries the session's
CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``); and, except for
logging out, the user is an admin.
"""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.parse

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from tidemq.console.sessions import Session, SessionStore, same_token
from tidemq.console.users import ConsoleUser, Role, UserDirectory

__all__ = ["ANONYMOUS", "CSRF_FIELD", "SESSION_COOKIE", "ConsoleAuth", "Refusal", "Visitor"]

ANONYMOUS = ConsoleUser("anonymous", Role.ADMIN)
SESSION_COOKIE = "tidemq_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Password checks (scrypt: memory and CPU) running at once.
CONCURRENT_CHECKS = 2
#: Largest request body read (the forms are small).
MAX_FORM_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why a state-changing request is refused: ``kind`` is ``csrf`` (cross-site, or
    without the session's token) or ``role`` (a viewer); ``message`` is for the user."""

    kind: str
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Visitor:
    user: ConsoleUser
    session: Session
    #: The session was opened by this request: the response sets the cookie.
    new: bool = False


class ConsoleAuth:
    def __init__(self, directory: UserDirectory | None, sessions: SessionStore) -> None:
        self.directory = directory
        self.sessions = sessions
        self._checks = asyncio.Semaphore(CONCURRENT_CHECKS)

    @property
    def logins(self) -> bool:
        """Whether visitors log in (users are configured)."""
        return self.directory is not None

    def visitor(self, request: Request) -> Visitor | None:
        """The visitor behind ``request``; None when a login is needed first."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if self.directory is None:
            if session is not None and session.user == ANONYMOUS.name:
                return Visitor(ANONYMOUS, session)
            return Visitor(ANONYMOUS, self.sessions.open(ANONYMOUS), new=True)
        if session is None:
            return None
        user = self.directory.lookup(session.user)
        if user is None or user.credential != session.credential:
            self.sessions.close(session.token)  # removed, or the password changed
            return None
        return Visitor(user, session)

    async def authenticate(self, name: str, password: str) -> ConsoleUser | None:
        directory = self.directory
        if directory is None:
            return None
        async with self._checks:
            return await asyncio.to_thread(directory.authenticate, name, password)

    @staticmethod
    def refuse_change(request: Request, visitor: Visitor, form: dict[str, str], *,
                      needs_admin: bool = True) -> Refusal | None:
        """Why the state-changing ``request`` is refused, or None when it may proceed."""
        if request.headers.get("sec-fetch-site") == "cross-site":
            return Refusal("csrf", "cross-site request refused")
        if not same_origin(request):
            return Refusal("csrf", "cross-site form submission refused (Origin is another "
                                   "site)")
        token = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
        if not same_token(token, visitor.session.csrf_token):
            return Refusal("csrf", "the form's CSRF token is missing or out of date: reload "
                                   "the page and submit it again")
        if needs_admin and not visitor.user.may_change:
            return Refusal("role", f"{visitor.user.name} is a viewer: viewers cannot change "
                                   "anything")
        return None


def oversized_form(request: Request) -> Response | None:
    """The answer to a request whose body is not known to be small (no
    ``Content-Length``, or one above :data:`MAX_FORM_BYTES`); None when it may be read."""
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) <= MAX_FORM_BYTES:
        return None
    return PlainTextResponse(f"a form needs a Content-Length of at most {MAX_FORM_BYTES}",
                             status_code=413 if size and size.isdigit() else 411)


def same_origin(request: Request) -> bool:
    """No ``Origin`` header, or one naming the host the request was sent to."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    if origin == "null":
        return False
    return urllib.parse.urlsplit(origin).netloc.lower() == request.headers.get(
        "host", "").lower()


def set_session_cookie(response: Response, request: Request, session: Session) -> None:
    response.set_cookie(SESSION_COOKIE, session.token, path="/", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
