"""The ACL 2.0 model of RocketMQ 5.3: users, and ACLs of policies over resource patterns.

A **user** has a ``username`` (the AccessKey its requests carry), a ``password`` (the
secret they are signed with), a type -- ``Super`` (every request allowed) or ``Normal``
(what its ACL allows) -- and a status, ``enable`` or ``disable`` (a disabled user is
refused like an unknown one).

An **ACL** belongs to a subject, ``User:<username>``, and holds policies (``Custom``, or
``Default``); a policy is a list of entries:

==============  ===========================================================================
member          meaning
==============  ===========================================================================
``resource``    ``Type:pattern``: type ``Cluster``, ``Namespace``, ``Topic`` or ``Group``;
                pattern a literal name (``Topic:orders``), a prefix ending in ``*``
                (``Topic:orders-*``) or ``*`` (every name of the type); ``*`` alone is
                every resource of every type
``actions``     ``Pub``, ``Sub``, ``Create``, ``Update``, ``Delete``, ``Get``, ``List``,
                ``All`` (any action)
``sourceIps``   addresses or CIDR ranges the request must come from (none: any)
``decision``    ``Allow`` or ``Deny``
==============  ===========================================================================

A request is allowed on a resource when some entry matching the resource, the action and
the caller's address says ``Allow`` and none says ``Deny``: Deny wins, and nothing
matching is a refusal. Administrative requests need a ``Super`` user, or ``Update`` (or
``All``) allowed on ``Cluster:*`` or the broker's cluster.

Parsing (:func:`parse_user`, :func:`parse_acl_info`) raises :class:`ValueError` naming the
member that is wrong; :func:`merge_policies` is how createAcl and updateAcl combine an
ACL with the entries they are given (an entry replaces the one of the same policy type
and resource).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import ipaddress
from typing import TypeVar

from tidemq.codec.auth_bodies import AclInfo, PolicyEntryInfo, PolicyInfo, UserInfo

__all__ = [
    "Acl",
    "Action",
    "Decision",
    "PolicyEntry",
    "Resource",
    "ResourceType",
    "User",
    "UserType",
    "decide",
    "mentions",
    "merge_policies",
    "parse_acl_info",
    "parse_resource",
    "parse_user",
    "subject_of",
    "to_acl_info",
    "to_user_info",
    "without_resource",
]

SUBJECT_PREFIX = "User:"


class UserType(enum.Enum):
    SUPER = "Super"
    NORMAL = "Normal"


class ResourceType(enum.Enum):
    ANY = "Any"
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    TOPIC = "Topic"
    GROUP = "Group"


class Action(enum.Enum):
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"
    ALL = "All"


class Decision(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"


_E = TypeVar("_E", bound=enum.Enum)


def _enum_value(cls: type[_E], text: str | None, member: str) -> _E:
    for item in cls:
        if text is not None and str(item.value).lower() == text.strip().lower():
            return item
    choices = ", ".join(str(i.value) for i in cls if i.value != "Any")
    raise ValueError(f"{member} {text!r} is not one of {choices}")


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    username: str
    password: str
    user_type: UserType = UserType.NORMAL
    enabled: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    type: ResourceType
    #: The literal name, or the prefix when ``prefixed``; empty with ``any_name``.
    name: str = ""
    prefixed: bool = False
    any_name: bool = False

    def matches(self, rtype: ResourceType, name: str) -> bool:
        if self.type is not ResourceType.ANY and self.type is not rtype:
            return False
        if self.type is ResourceType.ANY or self.any_name:
            return True
        return name.startswith(self.name) if self.prefixed else name == self.name

    def __str__(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        pattern = "*" if self.any_name else self.name + ("*" if self.prefixed else "")
        return f"{self.type.value}:{pattern}"


def parse_resource(text: str) -> Resource:
    text = text.strip()
    if text == "*":
        return Resource(ResourceType.ANY)
    kind, sep, pattern = text.partition(":")
    if not sep or not pattern:
        raise ValueError(f"resource {text!r} is not 'Type:name' (Topic:orders, "
                         f"Topic:orders-*, Group:*, Cluster:*) or '*'")
    rtype = _enum_value(ResourceType, kind, "resource type")
    if rtype is ResourceType.ANY:
        raise ValueError(f"resource type {kind!r} is not one of Cluster, Namespace, Topic, "
                         f"Group")
    if pattern == "*":
        return Resource(rtype, any_name=True)
    if "*" in pattern[:-1]:
        raise ValueError(f"resource {text!r}: '*' may only end the name")
    if pattern.endswith("*"):
        return Resource(rtype, pattern[:-1], prefixed=True)
    return Resource(rtype, pattern)


@functools.lru_cache(maxsize=4096)
def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"sourceIps entry {text!r} is not an address or a CIDR "
                         f"range") from None


def _from(host: str, sources: tuple[str, ...]) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in _network(s) for s in sources)


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyEntry:
    resource: Resource
    actions: frozenset[Action]
    decision: Decision
    source_ips: tuple[str, ...] = ()
    policy_type: str = "Custom"

    def applies(self, rtype: ResourceType, name: str, action: Action, host: str) -> bool:
        if not self.resource.matches(rtype, name):
            return False
        if Action.ALL not in self.actions and action not in self.actions:
            return False
        return not self.source_ips or _from(host, self.source_ips)


#: Decisions an ACL remembers at most (it is replaced, never changed, so they stay right).
_MEMO_SIZE = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class Acl:
    subject: str
    entries: tuple[PolicyEntry, ...] = ()
    #: (type, name, action, host) -> decision, for :func:`decide`.
    memo: dict[tuple[ResourceType, str, Action, str], Decision | None] = dataclasses.field(
        default_factory=dict, compare=False, hash=False, repr=False)


def subject_of(username: str) -> str:
    return SUBJECT_PREFIX + username


def _host(remote: str) -> str:
    """The host of ``host:port``, ``[v6]:port`` or a bare address."""
    if remote.startswith("["):
        return remote[1:remote.index("]")] if "]" in remote else remote
    return remote.rsplit(":", 1)[0] if remote.count(":") == 1 else remote


def decide(acl: Acl | None, rtype: ResourceType, name: str, action: Action,
           remote: str) -> Decision | None:
    """What ``acl`` says of ``action`` on ``rtype`` ``name`` from ``remote``: Deny if any
    matching entry denies, else Allow if one allows, else ``None`` (refused)."""
    if acl is None:
        return None
    host = _host(remote)
    key = (rtype, name, action, host)
    memo = acl.memo
    if key in memo:
        return memo[key]
    decision: Decision | None = None
    for entry in acl.entries:
        if entry.applies(rtype, name, action, host):
            if entry.decision is Decision.DENY:
                decision = Decision.DENY
                break
            decision = Decision.ALLOW
    if len(memo) >= _MEMO_SIZE:
        memo.clear()
    memo[key] = decision
    return decision


# ---------------------------------------------------------------------- bodies


def parse_user(info: UserInfo, *, username: str | None = None,
               base: User | None = None) -> User:
    """The user ``info`` describes (``base``: the user an update starts from; members
    ``info`` leaves out keep ``base``'s values). ``username``: the header's, which the
    body must not contradict."""
    name = info.username or username or (base.username if base else None)
    if not name:
        raise ValueError("username is missing")
    if username is not None and info.username and info.username != username:
        raise ValueError(f"username {info.username!r} of the body is not the header's "
                         f"{username!r}")
    if any(c.isspace() or c == ":" for c in name):
        raise ValueError(f"username {name!r} must not contain spaces or ':'")
    password = info.password if info.password is not None else (
        base.password if base else None)
    if not password:
        raise ValueError("password is missing")
    if len(password) < 6:
        raise ValueError("password must be at least 6 characters")
    user_type = (_enum_value(UserType, info.user_type, "userType") if info.user_type
                 else base.user_type if base else UserType.NORMAL)
    enabled = base.enabled if base else True
    if info.user_status:
        status = info.user_status.strip().lower()
        if status not in ("enable", "disable"):
            raise ValueError(f"userStatus {info.user_status!r} is not enable or disable")
        enabled = status == "enable"
    return User(name, password, user_type, enabled)


def to_user_info(user: User, *, with_password: bool = False) -> UserInfo:
    return UserInfo(username=user.username,
                    password=user.password if with_password else None,
                    user_type=user.user_type.value,
                    user_status="enable" if user.enabled else "disable")


def _entry(raw: PolicyEntryInfo, policy_type: str, where: str) -> PolicyEntry:
    if not raw.resource:
        raise ValueError(f"{where}.resource is missing")
    if not raw.actions:
        raise ValueError(f"{where}.actions is missing")
    actions = frozenset(_enum_value(Action, a, f"{where}.actions entry") for a in raw.actions)
    decision = _enum_value(Decision, raw.decision or "", f"{where}.decision")
    sources = tuple(str(_network(s)) for s in raw.source_ips or ())
    return PolicyEntry(parse_resource(raw.resource), actions, decision, sources, policy_type)


def parse_acl_info(info: AclInfo, *, subject: str | None = None) -> Acl:
    """The ACL ``info`` describes; ``subject``: the header's (the body may leave it out)."""
    name = info.subject or subject
    if not name:
        raise ValueError("subject is missing")
    if subject is not None and info.subject and info.subject != subject:
        raise ValueError(f"subject {info.subject!r} of the body is not the header's "
                         f"{subject!r}")
    if not name.startswith(SUBJECT_PREFIX) or len(name) == len(SUBJECT_PREFIX):
        raise ValueError(f"subject {name!r} is not 'User:<username>'")
    entries: list[PolicyEntry] = []
    for i, policy in enumerate(info.policies or ()):
        ptype = policy.policy_type or "Custom"
        if ptype.lower() not in ("custom", "default"):
            raise ValueError(f"policies[{i}].policyType {ptype!r} is not Custom or Default")
        ptype = ptype.capitalize()
        for j, raw in enumerate(policy.entries or ()):
            entries.append(_entry(raw, ptype, f"policies[{i}].entries[{j}]"))
    if not entries:
        raise ValueError("the ACL has no policy entry")
    return Acl(name, tuple(entries))


def to_acl_info(acl: Acl) -> AclInfo:
    by_type: dict[str, list[PolicyEntryInfo]] = {}
    for e in acl.entries:
        by_type.setdefault(e.policy_type, []).append(PolicyEntryInfo(
            resource=str(e.resource), actions=sorted(a.value for a in e.actions),
            source_ips=list(e.source_ips) or None, decision=e.decision.value))
    return AclInfo(subject=acl.subject, policies=[
        PolicyInfo(policy_type=t, entries=entries) for t, entries in sorted(by_type.items())])


def merge_policies(old: Acl | None, new: Acl) -> Acl:
    """``old`` with ``new``'s entries: one of the same policy type and resource replaces
    the old one, the others are added."""
    if old is None:
        return new
    replaced = {(e.policy_type, str(e.resource)) for e in new.entries}
    kept = [e for e in old.entries if (e.policy_type, str(e.resource)) not in replaced]
    return Acl(old.subject, (*kept, *new.entries))


def without_resource(acl: Acl, resource: str, policy_type: str | None) -> Acl | None:
    """``acl`` less its entries on ``resource`` (of ``policy_type`` when given); ``None``
    when nothing is left."""
    target = str(parse_resource(resource))
    kept = tuple(e for e in acl.entries if not (
        str(e.resource) == target
        and (policy_type is None or e.policy_type.lower() == policy_type.lower())))
    return Acl(acl.subject, kept) if kept else None


def mentions(acl: Acl, resource_filter: str) -> bool:
    """Whether some entry's resource text contains ``resource_filter``."""
    return any(resource_filter in str(e.resource) for e in acl.entries)
