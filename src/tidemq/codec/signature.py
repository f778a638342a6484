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
import binascii
import hashlib
import hmac
import operator
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tidemq.codec.command import RemotingCommand

__all__ = ["ACCESS_KEY", "LEGACY_SKIPPED_KEY", "SECURITY_TOKEN", "SIGNATURE", "Credentials",
           "SigningKey", "content_of", "sign", "signature_of", "verify"]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: Left out of the content by clients up to RocketMQ 4.9.3.
LEGACY_SKIPPED_KEY = "_UNIQUE_KEY_QUERY"

_NO_SKIP: frozenset[str] = frozenset()


def _java_order(key: str) -> list[int]:
    encoded = key.encode("utf-16-be")
    return [int.from_bytes(encoded[i:i + 2], "big") for i in range(0, len(encoded), 2)]


def _values(ext_fields: Mapping[str, str], skip: frozenset[str]) -> bytes:
    # Code point order is UTF-16 order below U+D800, so plain sorting serves ASCII keys.
    keys = sorted(ext_fields)
    if not "".join(keys).isascii():
        keys.sort(key=_java_order)
    if skip:
        return "".join([ext_fields[k] for k in keys
                        if k != SIGNATURE and k not in skip]).encode()
    return "".join([ext_fields[k] for k in keys if k != SIGNATURE]).encode()


#: Key sets seen (in their dicts' order) -> the values' getter in signing order, at most
#: :data:`MAX_KEY_ORDERS` of them (past that they are forgotten and sorted again), each
#: of keys of at most :data:`MAX_KEY_TEXT` characters together (a larger set, which no
#: client sends, is sorted every time: a peer cannot make this hold much).
_orders: dict[tuple[str, ...], Callable[[Mapping[str, str]], Any]] = {}
MAX_KEY_ORDERS = 256
MAX_KEY_TEXT = 1024


def _signed_values(ext_fields: Mapping[str, str]) -> bytes:
    """:func:`_values` without a skip, its twin: a client sends the same keys in the same
    order request after request, so their order is sorted once per key set."""
    names = tuple(ext_fields)
    values = _orders.get(names)
    if values is None:
        keys = [k for k in names if k != SIGNATURE]
        keys.sort()
        text = "".join(keys)
        if not text.isascii():
            keys.sort(key=_java_order)
        # itemgetter of one key gives the value itself, which joins to itself too.
        values = operator.itemgetter(*keys) if keys else _no_values
        if len(text) <= MAX_KEY_TEXT:
            if len(_orders) >= MAX_KEY_ORDERS:
                _orders.clear()
            _orders[names] = values
    return "".join(values(ext_fields)).encode()


def _no_values(ext_fields: Mapping[str, str]) -> tuple[str, ...]:
    return ()


def content_of(ext_fields: Mapping[str, str], body: bytes | bytearray | memoryview,
               *, skip: frozenset[str] = _NO_SKIP) -> bytes:
    """The signed content of a request with ``ext_fields`` and ``body``."""
    return _values(ext_fields, skip) + bytes(body)


def signature_of(content: bytes, secret_key: str) -> str:
    """The plain form of a signature: one HMAC over the whole content."""
    return base64.b64encode(
        hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode("ascii")


class _Mac(Protocol):
    def copy(self) -> _Mac: ...
    def update(self, data: bytes | bytearray | memoryview, /) -> None: ...
    def digest(self) -> bytes: ...


class SigningKey:
    """A secret key ready to sign with: the HMAC-SHA1 keyed once and copied for each
    request (keying costs more than the MAC of a small request); the content is fed in
    pieces (ext-field values, then the body's buffers), so no body is copied. The
    result equals :func:`signature_of` over :func:`content_of`."""

    __slots__ = ("_mac",)

    def __init__(self, secret_key: str) -> None:
        mac = hmac.new(secret_key.encode(), digestmod=hashlib.sha1)
        # Where OpenSSL serves the HMAC, the object behind the module's wrapper: the same
        # copy, update and digest, without a Python frame for each.
        self._mac: _Mac = getattr(mac, "_hmac", None) or mac

    def __repr__(self) -> str:  # never the secret
        return "SigningKey(...)"

    def signature(self, cmd: RemotingCommand, skip: frozenset[str] = _NO_SKIP) -> bytes:
        """The ``Signature`` of ``cmd`` (base64, ASCII bytes)."""
        mac = self._mac.copy()
        mac.update(_values(cmd.ext_fields, skip) if skip else _signed_values(cmd.ext_fields))
        if cmd.body_parts is None:
            mac.update(cmd.body)
        else:
            for part in cmd.body_parts:
                mac.update(part)
        return binascii.b2a_base64(mac.digest(), newline=False)

    def mac(self, content: bytes | bytearray | memoryview) -> bytes:
        """The raw HMAC-SHA1 of ``content`` (20 bytes), for what is signed outside a
        request (:mod:`tidemq.codec.ha_auth`)."""
        mac = self._mac.copy()
        mac.update(content)
        return mac.digest()

    def sign(self, cmd: RemotingCommand, access_key: str) -> RemotingCommand:
        """Add ``AccessKey`` and ``Signature`` to ``cmd`` (in place; returned)."""
        ext = cmd.ext_fields
        ext.pop(SIGNATURE, None)
        ext[ACCESS_KEY] = access_key
        ext[SIGNATURE] = self.signature(cmd).decode("ascii")
        return cmd

    def verify(self, cmd: RemotingCommand) -> bool:
        """Whether ``cmd``'s ``Signature`` is right for this key (either content form)."""
        given = cmd.ext_fields.get(SIGNATURE)
        if given is None:
            return False
        expected = given.encode()
        if hmac.compare_digest(self.signature(cmd), expected):
            return True
        return LEGACY_SKIPPED_KEY in cmd.ext_fields and hmac.compare_digest(
            self.signature(cmd, frozenset({LEGACY_SKIPPED_KEY})), expected)


def sign(cmd: RemotingCommand, access_key: str, secret_key: str) -> RemotingCommand:
    """Add ``AccessKey`` and ``Signature`` to ``cmd`` (in place; returned for chaining)."""
    return SigningKey(secret_key).sign(cmd, access_key)


def verify(cmd: RemotingCommand, secret_key: str) -> bool:
    """Whether ``cmd``'s ``Signature`` is right for ``secret_key`` (either content form)."""
    return SigningKey(secret_key).verify(cmd)


class Credentials:
    """An account's keys; :meth:`sign` signs a request with them."""

    __slots__ = ("_key", "access_key", "secret_key")

    def __init__(self, access_key: str, secret_key: str) -> None:
        if not access_key or not secret_key:
            raise ValueError("credentials need both an access key and a secret key")
        self.access_key = access_key
        self.secret_key = secret_key
        self._key = SigningKey(secret_key)

    def __repr__(self) -> str:  # never the secret
        return f"Credentials({self.access_key!r}, ...)"

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        return self._key.sign(cmd, self.access_key)
