"""What every page of the console shares: :class:`Console` holds the admin client, a
lazily started producer for the send form, the lag history and its sampler, and who may
see and change what (users, sessions, the login limit, metrics); :meth:`Console.page`
renders a page with the headers every page is sent with."""

from __future__ import annotations

import asyncio
from typing import Any

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from tidemq.client import AdminClient, Producer
from tidemq.client.request_deadline import current as current_deadline
from tidemq.console.auth import CSRF_FIELD, ConsoleAuth, Visitor
from tidemq.console.broker_names import BrokerNames
from tidemq.console.config import ConsoleConfig
from tidemq.console.history import History
from tidemq.console.login_limit import LoginLimiter
from tidemq.console.logs import ConsoleLogs
from tidemq.console.metrics import ConsoleMetrics
from tidemq.console.resend_jobs import ResendJobs
from tidemq.console.sampler import Sampler
from tidemq.console.sessions import SessionStore
from tidemq.console.templates import render
from tidemq.console.users import UserDirectory
from tidemq.net.http_auth import MetricsAuth

__all__ = ["CONSOLE_PRODUCER_GROUP", "PAGE_HEADERS", "Console"]

#: Producer group of the send form.
CONSOLE_PRODUCER_GROUP = "TIDEMQ_CONSOLE_PRODUCER"

class Console:
    """What the pages share: the admin client, a lazily started producer, lag history,
    and who may see and change what (users, sessions, the login limit, metrics).
    ``users`` None: nobody logs in, everyone is an admin."""

    def __init__(self, admin: AdminClient, config: ConsoleConfig | None = None,
                 users: UserDirectory | None = None) -> None:
        self.admin = admin
        self.config = config = config or ConsoleConfig()
        self.namesrv = ";".join(admin.config.namesrv_addr)
        self.history = History(seconds=config.history_seconds,
                               interval=config.sample_interval,
                               min_gap_ms=min(1000, int(config.sample_interval * 500)))
        self.sampler = Sampler(admin, self.history, config.sample_interval)
        self.auth = ConsoleAuth(users, SessionStore(idle_timeout=config.session_timeout,
                                                    max_age=config.session_max_age))
        self.limiter = LoginLimiter(attempts=config.login_attempts)
        self.logs = ConsoleLogs()
        self.metrics = ConsoleMetrics(lambda: len(self.auth.sessions))
        self.metrics_auth = MetricsAuth.from_config(
            config.metrics_auth_token, config.metrics_auth_user, config.metrics_auth_password)
        self.broker_names = BrokerNames(admin)
        self.resends = ResendJobs(admin)
        self._producer: Producer | None = None
        self._producer_lock = asyncio.Lock()

    async def producer(self) -> Producer:
        async with self._producer_lock:
            if self._producer is None:
                producer = Producer(CONSOLE_PRODUCER_GROUP, config=self.admin.config)
                await producer.start()
                self._producer = producer
            return self._producer

    async def close(self) -> None:
        await self.sampler.stop()
        await self.resends.close()
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.close()

    def page(self, name: str, request: Request, code: int = 200, **context: Any
             ) -> HTMLResponse:
        context.setdefault("flash", request.query_params.get("msg"))
        context.setdefault("title", name.replace("-", " ").capitalize())
        visitor: Visitor | None = getattr(request.state, "visitor", None)
        if visitor is not None:
            context.update(
                user=visitor.user, readonly=not visitor.user.may_change,
                csrf_token=visitor.session.csrf_token,
                lock="disabled" if not visitor.user.may_change else "",
                csrf_field=Markup('<input type="hidden" name="{}" value="{}">').format(
                    CSRF_FIELD, escape(visitor.session.csrf_token)))
        scope = current_deadline()
        if scope is not None and scope.unanswered:
            context.update(deadline=scope.seconds, unanswered=[
                (self.broker_names.name(addr), addr, why)
                for addr, why in sorted(scope.unanswered.items())])
        html = render(name, namesrv=self.namesrv, active=_section(request.url.path),
                      logins=self.auth.logins, **context)
        return HTMLResponse(html, status_code=code, headers=PAGE_HEADERS)


#: Sent with every page: no framing by other sites, no caching of what a user saw.
PAGE_HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'",
                "Cache-Control": "no-store", "Referrer-Policy": "same-origin",
                "X-Content-Type-Options": "nosniff"}


def _section(path: str) -> str:
    if path.startswith("/brokers"):
        return "/cluster"
    return "/" + path.strip("/").split("/", 1)[0]
