"""The broker's ACL 2.0 users and ACLs, kept durably: ``config/users.json`` (a JSON array
of UserInfo, passwords included) and ``config/acls.json`` (a JSON array of AclInfo), the
bodies of :mod:`tidemq.codec.auth_bodies`. Each change is decided on a copy, written
whole and atomically (temporary file, fsync, rename), and only then takes effect and is
answered, so an acknowledged change survives ``kill -9``; a failed write changes nothing.

Passwords are stored as given: a request's signature is an HMAC keyed by the password,
so the broker needs it, as upstream's store does. Keep the ``config`` directory readable
by the broker's user only.

Errors are :class:`~tidemq.errors.BrokerResponseError`: INVALID_PARAMETER for what a
request got wrong (a user that exists already, an ACL for an unknown user, more than
:data:`MAX_USERS` users or :data:`MAX_ENTRIES` entries in one ACL: the store stays
bounded whoever writes), QUERY_NOT_FOUND for a user or ACL that does not exist.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tidemq.codec.auth_bodies import (
    AclInfo,
    AuthMetadata,
    UserInfo,
    decode_auth,
    decode_auth_list,
    encode_auth,
    encode_auth_list,
)
from tidemq.errors import ConfigError, RemoteProtocolError, ResponseCode, error_for_code
from tidemq.net.acl.policy import (
    Acl,
    User,
    mentions,
    merge_policies,
    parse_acl_info,
    parse_user,
    subject_of,
    to_acl_info,
    to_user_info,
    without_resource,
)
from tidemq.store.checkpoint import atomic_write

__all__ = ["MAX_ENTRIES", "MAX_USERS", "AuthStore"]

#: Users at most (an ACL needs its user, so ACLs are bounded too).
MAX_USERS = 100_000
#: Policy entries of one ACL at most.
MAX_ENTRIES = 1000

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class AuthStore:
    """Users by name and ACLs by subject; the gate's
    :class:`~tidemq.net.acl.users.UserSource`."""

    def __init__(self, config_dir: Path) -> None:
        self.users_path = config_dir / "users.json"
        self.acls_path = config_dir / "acls.json"
        self._users: dict[str, User] = {}
        self._acls: dict[str, Acl] = {}
        self._lock = threading.Lock()
        self._version = 0

    def load(self) -> None:
        """Read both files (missing ones are empty); a file that does not read stops the
        start with an error naming it."""
        users: dict[str, User] = {}
        acls: dict[str, Acl] = {}
        try:
            if self.users_path.exists():
                for info in decode_auth_list(self.users_path.read_bytes(), UserInfo):
                    user = parse_user(info)
                    users[user.username] = user
            if self.acls_path.exists():
                for acl_info in decode_auth_list(self.acls_path.read_bytes(), AclInfo):
                    acl = parse_acl_info(acl_info)
                    acls[acl.subject] = acl
        except (OSError, ValueError, RemoteProtocolError) as exc:
            raise ConfigError(f"the ACL 2.0 store in {self.users_path.parent} does not "
                              f"read: {exc}", key="authenticationEnabled") from None
        self._users, self._acls = users, acls
        self._version += 1
        log.info("ACL 2.0 store: %d users, %d ACLs", len(users), len(acls))

    # ------------------------------------------------------------------ UserSource

    def user(self, username: str) -> User | None:
        return self._users.get(username)

    def acl_of(self, username: str) -> Acl | None:
        return self._acls.get(subject_of(username))

    @property
    def version(self) -> int:
        """Changes with every change of a user or an ACL."""
        return self._version

    # ------------------------------------------------------------------ users

    def create_user(self, user: User) -> None:
        with self._lock:
            if user.username in self._users:
                raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                     f"user {user.username} exists already")
            if len(self._users) >= MAX_USERS:
                raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                     f"this broker holds {MAX_USERS} users already")
            self._write_users({**self._users, user.username: user})

    def ensure_user(self, user: User) -> bool:
        """Create ``user`` unless a user of that name exists; whether it was created."""
        with self._lock:
            if user.username in self._users:
                return False
            self._write_users({**self._users, user.username: user})
            return True

    def update_user(self, username: str, info: UserInfo) -> User:
        with self._lock:
            old = self._existing(username)
            user = _parsed(lambda: parse_user(info, username=username, base=old))
            self._write_users({**self._users, username: user})
            return user

    def delete_user(self, username: str) -> None:
        """The user and its ACL."""
        with self._lock:
            self._existing(username)
            users = {n: u for n, u in self._users.items() if n != username}
            subject = subject_of(username)
            if subject in self._acls:
                self._write_acls({s: a for s, a in self._acls.items() if s != subject})
            self._write_users(users)

    def get_user(self, username: str) -> UserInfo:
        return to_user_info(self._existing(username))

    def list_users(self, contains: str | None) -> list[UserInfo]:
        return [to_user_info(u) for n, u in sorted(self._users.items())
                if not contains or contains in n]

    # ------------------------------------------------------------------ ACLs

    def put_acl(self, subject: str, info: AclInfo, *, create: bool) -> Acl:
        """createAcl (``create``) or updateAcl: the entries of ``info`` merged into the
        subject's ACL (:func:`~tidemq.net.acl.policy.merge_policies`)."""
        with self._lock:
            new = _parsed(lambda: parse_acl_info(info, subject=subject))
            username = new.subject.removeprefix("User:")
            if username not in self._users:
                raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                     f"subject {new.subject}: no user {username}")
            old = self._acls.get(new.subject)
            if old is None and not create:
                raise error_for_code(ResponseCode.QUERY_NOT_FOUND,
                                     f"no ACL for {new.subject} (createAcl makes one)")
            acl = merge_policies(old, new)
            if len(acl.entries) > MAX_ENTRIES:
                raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                     f"the ACL of {acl.subject} would hold "
                                     f"{len(acl.entries)} entries; at most {MAX_ENTRIES}")
            self._write_acls({**self._acls, acl.subject: acl})
            return acl

    def delete_acl(self, subject: str, resource: str | None, policy_type: str | None) -> None:
        with self._lock:
            acl = self._acls.get(subject)
            if acl is None:
                raise error_for_code(ResponseCode.QUERY_NOT_FOUND, f"no ACL for {subject}")
            rest = None if not resource else _parsed(
                lambda: without_resource(acl, resource, policy_type))
            acls = {s: a for s, a in self._acls.items() if s != subject}
            if rest is not None:
                acls[subject] = rest
            self._write_acls(acls)

    def get_acl(self, subject: str) -> AclInfo:
        acl = self._acls.get(subject)
        if acl is None:
            raise error_for_code(ResponseCode.QUERY_NOT_FOUND, f"no ACL for {subject}")
        return to_acl_info(acl)

    def list_acls(self, subject_filter: str | None, resource_filter: str | None
                  ) -> list[AclInfo]:
        return [to_acl_info(a) for s, a in sorted(self._acls.items())
                if (not subject_filter or subject_filter in s)
                and (not resource_filter or mentions(a, resource_filter))]

    # ------------------------------------------------------------------ replication

    def snapshot(self) -> bytes:
        """Every user (with its password) and ACL: what a replica copies."""
        return encode_auth(AuthMetadata(
            users=[to_user_info(u, with_password=True) for _, u in sorted(self._users.items())],
            acls=[to_acl_info(a) for _, a in sorted(self._acls.items())]))

    def replace(self, data: bytes) -> bool:
        """Take a master's :meth:`snapshot` whole; whether anything changed. Raises
        ``ValueError`` or ``RemoteProtocolError`` for one that does not read (nothing
        changes then)."""
        doc = decode_auth(data, AuthMetadata)
        users = {u.username: u for u in map(parse_user, doc.users)}
        acls = {a.subject: a for a in map(parse_acl_info, doc.acls)}
        with self._lock:
            changed = False
            if users != self._users:
                self._write_users(users)
                changed = True
            if acls != self._acls:
                self._write_acls(acls)
                changed = True
            return changed

    # ------------------------------------------------------------------ internals

    def _existing(self, username: str) -> User:
        user = self._users.get(username)
        if user is None:
            raise error_for_code(ResponseCode.QUERY_NOT_FOUND, f"no user {username}")
        return user

    def _write_users(self, users: dict[str, User]) -> None:
        self.users_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.users_path, encode_auth_list(
            [to_user_info(u, with_password=True) for _, u in sorted(users.items())]))
        self._users = users
        self._version += 1

    def _write_acls(self, acls: dict[str, Acl]) -> None:
        self.acls_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.acls_path, encode_auth_list(
            [to_acl_info(a) for _, a in sorted(acls.items())]))
        self._acls = acls
        self._version += 1


def _parsed(parse: Callable[[], _T]) -> _T:
    try:
        return parse()
    except ValueError as exc:
        raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
