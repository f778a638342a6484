"""The JSON-valued ACL 2.0 keys of RocketMQ 5.3 that a name server and a standalone
controller read as a broker does: ``initAuthenticationUser`` (``{"username",
"password"}``) and ``innerClientAuthenticationCredentials`` (``{"accessKey",
"secretKey"}``); and :func:`check_copy_keys`, the rules of the keys of a server that
checks requests against a copy of a broker's users. Each raises
:class:`~tidemq.errors.ConfigError` naming the key for a value that cannot be used."""

from __future__ import annotations

import json
from typing import Any

from tidemq.errors import ConfigError

__all__ = ["check_copy_keys", "init_user", "inner_credentials"]


def _json_object(text: str, key: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{key} is not JSON: {exc}", key=key) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{key} must be a JSON object", key=key)
    return doc


def init_user(text: str) -> tuple[str, str] | None:
    """``initAuthenticationUser`` as (username, password); None when empty."""
    if not text:
        return None
    doc = _json_object(text, "initAuthenticationUser")
    name, password = doc.get("username"), doc.get("password")
    if not isinstance(name, str) or not name or not isinstance(password, str) or len(
            password) < 6:
        raise ConfigError("initAuthenticationUser needs a username and a password of at "
                          "least 6 characters", key="initAuthenticationUser")
    return name, password


def inner_credentials(text: str) -> tuple[str, str] | None:
    """``innerClientAuthenticationCredentials`` as (access key, secret key); None when
    empty."""
    if not text:
        return None
    key = "innerClientAuthenticationCredentials"
    doc = _json_object(text, key)
    ak, sk = doc.get("accessKey"), doc.get("secretKey")
    if not isinstance(ak, str) or not ak or not isinstance(sk, str) or not sk:
        raise ConfigError(f"{key} needs accessKey and secretKey", key=key)
    return ak, sk


def check_copy_keys(*, authentication_enabled: bool, credentials: tuple[str, str] | None,
                    refresh_seconds: float) -> None:
    """The keys of a server that checks requests against a copy of a broker's users (a
    name server, a standalone controller): with authentication, credentials to ask for the
    copy with; a positive refresh period."""
    if authentication_enabled and credentials is None:
        raise ConfigError("authenticationEnabled needs initAuthenticationUser (or "
                          "innerClientAuthenticationCredentials): the users are copied "
                          "from a broker with them", key="initAuthenticationUser")
    if refresh_seconds <= 0:
        raise ConfigError("authMetadataRefreshSeconds must be above 0",
                          key="authMetadataRefreshSeconds")
