"""Logging in and out, and the console's ``/metrics``.

The login form carries a one-time token that must equal a short-lived cookie set with
the form (so that another site cannot log a browser in under its own account). Failed
logins are limited per client address (:class:`~tidemq.console.login_limit.LoginLimiter`),
counted (``tidemq_console_login_failures_total``) and logged, at most 20 lines a minute.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from tidemq.console.auth import (
    SESSION_COOKIE,
    clear_session_cookie,
    oversized_form,
    same_origin,
    set_session_cookie,
)
from tidemq.console.model import parse_form
from tidemq.console.sessions import same_token

if TYPE_CHECKING:
    from tidemq.console.site import Console

__all__ = ["login_page", "login_submit", "logout", "metrics_page", "safe_next"]

log = logging.getLogger(__name__)

LOGIN_COOKIE = "tidemq_login"
#: Seconds a login form stays usable.
LOGIN_FORM_AGE = 600


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a path on this console, else the start page."""
    if (not target or not target.startswith("/") or target.startswith("//") or "\\" in target
            or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target)):
        return "/cluster"  # browsers drop tabs and newlines: "/\t/x" would mean "//x"
    return target


def _address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def _form(console: Console, request: Request, *, code: int = 200, error: str | None = None,
          next_path: str = "/cluster") -> Response:
    token = secrets.token_urlsafe(24)
    response = console.page("login", request, code, title="Log in", error=error,
                            login_token=token, next=next_path)
    response.set_cookie(LOGIN_COOKIE, token, max_age=LOGIN_FORM_AGE, path="/login",
                        httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


async def login_page(console: Console, request: Request) -> Response:
    next_path = safe_next(request.query_params.get("next"))
    if not console.auth.logins or console.auth.visitor(request) is not None:
        return RedirectResponse(next_path, status_code=303)
    return _form(console, request, next_path=next_path)


async def login_submit(console: Console, request: Request) -> Response:
    if not console.auth.logins:
        return RedirectResponse("/cluster", status_code=303)
    too_big = oversized_form(request)
    if too_big is not None:
        return too_big
    form = parse_form(await request.body())
    next_path = safe_next(form.get("next"))
    address = _address(request)
    name = form.get("username", "")
    if not same_origin(request) or request.headers.get("sec-fetch-site") == "cross-site":
        return PlainTextResponse("cross-site login refused", status_code=403)
    if not same_token(form.get("login_token"), request.cookies.get(LOGIN_COOKIE, "")):
        console.metrics.login_failures.labels("form").inc()
        return _form(console, request, code=400, next_path=next_path,
                     error="The login form expired: please log in again.")
    wait = console.limiter.blocked_for(address)
    if wait > 0:
        console.metrics.login_failures.labels("throttled").inc()
        console.logs.login.warning("console login from %s refused unchecked: too many "
                                   "failures (%.0f s to wait)", address, wait)
        response = _form(console, request, code=429, next_path=next_path,
                         error=f"Too many failed logins from {address}: try again in "
                               f"{int(wait) + 1} s.")
        response.headers["Retry-After"] = str(int(wait) + 1)
        return response
    user = await console.auth.authenticate(name, form.get("password", ""))
    if user is None:
        console.limiter.failed(address)
        console.metrics.login_failures.labels("password").inc()
        console.logs.login.warning("console login failed for user %r from %s", name[:64],
                                   address)
        return _form(console, request, code=401, next_path=next_path,
                     error="Wrong user name or password.")
    console.limiter.succeeded(address)
    console.metrics.logins.inc()
    session = console.auth.sessions.open(user)
    log.info("console login: %s (%s) from %s", user.name, user.role.value, address)
    response = RedirectResponse(next_path, status_code=303)
    set_session_cookie(response, request, session)
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


async def logout(console: Console, request: Request) -> Response:
    """Reached through the console's guard: the CSRF token has been checked."""
    console.auth.sessions.close(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/login" if console.auth.logins else "/cluster",
                                status_code=303)
    clear_session_cookie(response, request)
    return response


async def metrics_page(console: Console, request: Request) -> Response:
    auth = console.metrics_auth
    if auth is not None and not auth.allows(request.headers.get("authorization")):
        response = PlainTextResponse("credentials needed for /metrics\n", status_code=401)
        for challenge in auth.challenges:
            response.headers.append("WWW-Authenticate", challenge)
        return response
    return Response(console.metrics.render(),
                    media_type="text/plain; version=0.0.4; charset=utf-8")
