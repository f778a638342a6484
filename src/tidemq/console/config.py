"""Console settings, as ``.properties`` keys (``tidemq console -c FILE``, ``--set
key=value``, ``TIDEMQ_<KEY>`` variables; ``tidemq standalone`` passes its ``--set``
keys that name one of these to the console).

The ``metricsAuth*`` keys are the same as the broker's and the name server's: they
guard the console's own ``/metrics``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import load_config

__all__ = ["ConsoleConfig", "load_console_config"]


def _key(name: str) -> dict[str, str]:
    return {"key": name}


@dataclasses.dataclass(frozen=True, slots=True)
class ConsoleConfig:
    #: The users file (YAML, written by ``tidemq console user add``). Empty: no users,
    #: no login; then the console serves loopback only, unless ``consoleAllowAnonymous``.
    users_file: str = dataclasses.field(default="", metadata=_key("consoleUsersFile"))
    #: Seconds without a request after which a session ends.
    session_timeout: int = dataclasses.field(default=3600,
                                             metadata=_key("consoleSessionTimeout"))
    #: Seconds after login after which a session ends, however busy.
    session_max_age: int = dataclasses.field(default=12 * 3600,
                                             metadata=_key("consoleSessionMaxAge"))
    #: More names the console answers to (``Host``), comma-separated.
    allowed_hosts: str = dataclasses.field(default="", metadata=_key("consoleAllowedHosts"))
    #: Users log in with the name and password of an ACL 2.0 user of a broker
    #: (``consoleAclBroker``, else the master of the first broker name); Super users and
    #: users allowed Update on the cluster are admins, the others viewers.
    users_from_acl: bool = dataclasses.field(default=False,
                                             metadata=_key("consoleUsersFromAcl"))
    #: The broker whose ACL 2.0 users log in (``host:port``); empty: the master of the
    #: first broker name, clusters and names in sorted order.
    acl_broker: str = dataclasses.field(default="", metadata=_key("consoleAclBroker"))
    #: Seconds between two reads of the ACL 2.0 users (a removed user, or a changed
    #: password, ends its sessions at the next read).
    acl_refresh: float = dataclasses.field(default=5.0,
                                           metadata=_key("consoleAclRefreshSeconds"))
    #: Serve beyond loopback with no users (anyone who reaches the port can change
    #: the cluster).
    allow_anonymous: bool = dataclasses.field(default=False,
                                              metadata=_key("consoleAllowAnonymous"))
    #: Failed logins allowed per client address per minute.
    login_attempts: int = dataclasses.field(default=5, metadata=_key("consoleLoginAttempts"))
    #: Seconds between two background samples of every group's lag and every topic's
    #: put/get rate (the charts' history); above 0 and at most ``consoleHistorySeconds``.
    sample_interval: float = dataclasses.field(default=5.0,
                                               metadata=_key("consoleSampleInterval"))
    #: Seconds of history the charts keep (memory: 16 bytes a sample per series).
    history_seconds: int = dataclasses.field(default=3600,
                                             metadata=_key("consoleHistorySeconds"))
    #: Seconds a page waits for the brokers it asks, all of its requests together: a
    #: broker that has not answered by then is named on the page, which shows what the
    #: others answered, and is not asked again for that page.
    page_deadline: float = dataclasses.field(default=3.0, metadata=_key("consolePageDeadline"))
    #: ``/metrics`` needs ``Authorization: Bearer <token>`` (or the user below).
    metrics_auth_token: str = ""
    #: ``/metrics`` needs HTTP basic auth with this user and password.
    metrics_auth_user: str = ""
    #: The password of ``metricsAuthUser``.
    metrics_auth_password: str = ""

    def __post_init__(self) -> None:
        for key, value in (("consoleSessionTimeout", self.session_timeout),
                           ("consoleSessionMaxAge", self.session_max_age),
                           ("consoleLoginAttempts", self.login_attempts)):
            if value < 1:
                raise ConfigError(f"{key} must be at least 1", key=key)
        if not 0 < self.sample_interval <= self.history_seconds:
            raise ConfigError("consoleSampleInterval must be above 0 and at most "
                              "consoleHistorySeconds", key="consoleSampleInterval")
        if self.users_from_acl and self.users_file:
            raise ConfigError("consoleUsersFromAcl and consoleUsersFile are alternatives: "
                              "set one", key="consoleUsersFromAcl")
        if self.page_deadline <= 0:
            raise ConfigError("consolePageDeadline must be above 0", key="consolePageDeadline")
        if self.acl_refresh <= 0:
            raise ConfigError("consoleAclRefreshSeconds must be above 0",
                              key="consoleAclRefreshSeconds")
        if bool(self.metrics_auth_user) != bool(self.metrics_auth_password):
            raise ConfigError("metricsAuthUser and metricsAuthPassword go together",
                              key="metricsAuthPassword")

    @property
    def host_names(self) -> list[str]:
        return [n.strip() for n in self.allowed_hosts.split(",") if n.strip()]


def load_console_config(
    path: str | Path | None = None, *, overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[ConsoleConfig, list[str]]:
    """The config from a file, ``TIDEMQ_*`` variables and overrides; plus unknown keys."""
    return load_config(ConsoleConfig, path, overrides=overrides, env=env)
