"""Users and ACLs copied from one broker to another, as mqadmin's ``copyUser`` and
``copyAcl`` do: each one the source has (or each one named) is created on the target,
or updated there when the target has it already.

==================  ==========================================================
operation           requests
==================  ==========================================================
copy_users          20300 GET_AUTH_METADATA on the source (users with their
                    passwords: a TideMQ broker's 3004/3005 answers leave them out),
                    then 3004 AUTH_GET_USER and 3001 AUTH_CREATE_USER or
                    3002 AUTH_UPDATE_USER on the target
copy_acls           3010 AUTH_LIST_ACL or 3009 AUTH_GET_ACL on the source, then 3009
                    and 3006 AUTH_CREATE_ACL or 3007 AUTH_UPDATE_ACL on the target
==================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Sequence

from tidemq.client.admin import AdminClient
from tidemq.codec.auth_bodies import (
    AclInfo,
    AuthMetadata,
    UserInfo,
    decode_auth,
    decode_auth_list,
    encode_auth,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    AclRequestHeader,
    ListAclsRequestHeader,
    UserRequestHeader,
)
from tidemq.errors import ResponseCode, error_for_code

__all__ = ["copy_acls", "copy_users"]


async def _found(admin: AdminClient, addr: str, cmd: RemotingCommand) -> bytes | None:
    """The body of ``cmd``'s answer; ``None`` when the broker has no such user or ACL."""
    response = await admin.instance.request(addr, cmd)
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(response.code, response.remark or "", address=addr)
    return response.full_body()


async def _put(admin: AdminClient, target: str, ext: dict[str, str], body: bytes,
               get: RequestCode, create: RequestCode, update: RequestCode) -> None:
    """One user or ACL (its header ``ext``, its ``body``) created on ``target``, or
    updated there when ``get`` finds it already."""
    exists = await _found(admin, target, RemotingCommand.request(get, dict(ext))) is not None
    await admin.request(target, RemotingCommand.request(update if exists else create, ext,
                                                        body))


async def _source_users(admin: AdminClient, source: str, usernames: Sequence[str]
                        ) -> list[UserInfo]:
    response = await admin.request(source, RemotingCommand.request(
        RequestCode.GET_AUTH_METADATA))
    users = decode_auth(response.full_body(), AuthMetadata).users
    return [u for u in users if not usernames or u.username in usernames]


async def copy_users(admin: AdminClient, source: str, target: str,
                     usernames: Sequence[str] = ()) -> list[str]:
    """Copy the users of broker ``source`` (only ``usernames``, when given; a name the
    source lacks is skipped) to broker ``target``; the names copied, in order."""
    copied = []
    for user in await _source_users(admin, source, usernames):
        name = user.username or ""
        if not user.password:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"user {name} of {source} came without its password: not "
                                 "copied (it would have none on the target)", address=source)
        await _put(admin, target, UserRequestHeader(username=name).to_ext(),
                   encode_auth(user), RequestCode.AUTH_GET_USER,
                   RequestCode.AUTH_CREATE_USER, RequestCode.AUTH_UPDATE_USER)
        copied.append(name)
    return copied


async def copy_acls(admin: AdminClient, source: str, target: str,
                    subjects: Sequence[str] = ()) -> list[str]:
    """Copy the ACLs of broker ``source`` (only those of ``subjects``, when given; a
    subject the source has no ACL for is skipped) to broker ``target``; the subjects
    copied, in order."""
    acls: list[AclInfo] = []
    if subjects:
        for subject in subjects:
            raw = await _found(admin, source, RemotingCommand.request(
                RequestCode.AUTH_GET_ACL, AclRequestHeader(subject=subject).to_ext()))
            if raw is not None:
                acls.append(decode_auth(raw, AclInfo))
    else:
        ext = ListAclsRequestHeader(subject_filter=None, resource_filter=None).to_ext()
        body = await admin.request(source, RemotingCommand.request(
            RequestCode.AUTH_LIST_ACL, ext))
        acls = decode_auth_list(body.full_body(), AclInfo)
    copied = []
    for acl in acls:
        subject = acl.subject or ""
        await _put(admin, target, AclRequestHeader(subject=subject).to_ext(),
                   encode_auth(acl), RequestCode.AUTH_GET_ACL,
                   RequestCode.AUTH_CREATE_ACL, RequestCode.AUTH_UPDATE_ACL)
        copied.append(subject)
    return copied
