"""ACL 2.0 administration (RocketMQ 5.3's codes): AUTH_CREATE_USER (3001),
AUTH_UPDATE_USER (3002), AUTH_DELETE_USER (3003), AUTH_GET_USER (3004), AUTH_LIST_USER
(3005), AUTH_CREATE_ACL (3006), AUTH_UPDATE_ACL (3007), AUTH_DELETE_ACL (3008),
AUTH_GET_ACL (3009), AUTH_LIST_ACL (3010), over the broker's
:class:`~tidemq.broker.auth_store.AuthStore`; and TideMQ's GET_AUTH_METADATA (20300),
every user with its password and every ACL, which a replica copies from its master.

Headers and bodies are upstream's (:mod:`tidemq.codec.headers`,
:mod:`tidemq.codec.auth_bodies`): ``username`` with a UserInfo body; ``subject`` with an
AclInfo body; AUTH_DELETE_ACL's optional ``resource`` and ``policyType`` delete only those
entries; the list codes filter by ``filter`` / ``subjectFilter`` / ``resourceFilter``
(substrings) and answer a JSON array. User answers leave the password out (upstream
returns it; a listing is no place for secrets). With the ACL on, every code is
administrative (:mod:`tidemq.net.acl.table`).
"""

from __future__ import annotations

import logging

from tidemq.broker.auth_store import AuthStore
from tidemq.broker.processors.decode import decoded, parse_header
from tidemq.codec.auth_bodies import (
    AclInfo,
    UserInfo,
    decode_auth,
    encode_auth,
    encode_auth_list,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)
from tidemq.errors import ResponseCode, error_for_code
from tidemq.net import Connection
from tidemq.net.acl.policy import parse_user

__all__ = ["AuthProcessor"]

log = logging.getLogger(__name__)


class AuthProcessor:
    def __init__(self, store: AuthStore) -> None:
        self.store = store

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.AUTH_CREATE_USER, self.create_user)
        reg(RequestCode.AUTH_UPDATE_USER, self.update_user)
        reg(RequestCode.AUTH_DELETE_USER, self.delete_user)
        reg(RequestCode.AUTH_GET_USER, self.get_user)
        reg(RequestCode.AUTH_LIST_USER, self.list_users)
        reg(RequestCode.AUTH_CREATE_ACL, self.create_acl)
        reg(RequestCode.AUTH_UPDATE_ACL, self.update_acl)
        reg(RequestCode.AUTH_DELETE_ACL, self.delete_acl)
        reg(RequestCode.AUTH_GET_ACL, self.get_acl)
        reg(RequestCode.AUTH_LIST_ACL, self.list_acls)
        reg(RequestCode.GET_AUTH_METADATA, self.metadata)

    # ------------------------------------------------------------------ users

    def create_user(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(UserRequestHeader, cmd)
        info = decoded(lambda: decode_auth(cmd.full_body(), UserInfo))
        try:
            user = parse_user(info, username=h.username)
        except ValueError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        self.store.create_user(user)
        log.info("user %s (%s) created, from %s", user.username, user.user_type.value,
                 conn.remote_address)
        return cmd.response()

    def update_user(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(UserRequestHeader, cmd)
        info = decoded(lambda: decode_auth(cmd.full_body(), UserInfo))
        self.store.update_user(h.username, info)
        log.info("user %s updated, from %s", h.username, conn.remote_address)
        return cmd.response()

    def delete_user(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(UserRequestHeader, cmd)
        self.store.delete_user(h.username)
        log.info("user %s deleted, from %s", h.username, conn.remote_address)
        return cmd.response()

    def get_user(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(UserRequestHeader, cmd)
        return cmd.response(body=encode_auth(self.store.get_user(h.username)))

    def list_users(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(ListUsersRequestHeader, cmd)
        return cmd.response(body=encode_auth_list(self.store.list_users(h.filter)))

    # ------------------------------------------------------------------ ACLs

    def _put_acl(self, conn: Connection, cmd: RemotingCommand, *, create: bool
                 ) -> RemotingCommand:
        h = parse_header(AclRequestHeader, cmd)
        info = decoded(lambda: decode_auth(cmd.full_body(), AclInfo))
        acl = self.store.put_acl(h.subject, info, create=create)
        log.info("ACL of %s %s (%d entries), from %s", acl.subject,
                 "created" if create else "updated", len(acl.entries), conn.remote_address)
        return cmd.response()

    def create_acl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._put_acl(conn, cmd, create=True)

    def update_acl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._put_acl(conn, cmd, create=False)

    def delete_acl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(DeleteAclRequestHeader, cmd)
        self.store.delete_acl(h.subject, h.resource, h.policy_type)
        log.info("ACL of %s: %s deleted, from %s", h.subject, h.resource or "every entry",
                 conn.remote_address)
        return cmd.response()

    def get_acl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(AclRequestHeader, cmd)
        return cmd.response(body=encode_auth(self.store.get_acl(h.subject)))

    def metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.store.snapshot())

    def list_acls(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(ListAclsRequestHeader, cmd)
        return cmd.response(body=encode_auth_list(
            self.store.list_acls(h.subject_filter, h.resource_filter)))
