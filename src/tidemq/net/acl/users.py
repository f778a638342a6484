"""ACL 2.0 principals: a user (:class:`~tidemq.net.acl.policy.User`) with its ACL, looked
up in a :class:`UserSource` (the broker's store of users and ACLs).

With authorisation off (``authenticationEnabled=true``, ``authorizationEnabled=false``)
every user whose signature checks may do everything, as upstream. With it on, a
``Super`` user may do everything and a ``Normal`` one what its ACL allows
(:func:`~tidemq.net.acl.policy.decide`): PUB is action ``Pub``, SUB is ``Sub``, on
resource ``Topic:<name>`` or ``Group:<name>``; an administrative request needs
``Update`` on ``Cluster:<cluster>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tidemq.net.acl.perm import Perm
from tidemq.net.acl.policy import Acl, Action, Decision, ResourceType, User, UserType, decide
from tidemq.net.acl.principal import Principal

__all__ = ["UserDirectory", "UserPrincipal", "UserSource"]

_KINDS = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}
_ACTIONS = ((int(Perm.PUB), Action.PUB), (int(Perm.SUB), Action.SUB))
_ANY = int(Perm.ANY)


class UserSource(Protocol):
    def user(self, username: str) -> User | None: ...

    def acl_of(self, username: str) -> Acl | None: ...

    @property
    def version(self) -> int:
        """Changes with every change of a user or an ACL."""
        ...


class UserPrincipal:
    __slots__ = ("acl", "authorize", "cluster", "user")

    def __init__(self, user: User, acl: Acl | None, *, authorize: bool, cluster: str) -> None:
        self.user = user
        self.acl = acl
        self.authorize = authorize
        self.cluster = cluster

    @property
    def name(self) -> str:
        return self.user.username

    @property
    def secret(self) -> str:
        return self.user.password

    def unusable(self) -> str | None:
        return None if self.user.enabled else f"user {self.user.username} is disabled"

    def trusted_from(self, remote: str) -> bool:
        return False

    def _free(self) -> bool:
        return not self.authorize or self.user.user_type is UserType.SUPER

    def is_admin(self, remote: str) -> bool:
        return self._free() or decide(self.acl, ResourceType.CLUSTER, self.cluster,
                                      Action.UPDATE, remote) is Decision.ALLOW

    def not_admin(self, remote: str) -> str:
        said = decide(self.acl, ResourceType.CLUSTER, self.cluster, Action.UPDATE, remote)
        why = ("with no ACL" if self.acl is None else "whose ACL denies it"
               if said is Decision.DENY else "whose ACL does not allow it")
        return (f"a Super user, or action Update on resource Cluster:{self.cluster}; "
                f"{self.user.username} is a {self.user.user_type.value} user {why}")

    def may(self, kind: str, name: str, needed: Perm, remote: str) -> bool:
        if self._free():
            return True
        rtype = _KINDS[kind]
        bits = int(needed)  # plain ints: IntFlag arithmetic costs microseconds a step
        for perm, action in _ACTIONS:
            if bits & perm and decide(self.acl, rtype, name, action,
                                      remote) is not Decision.ALLOW:
                return False
        if bits & _ANY:
            return any(decide(self.acl, rtype, name, a, remote) is Decision.ALLOW
                       for a in (Action.PUB, Action.SUB))
        return True


class UserDirectory:
    """The gate's :class:`~tidemq.net.acl.principal.Directory` over ``source``; the
    principals of the source's current :attr:`~UserSource.version` are kept (at most
    :attr:`MAX_KEPT`). ``incomplete``: why the source may lack users it will have
    (a copy not taken yet), or ``None``; a refusal of an unknown user says it."""

    MAX_KEPT = 4096

    def __init__(self, source: UserSource, *, authorize: bool, cluster: str,
                 incomplete: Callable[[], str | None] | None = None) -> None:
        self.source = source
        self.authorize = authorize
        self.cluster = cluster
        self._incomplete = incomplete
        self._kept: dict[str, UserPrincipal] = {}
        self._kept_version = source.version

    def trusted_address(self, remote: str) -> bool:
        return False

    @property
    def version(self) -> int:
        return self.source.version

    def unknown(self, access_key: str) -> str:
        why = self._incomplete() if self._incomplete is not None else None
        return f"no account has AccessKey {access_key}" + (f" ({why})" if why else "")

    def principal(self, access_key: str) -> Principal | None:
        version = self.source.version
        if version != self._kept_version:
            self._kept.clear()
            self._kept_version = version
        kept = self._kept.get(access_key)
        if kept is not None:
            return kept
        user = self.source.user(access_key)
        if user is None:
            return None
        acl = self.source.acl_of(access_key) if self.authorize else None
        principal = UserPrincipal(user, acl, authorize=self.authorize, cluster=self.cluster)
        if len(self._kept) >= self.MAX_KEPT:
            self._kept.clear()
        self._kept[access_key] = principal
        return principal
