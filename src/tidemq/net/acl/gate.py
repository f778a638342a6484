"""The ACL interceptor: every request a broker or name server serves is checked against
:data:`~tidemq.net.acl.table.PERMISSIONS` and a directory of principals before its
handler runs -- the accounts of ``plain_acl.yml`` (ACL 1.0) or the broker's users and
ACLs (ACL 2.0); see :mod:`tidemq.net.acl.principal`.

The order of the checks is upstream's: an address of ``globalWhiteRemoteAddresses``
passes without credentials; otherwise the request names a principal (``AccessKey``: an
account's access key, a user's name); an account whose ``whiteRemoteAddress`` matches
the caller passes without signature or permission checks; otherwise the ``Signature``
must check (:mod:`tidemq.codec.signature`; keyed by the secret key or the password),
then the code's rule: admin, or the permission on the topic and group the request names
(ACL 1.0: the listed ones, else the account's defaults; ACL 2.0: the user's policies).

A refusal is NO_PERMISSION (16) with a remark naming what was missing; it is counted
(:attr:`AclGate.refused`, by reason) and logged through a rate-limited log.

A batch-protocol parent is checked as a whole (its signature covers its body, hence its
children); each child then passes its own code's rule as the parent's account.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections import Counter
from collections.abc import Awaitable, Mapping
from typing import Any

from tidemq.codec.bodies import HeartbeatData, UnlockBatchRequestBody, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.signature import ACCESS_KEY, verify
from tidemq.errors import RemoteProtocolError, ResponseCode
from tidemq.net.acl.perm import Perm
from tidemq.net.acl.principal import Directory, Principal
from tidemq.net.acl.table import PERMISSIONS, Need, Rule
from tidemq.net.connection import Connection
from tidemq.net.dispatcher import Processor
from tidemq.net.rate_limited_log import RateLimitedLog

__all__ = ["AclGate", "Refusal"]

_log = RateLimitedLog(logging.getLogger(__name__), burst=20, period=60.0)

RETRY_PREFIX = "%RETRY%"


class _Trusted:
    """Who a request passed as: a principal checked in full, or trusted by address."""

    __slots__ = ("account", "by_address")

    def __init__(self, account: Principal | None, by_address: bool) -> None:
        self.account = account
        self.by_address = by_address


#: The identity of the batch parent whose children are being checked.
_parent: contextvars.ContextVar[_Trusted | None] = contextvars.ContextVar(
    "tidemq_acl_parent", default=None)


class Refusal(Exception):
    """Why a request is refused; ``reason`` is the metric label."""

    def __init__(self, reason: str, remark: str) -> None:
        super().__init__(remark)
        self.reason = reason
        self.remark = remark


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"request code {code}"


class AclGate:
    """The interceptor (the broker pipeline's ``Interceptor`` shape: ``wrap(code,
    proceed)``); see the module docstring. ``table``: the rules by code (tests give
    others)."""

    rewrites = False

    def __init__(self, directory: Directory, *,
                 table: Mapping[int, Rule] = PERMISSIONS) -> None:
        #: Who may sign requests: an ``AclFile`` or a ``UserDirectory``.
        self.directory = directory
        self.table = table
        #: Refusals by reason: credentials, account, signature, admin, permission,
        #: unlisted.
        self.refused: Counter[str] = Counter()

    def wrap(self, code: int, proceed: Processor) -> Processor:
        rule = self.table.get(int(code))
        if rule is not None and rule.need is Need.OPEN:
            return proceed
        is_batch = int(code) == RequestCode.BATCH_REQUEST

        def checked(conn: Connection, request: RemotingCommand) -> Any:
            try:
                trusted = self.check(code, rule, conn.remote_address, request)
            except Refusal as refusal:
                self.refused[refusal.reason] += 1
                _log.warning("ACL refused %s from %s: %s", _code_name(code),
                             conn.remote_address, refusal.remark)
                return request.response(ResponseCode.NO_PERMISSION, refusal.remark)
            if not is_batch:
                return proceed(conn, request)
            token = _parent.set(trusted)
            try:
                result = proceed(conn, request)
            finally:
                _parent.reset(token)
            if inspect.isawaitable(result):
                return _under(trusted, result)
            return result

        return checked

    def check(self, code: int, rule: Rule | None, remote: str,
              request: RemotingCommand) -> _Trusted:
        """Who ``request`` passes as, or :class:`Refusal`."""
        name = _code_name(code)
        if rule is None:
            raise Refusal("unlisted", f"{name} has no entry in the ACL permission table")
        trusted = _parent.get()
        if trusted is None:
            trusted = self._authenticate(name, rule, remote, request)
        if trusted.by_address or rule.need is Need.AUTH:
            return trusted
        account = trusted.account
        assert account is not None  # only trust by address has no account
        if rule.need is Need.ADMIN:
            if not account.is_admin(remote):
                raise Refusal("admin", f"{name} needs an admin account; "
                                       f"{account.name} is not admin")
            return trusted
        ext = request.ext_fields
        for key in rule.topic_keys:
            topic = ext.get(key)
            if topic is None:
                continue
            if topic.startswith(RETRY_PREFIX):
                _need(account, "group", topic[len(RETRY_PREFIX):], rule.topic_perm, remote,
                      name)
            else:
                _need(account, "topic", topic, rule.topic_perm, remote, name)
        for key in rule.group_keys:
            group = ext.get(key)
            if group is not None:
                _need(account, "group", group, rule.group_perm, remote, name)
        for kind, resource in _from_body(rule.body, request):
            if kind == "topic" and not resource.startswith(RETRY_PREFIX):
                _need(account, "topic", resource, Perm.SUB, remote, name)
            else:
                _need(account, "group", resource.removeprefix(RETRY_PREFIX), Perm.SUB,
                      remote, name)
        return trusted

    def _authenticate(self, name: str, rule: Rule, remote: str,
                      request: RemotingCommand) -> _Trusted:
        directory = self.directory
        if directory.trusted_address(remote):
            return _Trusted(None, True)
        key = request.ext_fields.get(ACCESS_KEY)
        if not key:
            raise Refusal("credentials", f"{name} needs {rule.describe()}: "
                                         f"the request has no AccessKey")
        account = directory.principal(key)
        if account is None:
            raise Refusal("account", f"{name} needs {rule.describe()}: "
                                     f"no account has AccessKey {key}")
        why = account.unusable()
        if why is not None:
            raise Refusal("account", f"{name} needs {rule.describe()}: {why}")
        if account.trusted_from(remote):
            return _Trusted(account, True)
        if not verify(request, account.secret):
            raise Refusal("signature", f"{name} needs {rule.describe()}: the signature "
                                       f"of AccessKey {key} does not check")
        return _Trusted(account, False)


def _need(account: Principal, kind: str, name: str, needed: Perm, remote: str,
          code_name: str) -> None:
    if not account.may(kind, name, needed, remote):
        text = "|".join(p.name or "" for p in (Perm.PUB, Perm.SUB) if needed & p)
        raise Refusal("permission", f"{code_name} needs {text} on {kind} {name}; "
                                    f"{account.name} does not have it")


def _from_body(kind: str, request: RemotingCommand) -> list[tuple[str, str]]:
    """The (``topic``/``group``, name) pairs a body of ``kind`` names; none for a body
    that does not decode (its handler refuses it, saying why)."""
    if not kind:
        return []
    try:
        if kind == "heartbeat":
            data = decode_body(request.body, HeartbeatData)
            out = []
            for consumer in data.consumer_data_set:
                out.append(("group", consumer.group_name))
                out += [("topic", sub.topic) for sub in consumer.subscription_data_set]
            return out
        lock = decode_body(request.body, UnlockBatchRequestBody)
        return [("group", lock.consumer_group)]
    except RemoteProtocolError:
        return []


async def _under(trusted: _Trusted, result: Awaitable[Any]) -> Any:
    token = _parent.set(trusted)
    try:
        return await result
    finally:
        _parent.reset(token)
