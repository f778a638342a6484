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

A rule with a ``lookup`` (END_TRANSACTION) asks the server, through the function it gave
under that name, which topic a request that names none acts on; a lookup that finds
nothing refuses the request (NO_PERMISSION, the lookup's reason in the remark).

A batch-protocol parent is checked as a whole (its signature covers its body, hence its
children); each child then passes its own code's rule as the parent's account.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tidemq.codec.bodies import HeartbeatData, UnlockBatchRequestBody, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.signature import ACCESS_KEY, SigningKey
from tidemq.errors import RemoteProtocolError, ResponseCode
from tidemq.net.acl.perm import Perm
from tidemq.net.acl.principal import Directory, Principal
from tidemq.net.acl.table import PERMISSIONS, Need, Rule
from tidemq.net.connection import Connection
from tidemq.net.dispatcher import Processor
from tidemq.net.rate_limited_log import RateLimitedLog

__all__ = ["AclGate", "Refusal", "TopicLookup"]

#: The topic a request acts on when it names none (a rule's ``lookup``); raises
#: :class:`LookupError` saying why there is none.
TopicLookup = Callable[[RemotingCommand], str]

_log = RateLimitedLog(logging.getLogger(__name__), burst=20, period=60.0)

RETRY_PREFIX = "%RETRY%"
#: Longer AccessKeys, topics and groups are decided every time, not remembered: what a
#: peer can make the gate hold stays small (RocketMQ's names are at most 255 long).
MAX_REMEMBERED_NAME = 255


class _Trusted:
    """Who a request passed as: a principal checked in full, or trusted by address. For
    a principal that must sign, ``signing`` is its key (the gate remembers one per
    AccessKey and address, so that the next request of the connection only has its
    signature checked)."""

    __slots__ = ("account", "by_address", "signing")

    def __init__(self, account: Principal | None, by_address: bool,
                 signing: SigningKey | None = None) -> None:
        self.account = account
        self.by_address = by_address
        self.signing = signing


_BY_ADDRESS = _Trusted(None, True)


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
    others); ``lookups``: the server's topic lookups, by the name a rule's ``lookup``
    gives.

    Who an AccessKey from an address is (trusted by address, an account that must
    sign, and its key: :class:`~tidemq.codec.signature.SigningKey`), and what a
    principal may do (per principal, resource, permission and connection), are decided
    once and remembered until the directory's :attr:`~Directory.version` changes (a
    reloaded ``plain_acl.yml``, a changed user or ACL); at most :attr:`MAX_DECISIONS` of
    each are kept (past that they are forgotten and decided again). Refusals are not
    remembered. The signature is checked on every request."""

    rewrites = False
    #: Remembered decisions, passes and grants, at most (each).
    MAX_DECISIONS = 4096

    def __init__(self, directory: Directory, *,
                 table: Mapping[int, Rule] = PERMISSIONS,
                 lookups: Mapping[str, TopicLookup] | None = None) -> None:
        #: Who may sign requests: an ``AclFile`` or a ``UserDirectory``.
        self.directory = directory
        self.table = table
        self.lookups: Mapping[str, TopicLookup] = lookups or {}
        #: Refusals by reason: credentials, account, signature, admin, permission,
        #: unlisted.
        self.refused: Counter[str] = Counter()
        self._version = directory.version
        #: (principal, kind, resource, needed, remote address) -> allowed.
        self._decisions: dict[tuple[str, str, str, int, str], bool] = {}
        #: (AccessKey, remote address) -> who its requests pass as once signed.
        self._passes: dict[tuple[str | None, str], _Trusted] = {}
        #: (pass, rule's id, the header's topics and groups): requests granted.
        self._granted: set[tuple[_Trusted, int, tuple[str | None, ...]]] = set()

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

    def clears(self, code: int, conn: Connection, template: RemotingCommand) -> bool:
        """Whether every child of ``code`` with ``template``'s header, in the batch
        parent being served, passes as the parent's account (the broker pipeline's
        ``Pipeline.clears``): the code's rule reads only the header's topic and group,
        and they pass. A ``False`` decides nothing: each child is then checked on its
        own, refusals counted and logged as usual."""
        rule = self.table.get(int(code))
        if rule is None or rule.body or rule.lookup or _parent.get() is None:
            return False
        try:
            self.check(code, rule, conn.remote_address, template)
        except Refusal:
            return False
        return True

    def check(self, code: int, rule: Rule | None, remote: str,
              request: RemotingCommand) -> _Trusted:
        """Who ``request`` passes as, or :class:`Refusal`."""
        if rule is None:
            raise Refusal("unlisted",
                          f"{_code_name(code)} has no entry in the ACL permission table")
        trusted = _parent.get()
        if trusted is None:
            trusted = self._authenticate(code, rule, remote, request)
        need = rule.need
        if trusted.by_address or need is Need.AUTH:
            return trusted
        account = trusted.account
        assert account is not None  # only trust by address has no account
        if need is Need.ADMIN:
            if not self._allows(account, "admin", "", Perm.NONE, remote):
                raise Refusal("admin", f"{_code_name(code)} needs "
                                       f"{account.not_admin(remote)}")
            return trusted
        ext = request.ext_fields
        if rule.body or rule.lookup:
            self._resources(code, rule, remote, request, account)
            return trusted
        # The request's resources are its header's: a pass and rule that were granted
        # them are granted them again.
        names = (*map(ext.get, rule.topic_keys), *map(ext.get, rule.group_keys))
        granted = (trusted, id(rule), names)
        if granted not in self._granted:
            self._resources(code, rule, remote, request, account)
            if all(name is None or len(name) <= MAX_REMEMBERED_NAME for name in names):
                if len(self._granted) >= self.MAX_DECISIONS:
                    self._granted.clear()
                self._granted.add(granted)
        return trusted

    def _resources(self, code: int, rule: Rule, remote: str, request: RemotingCommand,
                   account: Principal) -> None:
        """Refuse (:class:`Refusal`) unless ``account`` holds what ``rule`` needs on the
        topics and groups ``request`` names."""
        ext = request.ext_fields
        topics = [t for t in map(ext.get, rule.topic_keys)
                  if t is not None and (t or not rule.lookup)]
        if rule.lookup and not topics:
            topics.append(self._look_up(code, rule, request))
        for topic in topics:
            if topic.startswith(RETRY_PREFIX):
                self._need(account, "group", topic[len(RETRY_PREFIX):], rule.topic_perm,
                           remote, code)
            else:
                self._need(account, "topic", topic, rule.topic_perm, remote, code)
        for key in rule.group_keys:
            group = ext.get(key)
            if group is not None:
                self._need(account, "group", group, rule.group_perm, remote, code)
        for kind, resource in _from_body(rule.body, request):
            if kind == "topic" and not resource.startswith(RETRY_PREFIX):
                self._need(account, "topic", resource, Perm.SUB, remote, code)
            else:
                self._need(account, "group", resource.removeprefix(RETRY_PREFIX), Perm.SUB,
                           remote, code)

    def _look_up(self, code: int, rule: Rule, request: RemotingCommand) -> str:
        """The topic ``rule.lookup`` finds for ``request``, or :class:`Refusal`."""
        lookup = self.lookups.get(rule.lookup)
        try:
            if lookup is None:
                raise LookupError(f"this server has no {rule.lookup} lookup")
            return lookup(request)
        except LookupError as exc:
            raise Refusal("permission", f"{_code_name(code)} needs {rule.describe()}: it "
                                        f"names no topic, and {exc.args[0]}") from None

    def _authenticate(self, code: int, rule: Rule, remote: str,
                      request: RemotingCommand) -> _Trusted:
        # The version before the lookups: what is remembered is then never older than the
        # version it is remembered under.
        version = self.directory.version
        if version != self._version:
            self._version = version
            self._decisions.clear()
            self._passes.clear()
            self._granted.clear()
        key = request.ext_fields.get(ACCESS_KEY)
        trusted = self._passes.get((key, remote))
        if trusted is None:
            trusted = self._pass(code, rule, remote, key)
            if key is None or len(key) <= MAX_REMEMBERED_NAME:
                if len(self._passes) >= self.MAX_DECISIONS:
                    self._passes.clear()
                self._passes[key, remote] = trusted
        signing = trusted.signing
        if signing is not None and not signing.verify(request):
            raise Refusal("signature", f"{_code_name(code)} needs {rule.describe()}: the "
                                       f"signature of AccessKey {key} does not check")
        return trusted

    def _pass(self, code: int, rule: Rule, remote: str, key: str | None) -> _Trusted:
        """Who requests with AccessKey ``key`` from ``remote`` pass as, their signature
        aside, or :class:`Refusal`."""
        directory = self.directory
        if directory.trusted_address(remote):
            return _BY_ADDRESS
        if not key:
            raise Refusal("credentials", f"{_code_name(code)} needs {rule.describe()}: "
                                         f"the request has no AccessKey")
        account = directory.principal(key)
        if account is None:
            raise Refusal("account", f"{_code_name(code)} needs {rule.describe()}: "
                                     f"{directory.unknown(key)}")
        why = account.unusable()
        if why is not None:
            raise Refusal("account", f"{_code_name(code)} needs {rule.describe()}: {why}")
        if account.trusted_from(remote):
            return _Trusted(account, True)
        return _Trusted(account, False, SigningKey(account.secret))

    def _allows(self, account: Principal, kind: str, name: str, needed: Perm,
                remote: str) -> bool:
        """``account.may`` (``kind`` ``admin``: ``account.is_admin``), remembered."""
        key = (account.name, kind, name, int(needed), remote)
        allowed = self._decisions.get(key)
        if allowed is None:
            allowed = (account.is_admin(remote) if kind == "admin"
                       else account.may(kind, name, needed, remote))
            if len(name) <= MAX_REMEMBERED_NAME:
                if len(self._decisions) >= self.MAX_DECISIONS:
                    self._decisions.clear()
                self._decisions[key] = allowed
        return allowed

    def _need(self, account: Principal, kind: str, name: str, needed: Perm, remote: str,
              code: int) -> None:
        if not self._allows(account, kind, name, needed, remote):
            text = "|".join(p.name or "" for p in (Perm.PUB, Perm.SUB) if needed & p)
            raise Refusal("permission", f"{_code_name(code)} needs {text} on {kind} "
                                        f"{name}; {account.name} does not have it")


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
