"""``migrateAuthFromV1Enabled``: the accounts of a ``plain_acl.yml`` (ACL 1.0) as ACL 2.0
users and ACLs, deciding what the accounts decided.

An account becomes a ``Normal`` user of the same name whose password is its secret key,
with an ACL:

* ``admin: true``: an Allow of ``Update`` on ``Cluster:*`` (administration, and no more:
  an ACL 1.0 admin account holds no topic or group by being admin);
* a default permission other than DENY: an Allow of its actions on ``Topic:*`` /
  ``Group:*``;
* each listed topic or group: an Allow of the listed actions, and a Deny of the actions
  the default allows but the entry does not -- since Deny wins, this is how a listed
  ``SUB`` narrows a ``PUB|SUB`` default, and a listed ``DENY`` denies both.

ACL 1.0's address trust (``whiteRemoteAddress``, ``globalWhiteRemoteAddresses``) has no
ACL 2.0 counterpart -- every request is signed -- and is not carried over.
"""

from __future__ import annotations

from tidemq.net.acl.accounts import Account, AclRules
from tidemq.net.acl.perm import Perm
from tidemq.net.acl.policy import (
    Acl,
    Action,
    Decision,
    PolicyEntry,
    Resource,
    ResourceType,
    User,
    subject_of,
)

__all__ = ["migrate_account", "migrate_rules"]

_ACTIONS = ((Perm.PUB, Action.PUB), (Perm.SUB, Action.SUB))


def _actions(perm: Perm) -> frozenset[Action]:
    """What ``perm`` grants (ACL 1.0's ``ANY`` alone grants neither PUB nor SUB)."""
    if perm & Perm.DENY:
        return frozenset()
    return frozenset(a for p, a in _ACTIONS if perm & p)


def _entries(rtype: ResourceType, default: Perm, listed: dict[str, Perm]
             ) -> list[PolicyEntry]:
    out: list[PolicyEntry] = []
    default_actions = _actions(default)
    if default_actions:
        out.append(PolicyEntry(Resource(rtype, any_name=True), default_actions,
                               Decision.ALLOW))
    for name, perm in sorted(listed.items()):
        allowed = _actions(perm)
        denied = frozenset({Action.PUB, Action.SUB}) - allowed
        if allowed:
            out.append(PolicyEntry(Resource(rtype, name), allowed, Decision.ALLOW))
        if denied & default_actions or (denied and not allowed):
            out.append(PolicyEntry(Resource(rtype, name), denied, Decision.DENY))
    return out


def migrate_account(account: Account) -> tuple[User, Acl | None]:
    entries = (_entries(ResourceType.TOPIC, account.default_topic_perm,
                        dict(account.topic_perms))
               + _entries(ResourceType.GROUP, account.default_group_perm,
                          dict(account.group_perms)))
    if account.admin:
        entries.append(PolicyEntry(Resource(ResourceType.CLUSTER, any_name=True),
                                   frozenset({Action.UPDATE}), Decision.ALLOW))
    acl = Acl(subject_of(account.access_key), tuple(entries)) if entries else None
    return User(account.access_key, account.secret_key), acl


def migrate_rules(rules: AclRules) -> list[tuple[User, Acl | None]]:
    return [migrate_account(a) for _, a in sorted(rules.accounts.items())]
