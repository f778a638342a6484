"""Credentials for an HTTP metrics endpoint: a bearer token, HTTP basic auth, or both
(Prometheus's ``authorization`` and ``basic_auth`` scrape settings send them).

:meth:`MetricsAuth.allows` takes the ``Authorization`` header's value and decides; a
refused request is answered 401 with :attr:`MetricsAuth.challenges` as its
``WWW-Authenticate`` headers. Secrets are compared in constant time (the comparison
takes as long whatever the given value, except for its length).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac

__all__ = ["MetricsAuth"]

REALM = "tidemq metrics"


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsAuth:
    token: str = ""
    user: str = ""
    password: str = ""

    def __post_init__(self) -> None:
        if bool(self.user) != bool(self.password):
            raise ValueError("a metrics user needs a password, and a password a user")
        if not self.token and not self.user:
            raise ValueError("give a token, or a user and a password")

    @classmethod
    def from_config(cls, token: str, user: str, password: str) -> MetricsAuth | None:
        """The auth the ``metricsAuth*`` keys ask for; None when they are all empty."""
        if not (token or user or password):
            return None
        return cls(token, user, password)

    @property
    def challenges(self) -> list[str]:
        out = []
        if self.token:
            out.append(f'Bearer realm="{REALM}"')
        if self.user:
            out.append(f'Basic realm="{REALM}", charset="UTF-8"')
        return out

    def allows(self, authorization: str | bytes | None) -> bool:
        if authorization is None:
            return False
        if isinstance(authorization, bytes):
            authorization = authorization.decode("latin-1")
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.token:
            return _same(value.encode("utf-8", "replace"), self.token.encode("utf-8"))
        if scheme.lower() == "basic" and self.user:
            try:
                decoded = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                return False
            user, sep, password = decoded.partition(b":")
            same_user = _same(user, self.user.encode("utf-8"))
            same_password = _same(password, self.password.encode("utf-8"))
            return bool(sep) and same_user and same_password
        return False


def _same(given: bytes, expected: bytes) -> bool:
    return hmac.compare_digest(given, expected)
