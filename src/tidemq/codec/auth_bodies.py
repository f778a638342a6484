"""The JSON bodies of RocketMQ 5.3's ACL 2.0 requests (AUTH_CREATE_USER 3001 ...
AUTH_LIST_ACL 3010), also the layout of a broker's ``users.json`` and ``acls.json``:
sans-IO.

===========================  ===============================================================
body                         members
===========================  ===============================================================
``UserInfo``                 ``username``, ``password``, ``userType`` (``Super`` /
                             ``Normal``), ``userStatus`` (``enable`` / ``disable``)
``AclInfo``                  ``subject`` (``User:name``), ``policies``: list of PolicyInfo
``PolicyInfo``               ``policyType`` (``Custom`` / ``Default``), ``entries``: list of
                             PolicyEntryInfo
``PolicyEntryInfo``          ``resource`` (``Topic:orders-*``), ``actions`` (``Pub``,
                             ``Sub``, ...), ``sourceIps``, ``decision`` (``Allow`` /
                             ``Deny``)
``AuthMetadata``             ``users``: list of UserInfo (passwords included), ``acls``:
                             list of AclInfo -- GET_AUTH_METADATA (20300), a TideMQ code
===========================  ===============================================================

AUTH_LIST_USER and AUTH_LIST_ACL answer a JSON array of UserInfo / AclInfo. Every member
may be absent; what a member must hold is checked by the model
(:mod:`tidemq.net.acl.policy`), which names the member that is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import msgspec

from tidemq.errors import RemoteProtocolError

__all__ = ["AclInfo", "AuthMetadata", "PolicyEntryInfo",
           "PolicyInfo", "UserInfo", "decode_auth", "decode_auth_list", "encode_auth",
           "encode_auth_list"]


class _Auth(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    pass


class UserInfo(_Auth):
    username: str | None = None
    password: str | None = None
    user_type: str | None = None
    user_status: str | None = None


class PolicyEntryInfo(_Auth):
    resource: str | None = None
    actions: list[str] | None = None
    source_ips: list[str] | None = None
    decision: str | None = None


class PolicyInfo(_Auth):
    policy_type: str | None = None
    entries: list[PolicyEntryInfo] | None = None


class AclInfo(_Auth):
    subject: str | None = None
    policies: list[PolicyInfo] | None = None


class AuthMetadata(_Auth):
    users: list[UserInfo] = []
    acls: list[AclInfo] = []


_A = TypeVar("_A", bound=_Auth)
_encoder = msgspec.json.Encoder(order="sorted")


def encode_auth(body: _Auth) -> bytes:
    return _encoder.encode(body)


def encode_auth_list(bodies: Sequence[_Auth]) -> bytes:
    return _encoder.encode(list(bodies))


def decode_auth(data: bytes | bytearray | memoryview, cls: type[_A]) -> _A:
    """``data`` as ``cls``; :class:`RemoteProtocolError` naming what is wrong."""
    if not data:
        raise RemoteProtocolError(f"the body must be a {cls.__name__} (JSON); it is empty")
    try:
        return msgspec.json.decode(bytes(data), type=cls, strict=False)
    except msgspec.DecodeError as exc:
        raise RemoteProtocolError(f"the body is not a valid {cls.__name__}: {exc}") from None


def decode_auth_list(data: bytes | bytearray | memoryview, cls: type[_A]) -> list[_A]:
    """``data`` as a JSON array of ``cls``."""
    try:
        return msgspec.json.decode(bytes(data) or b"[]", type=list[cls], strict=False)  # type: ignore[valid-type]
    except msgspec.DecodeError as exc:
        raise RemoteProtocolError(
            f"the body is not a list of {cls.__name__}: {exc}") from None
