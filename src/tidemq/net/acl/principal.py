"""Who a request acts as, whichever ACL model the server runs: the gate
(:mod:`tidemq.net.acl.gate`) asks a :class:`Directory` for the :class:`Principal` its
AccessKey names and the principal what it may do, so both models go through one gate and
one permission table.

* ACL 1.0: the directory is the ``plain_acl.yml`` (:class:`~tidemq.net.acl.accounts.AclFile`),
  a principal an account (:class:`~tidemq.net.acl.accounts.Account`).
* ACL 2.0: the directory is the broker's users and ACLs
  (:class:`~tidemq.net.acl.users.UserDirectory`), a principal a user with its ACL.
"""

from __future__ import annotations

from typing import Protocol

from tidemq.net.acl.perm import Perm

__all__ = ["Directory", "Principal"]


class Principal(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def secret(self) -> str:
        """What its requests are signed with."""
        ...

    def unusable(self) -> str | None:
        """Why it may not be used at all (a disabled user), or ``None``."""
        ...

    def trusted_from(self, remote: str) -> bool:
        """Whether requests from ``remote`` pass without signature or permission checks."""
        ...

    def is_admin(self, remote: str) -> bool:
        """Whether it may make administrative requests."""
        ...

    def not_admin(self, remote: str) -> str:
        """What an administrative request needs and why this principal lacks it, in its
        ACL model's words, for the refusal's remark (``is_admin`` said no)."""
        ...

    def may(self, kind: str, name: str, needed: Perm, remote: str) -> bool:
        """Whether it holds ``needed`` (PUB, SUB) on ``kind`` (``topic``/``group``)
        ``name``."""
        ...


class Directory(Protocol):
    def trusted_address(self, remote: str) -> bool:
        """Whether ``remote`` passes without credentials."""
        ...

    def principal(self, access_key: str) -> Principal | None: ...

    def unknown(self, access_key: str) -> str:
        """Why no principal has ``access_key``, for the refusal's remark."""
        ...

    @property
    def version(self) -> int:
        """Changes whenever what a principal may do may have changed (the gate forgets
        its decisions then)."""
        ...
