"""Console users from the cluster's ACL 2.0 users (``consoleUsersFromAcl=true``): a
:class:`~tidemq.console.users.UserDirectory` over the users one broker keeps
(:func:`tidemq.client.acl_logins.acl_logins`), read again every ``refresh`` seconds.

A user logs in with its name and its password (the secret its requests are signed
with); the password given and the one held are compared as SHA-256 digests in constant
time, and an unknown name costs the same compare. Super users, and users allowed
``Update`` on the broker's cluster, are console admins; every other enabled user is a
viewer; a disabled or removed user cannot log in, and its sessions end at the next
refresh, as do the sessions of a user whose password changed.

A refresh that fails (the broker unreachable, the console's account not an
administrator) is logged and the users read before stay; until one succeeds, nobody can
log in.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence

from tidemq.client.acl_logins import AclLogin
from tidemq.console.users import ConsoleUser, Role
from tidemq.errors import TideMQError
from tidemq.net.tasks import cancel_and_wait

__all__ = ["AclUsers"]

log = logging.getLogger(__name__)


def _names(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest()


class AclUsers:
    """See the module docstring. ``fetch``: the logins as they are now."""

    def __init__(self, fetch: Callable[[], Awaitable[Sequence[AclLogin]]], *,
                 refresh: float = 5.0) -> None:
        self._fetch = fetch
        self.refresh_seconds = refresh
        #: Name -> (user, digest of the password).
        self._users: dict[str, tuple[ConsoleUser, bytes]] = {}
        #: Keys the sessions' credential, so that it tells nothing of the password.
        self._session_key = secrets.token_bytes(32)
        self._dummy = _digest(secrets.token_hex(16))
        #: Refreshes that succeeded.
        self.refreshes = 0
        self._task: asyncio.Task[None] | None = None

    def _user(self, login: AclLogin) -> tuple[ConsoleUser, bytes]:
        digest = _digest(login.password)
        credential = hmac.new(self._session_key, login.name.encode() + b"\0" + digest,
                              hashlib.sha256).hexdigest()[:32]
        return (ConsoleUser(login.name, Role.ADMIN if login.admin else Role.VIEWER,
                            credential), digest)

    async def refresh(self) -> bool:
        """Read the users again; whether that worked (a failure is logged and the users
        read before stay)."""
        try:
            logins = await self._fetch()
        except (TideMQError, OSError, ValueError) as exc:
            log.error("console users from the ACL not read (%s); the %d users read before "
                      "stay", exc, len(self._users))
            return False
        users = {login.name: self._user(login) for login in logins}
        if users != self._users:
            old = self._users
            log.info("console users from the ACL: %d (%d admins); added: %s; changed: %s; "
                     "removed: %s", len(users),
                     sum(u.role is Role.ADMIN for u, _ in users.values()),
                     _names(n for n in users if n not in old),
                     _names(n for n in users if n in old and old[n] != users[n]),
                     _names(n for n in old if n not in users))
        self._users = users
        self.refreshes += 1
        return True

    async def start(self) -> None:
        """The first read (waited for), then one every ``refresh`` seconds."""
        await self.refresh()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tidemq-console-acl-users")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            await self.refresh()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    def names(self) -> list[str]:
        return sorted(self._users)

    # The console's UserDirectory (tidemq.console.users).

    def lookup(self, name: str) -> ConsoleUser | None:
        entry = self._users.get(name)
        return entry[0] if entry is not None else None

    def authenticate(self, name: str, password: str) -> ConsoleUser | None:
        entry = self._users.get(name)
        given = _digest(password)
        if entry is None:
            hmac.compare_digest(given, self._dummy)
            return None
        user, digest = entry
        return user if hmac.compare_digest(given, digest) else None
