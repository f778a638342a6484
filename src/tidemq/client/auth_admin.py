"""ACL 2.0 administration (RocketMQ 5.3's AUTH_* codes) as mqadmin does it: each
operation goes to one broker (``broker_addr``) or to every master of a cluster
(``cluster``; default: of every cluster), since each broker keeps its own users and
ACLs.

==================  ==========================================================
operation           request
==================  ==========================================================
create_user         3001 AUTH_CREATE_USER (header ``username``, body UserInfo)
update_user         3002 AUTH_UPDATE_USER
delete_user         3003 AUTH_DELETE_USER
get_user            3004 AUTH_GET_USER (answer: UserInfo)
list_users          3005 AUTH_LIST_USER (``filter``; answer: list of UserInfo)
create_acl          3006 AUTH_CREATE_ACL (header ``subject``, body AclInfo)
update_acl          3007 AUTH_UPDATE_ACL
delete_acl          3008 AUTH_DELETE_ACL (``subject``, optional ``resource``)
get_acl             3009 AUTH_GET_ACL (answer: AclInfo)
list_acls           3010 AUTH_LIST_ACL (``subjectFilter``, ``resourceFilter``)
==================  ==========================================================

Answers of reads are by broker address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tidemq.client.admin import AdminClient
from tidemq.client.errors import NoRouteError
from tidemq.codec.auth_bodies import (
    AclInfo,
    PolicyEntryInfo,
    PolicyInfo,
    UserInfo,
    decode_auth,
    decode_auth_list,
    encode_auth,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)

__all__ = ["AuthAdmin"]


class AuthAdmin:
    def __init__(self, admin: AdminClient, *, broker_addr: str | None = None,
                 cluster: str | None = None) -> None:
        self.admin = admin
        self.broker_addr = broker_addr
        self.cluster = cluster

    async def targets(self) -> list[str]:
        if self.broker_addr:
            return [self.broker_addr]
        addrs = sorted((await self.admin.masters(self.cluster)).values())
        if not addrs:
            raise NoRouteError("", f"no master broker in cluster {self.cluster!r}")
        return addrs

    async def _each(self, code: int, ext: dict[str, str], body: bytes = b""
                    ) -> dict[str, RemotingCommand]:
        addrs = await self.targets()
        answers = await asyncio.gather(*(self.admin.request(a, RemotingCommand.request(
            code, dict(ext), body)) for a in addrs), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        return dict(zip(addrs, answers, strict=True))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ users

    async def create_user(self, username: str, password: str, user_type: str = "Normal"
                          ) -> list[str]:
        body = encode_auth(UserInfo(username=username, password=password, user_type=user_type))
        return list(await self._each(RequestCode.AUTH_CREATE_USER,
                                     UserRequestHeader(username=username).to_ext(), body))

    async def update_user(self, username: str, *, password: str | None = None,
                          user_type: str | None = None, user_status: str | None = None
                          ) -> list[str]:
        body = encode_auth(UserInfo(username=username, password=password, user_type=user_type,
                                    user_status=user_status))
        return list(await self._each(RequestCode.AUTH_UPDATE_USER,
                                     UserRequestHeader(username=username).to_ext(), body))

    async def delete_user(self, username: str) -> list[str]:
        return list(await self._each(RequestCode.AUTH_DELETE_USER,
                                     UserRequestHeader(username=username).to_ext()))

    async def get_user(self, username: str) -> dict[str, UserInfo]:
        answers = await self._each(RequestCode.AUTH_GET_USER,
                                   UserRequestHeader(username=username).to_ext())
        return {a: decode_auth(r.full_body(), UserInfo) for a, r in answers.items()}

    async def list_users(self, contains: str | None = None) -> dict[str, list[UserInfo]]:
        answers = await self._each(RequestCode.AUTH_LIST_USER,
                                   ListUsersRequestHeader(filter=contains).to_ext())
        return {a: decode_auth_list(r.full_body(), UserInfo) for a, r in answers.items()}

    # ------------------------------------------------------------------ ACLs

    async def _put_acl(self, code: int, subject: str, resources: Sequence[str],
                       actions: Sequence[str], source_ips: Sequence[str], decision: str
                       ) -> list[str]:
        info = AclInfo(subject=subject, policies=[_policy(resources, actions, source_ips,
                                                          decision)])
        return list(await self._each(code, AclRequestHeader(subject=subject).to_ext(),
                                     encode_auth(info)))

    async def create_acl(self, subject: str, resources: Sequence[str], actions: Sequence[str],
                         source_ips: Sequence[str] = (), decision: str = "Allow") -> list[str]:
        return await self._put_acl(RequestCode.AUTH_CREATE_ACL, subject, resources, actions,
                                   source_ips, decision)

    async def update_acl(self, subject: str, resources: Sequence[str], actions: Sequence[str],
                         source_ips: Sequence[str] = (), decision: str = "Allow") -> list[str]:
        return await self._put_acl(RequestCode.AUTH_UPDATE_ACL, subject, resources, actions,
                                   source_ips, decision)

    async def delete_acl(self, subject: str, resource: str | None = None) -> list[str]:
        ext = DeleteAclRequestHeader(subject=subject, resource=resource).to_ext()
        return list(await self._each(RequestCode.AUTH_DELETE_ACL, ext))

    async def get_acl(self, subject: str) -> dict[str, AclInfo]:
        answers = await self._each(RequestCode.AUTH_GET_ACL,
                                   AclRequestHeader(subject=subject).to_ext())
        return {a: decode_auth(r.full_body(), AclInfo) for a, r in answers.items()}

    async def list_acls(self, subject_filter: str | None = None,
                        resource_filter: str | None = None) -> dict[str, list[AclInfo]]:
        ext = ListAclsRequestHeader(subject_filter=subject_filter,
                                    resource_filter=resource_filter).to_ext()
        answers = await self._each(RequestCode.AUTH_LIST_ACL, ext)
        return {a: decode_auth_list(r.full_body(), AclInfo) for a, r in answers.items()}


def _policy(resources: Sequence[str], actions: Sequence[str], source_ips: Sequence[str],
            decision: str) -> PolicyInfo:
    return PolicyInfo(policy_type="Custom", entries=[
        PolicyEntryInfo(resource=r, actions=list(actions), source_ips=list(source_ips) or None,
                        decision=decision) for r in resources])
