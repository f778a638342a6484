"""The console's log lines that a visitor can cause at will -- failed logins, refused
requests -- go through rate-limited logs (20 lines a minute each; the rest are counted),
one set per console."""

from __future__ import annotations

import dataclasses
import logging

from tidemq.net.rate_limited_log import RateLimitedLog

__all__ = ["ConsoleLogs"]


def _limited(name: str) -> RateLimitedLog:
    return RateLimitedLog(logging.getLogger(name), burst=20, period=60.0)


@dataclasses.dataclass(frozen=True, slots=True)
class ConsoleLogs:
    login: RateLimitedLog = dataclasses.field(
        default_factory=lambda: _limited("tidemq.console.login"))
    refusal: RateLimitedLog = dataclasses.field(
        default_factory=lambda: _limited("tidemq.console.auth"))
