"""The console's own metrics, served at its ``/metrics``: failed logins by reason and
open sessions."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

__all__ = ["LOGIN_FAILURE_REASONS", "ConsoleMetrics"]

#: ``password``: wrong name or password; ``throttled``: refused unchecked, the address
#: failed too often; ``form``: the login form's token was missing or wrong.
LOGIN_FAILURE_REASONS = ("password", "throttled", "form")


class ConsoleMetrics:
    def __init__(self, sessions: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.login_failures = Counter(
            "tidemq_console_login_failures", "Console logins refused, by reason.",
            ["reason"], registry=self.registry)
        for reason in LOGIN_FAILURE_REASONS:
            self.login_failures.labels(reason)
        self.logins = Counter("tidemq_console_logins", "Console logins that succeeded.",
                              registry=self.registry)
        self.refused = Counter(
            "tidemq_console_refused_requests",
            "Requests refused before any handler ran, by reason.", ["reason"],
            registry=self.registry)
        gauge = Gauge("tidemq_console_sessions", "Console sessions open.",
                      registry=self.registry)
        gauge.set_function(lambda: float(sessions()))

    def render(self) -> bytes:
        return generate_latest(self.registry)
