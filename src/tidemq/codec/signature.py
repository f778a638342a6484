"""Request signatures of RocketMQ's ACL 1.0 (``AclClientRPCHook``): sans-IO.

A signed request carries two more ext fields:

==============  ===========================================================================
``AccessKey``   the account's access key
``Signature``   base64(HMAC-SHA1(secretKey, content))
==============  ===========================================================================

``content`` is the values of every other ext field (``AccessKey`` included, ``Signature``
excluded), in the order of their keys (sorted by UTF-16 code unit, as Java's ``TreeMap``;
for the ASCII keys the protocol uses that is byte order), concatenated and UTF-8 encoded,
followed by the body's bytes. Clients up to RocketMQ 4.9.3 left ``_UNIQUE_KEY_QUERY`` out;
a verifier accepts either form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from tidemq.codec.command import RemotingCommand

__all__ = ["ACCESS_KEY", "LEGACY_SKIPPED_KEY", "SECURITY_TOKEN", "SIGNATURE", "Credentials",
           "content_of",
           "sign", "signature_of", "verify"]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: Left out of the content by clients up to RocketMQ 4.9.3.
LEGACY_SKIPPED_KEY = "_UNIQUE_KEY_QUERY"


def _java_order(key: str) -> list[int]:
    encoded = key.encode("utf-16-be")
    return [int.from_bytes(encoded[i:i + 2], "big") for i in range(0, len(encoded), 2)]


def _values(ext_fields: Mapping[str, str], skip: frozenset[str]) -> bytes:
    # Code point order is UTF-16 order below U+D800, so plain sorting serves ASCII keys.
    keys = sorted(ext_fields) if all(k.isascii() for k in ext_fields) else sorted(
        ext_fields, key=_java_order)
    return "".join(ext_fields[k] for k in keys
                   if k != SIGNATURE and k not in skip).encode()


def content_of(ext_fields: Mapping[str, str], body: bytes | bytearray | memoryview,
               *, skip: frozenset[str] = frozenset()) -> bytes:
    """The signed content of a request with ``ext_fields`` and ``body``."""
    return _values(ext_fields, skip) + bytes(body)


def signature_of(content: bytes, secret_key: str) -> str:
    return base64.b64encode(
        hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode("ascii")


def _signature(cmd: RemotingCommand, secret_key: str,
               skip: frozenset[str] = frozenset()) -> str:
    """``signature_of(content_of(...))`` without copying the body."""
    mac = hmac.new(secret_key.encode(), _values(cmd.ext_fields, skip), hashlib.sha1)
    for part in (cmd.body,) if cmd.body_parts is None else cmd.body_parts:
        mac.update(part)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign(cmd: RemotingCommand, access_key: str, secret_key: str) -> RemotingCommand:
    """Add ``AccessKey`` and ``Signature`` to ``cmd`` (in place; returned for chaining)."""
    cmd.ext_fields.pop(SIGNATURE, None)
    cmd.ext_fields[ACCESS_KEY] = access_key
    cmd.ext_fields[SIGNATURE] = _signature(cmd, secret_key)
    return cmd


def verify(cmd: RemotingCommand, secret_key: str) -> bool:
    """Whether ``cmd``'s ``Signature`` is right for ``secret_key`` (either content form)."""
    given = cmd.ext_fields.get(SIGNATURE)
    if given is None:
        return False
    expected = given.encode()
    if hmac.compare_digest(_signature(cmd, secret_key).encode(), expected):
        return True
    return LEGACY_SKIPPED_KEY in cmd.ext_fields and hmac.compare_digest(
        _signature(cmd, secret_key, frozenset({LEGACY_SKIPPED_KEY})).encode(), expected)


class Credentials:
    """An account's keys; :meth:`sign` signs a request with them."""

    __slots__ = ("access_key", "secret_key")

    def __init__(self, access_key: str, secret_key: str) -> None:
        if not access_key or not secret_key:
            raise ValueError("credentials need both an access key and a secret key")
        self.access_key = access_key
        self.secret_key = secret_key

    def __repr__(self) -> str:  # never the secret
        return f"Credentials({self.access_key!r}, ...)"

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        return sign(cmd, self.access_key, self.secret_key)
