"""A broker's ACL 2.0 users as logins for another service (the web console): read whole
from one broker with GET_AUTH_METADATA (20300, the copy a replica takes of its master's
users and ACLs; it needs an administrator), reduced to what a login needs.

A disabled user is left out. A user is an administrator as the broker decides its
administrative requests: a ``Super`` user, or one whose ACL allows ``Update`` on
``Cluster:<the broker's cluster>`` (or ``Cluster:*``) from anywhere (an entry limited to
source IPs does not count: a login does not come from the broker's clients' addresses).
"""

from __future__ import annotations

import dataclasses

from tidemq.client.admin import AdminClient
from tidemq.client.errors import NoRouteError
from tidemq.codec.auth_bodies import AuthMetadata, decode_auth
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.net.acl.policy import (
    Action,
    Decision,
    ResourceType,
    UserType,
    decide,
    parse_acl_info,
    parse_user,
    subject_of,
)

__all__ = ["AclLogin", "acl_logins", "first_master"]

#: The "address" a login's decisions are made for: no source IP matches it.
_NOWHERE = ""


@dataclasses.dataclass(frozen=True, slots=True)
class AclLogin:
    name: str
    password: str = dataclasses.field(repr=False)
    admin: bool


async def first_master(admin: AdminClient) -> tuple[str, str]:
    """(address, cluster) of the master of the first broker name, clusters and names in
    sorted order; raises :class:`NoRouteError` when there is none."""
    found = (await admin.cluster_info()).first_master()
    if found is None:
        raise NoRouteError("", "no master broker is registered with the name servers")
    return found


async def acl_logins(admin: AdminClient, broker_addr: str | None = None) -> list[AclLogin]:
    """The enabled users of ``broker_addr`` (default: :func:`first_master`), sorted by
    name. Raises the error the broker's answer stands for (NO_PERMISSION when the
    client's account is not an administrator), or ``ValueError`` for a body that does
    not read."""
    if broker_addr:
        addr, cluster = broker_addr, (await admin.cluster_info()).cluster_of(broker_addr)
    else:
        addr, cluster = await first_master(admin)
    response = await admin.request(addr, RemotingCommand.request(
        RequestCode.GET_AUTH_METADATA))
    doc = decode_auth(response.full_body(), AuthMetadata)
    acls = {acl.subject: acl for acl in map(parse_acl_info, doc.acls)}
    out = []
    for user in sorted(map(parse_user, doc.users), key=lambda u: u.username):
        if not user.enabled:
            continue
        acl = acls.get(subject_of(user.username))
        is_admin = user.user_type is UserType.SUPER or decide(
            acl, ResourceType.CLUSTER, cluster, Action.UPDATE, _NOWHERE) is Decision.ALLOW
        out.append(AclLogin(user.username, user.password, is_admin))
    return out
