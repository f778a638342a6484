"""A copy of the brokers' ACL 2.0 users and ACLs, held by a server that keeps none of its
own -- a name server in its own process, a standalone controller -- with
``authenticationEnabled``: the gate's :class:`~tidemq.net.acl.users.UserSource`.

Every ``authMetadataRefreshSeconds`` it asks one broker for all of them with
GET_AUTH_METADATA (20300, the request a replica copies its master's users with), signed
with ``innerClientAuthenticationCredentials`` (else ``initAuthenticationUser``): the
broker of ``authMetadataBroker``, else the master of the first broker name the server
knows (:class:`Brokers`: a name server's registrations, a controller's broker groups),
clusters and names in sorted order. The copy is held in memory only.

``initAuthenticationUser`` is a Super user known from the start, before any copy: the
brokers register with it, which is how the server learns where to ask. A user of the
same name in the copy replaces it. Before the first copy every other user is refused,
and the refusal's remark says that no copy was taken yet. A copy that fails (no broker
yet, a refusal, the broker unreachable) is logged and the previous one stays.

With ``authMetadataBroker`` set, :meth:`AuthMirror.copy_first` takes the first copy
before the server listens, so that a restart refuses nobody the previous run admitted
(unless that broker is down then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from tidemq.codec.auth_bodies import AuthMetadata, decode_auth
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.signature import Credentials
from tidemq.errors import RemoteProtocolError, TideMQError
from tidemq.net.acl.policy import Acl, User, UserType, parse_acl_info, parse_user, subject_of
from tidemq.net.acl.users import UserDirectory
from tidemq.net.client import RemotingClient
from tidemq.net.tasks import cancel_and_wait
from tidemq.net.tls import TlsClientSettings

__all__ = ["NOT_COPIED_YET", "AuthMirror", "Brokers", "CopyKeys"]

log = logging.getLogger(__name__)

#: The remark's note for an unknown user before the first copy.
NOT_COPIED_YET = ("the ACL 2.0 users have not been copied from a broker yet; only the "
                  "initial user is known until then")


class Brokers(Protocol):
    """The brokers a server knows, to copy the users from."""

    def first_master(self) -> tuple[str, str] | None:
        """(address, cluster) of the master of the first broker name, clusters and names
        in sorted order; ``None`` when there is none."""
        ...

    def cluster_of(self, addr: str) -> str:
        """The cluster of the broker at ``addr`` ("" when it is not known)."""
        ...


class CopyKeys(Protocol):
    """The keys of a config that copies the users (a name server's, a controller's)."""

    @property
    def authorization_enabled(self) -> bool: ...
    @property
    def auth_metadata_broker(self) -> str: ...
    @property
    def auth_metadata_refresh_seconds(self) -> float: ...
    @property
    def auth_credentials(self) -> tuple[str, str] | None: ...
    @property
    def init_user(self) -> tuple[str, str] | None: ...
    @property
    def tls_client(self) -> TlsClientSettings: ...


class AuthMirror:
    """See the module docstring. ``brokers``: where the brokers to ask are found."""

    def __init__(self, brokers: Callable[[], Brokers], *,
                 credentials: tuple[str, str], init_user: tuple[str, str] | None,
                 authorize: bool, broker: str = "", refresh: float = 5.0,
                 tls: TlsClientSettings | None = None) -> None:
        self._brokers = brokers
        self.broker = broker
        self.refresh_seconds = refresh
        self._client = RemotingClient(credentials=Credentials(*credentials), tls=tls,
                                      request_timeout=10.0)
        self._init = (User(init_user[0], init_user[1], UserType.SUPER)
                      if init_user is not None else None)
        self._users: dict[str, User] = {}
        self._acls: dict[str, Acl] = {}
        self._version = 0
        #: Where the last copy came from, or None before the first.
        self.source: str | None = None
        #: Copies taken.
        self.copies = 0
        #: The gate's directory over this copy.
        self.directory = UserDirectory(self, authorize=authorize, cluster="",
                                       incomplete=self._incomplete)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @classmethod
    def from_config(cls, config: CopyKeys, brokers: Callable[[], Brokers]) -> AuthMirror:
        credentials = config.auth_credentials
        if credentials is None:  # the configs refuse this (check_copy_keys)
            raise ValueError("copying the ACL 2.0 users needs credentials")
        return cls(brokers, credentials=credentials, init_user=config.init_user,
                   authorize=config.authorization_enabled,
                   broker=config.auth_metadata_broker,
                   refresh=config.auth_metadata_refresh_seconds, tls=config.tls_client)

    def _incomplete(self) -> str | None:
        return NOT_COPIED_YET if self.source is None else None

    # ------------------------------------------------------------------ UserSource

    def user(self, username: str) -> User | None:
        user = self._users.get(username)
        if user is None and self._init is not None and username == self._init.username:
            return self._init
        return user

    def acl_of(self, username: str) -> Acl | None:
        return self._acls.get(subject_of(username))

    @property
    def version(self) -> int:
        return self._version

    # ------------------------------------------------------------------ copying

    async def copy_once(self) -> bool:
        """Ask a broker for its users now; whether a copy was taken (a failure is logged
        and the previous copy stays)."""
        info = self._brokers()
        if self.broker:
            target: tuple[str, str] | None = (self.broker, info.cluster_of(self.broker))
        else:
            target = info.first_master()
        if target is None:
            log.debug("no broker registered yet to copy the ACL 2.0 users from")
            return False
        addr, cluster = target
        try:
            resp = await self._client.request(addr, RemotingCommand.request(
                RequestCode.GET_AUTH_METADATA))
            if resp.code != 0:
                raise TideMQError(f"answer {resp.code}: {resp.remark}")
            doc = decode_auth(resp.full_body(), AuthMetadata)
            users = {u.username: u for u in map(parse_user, doc.users)}
            acls = {a.subject: a for a in map(parse_acl_info, doc.acls)}
        except (TideMQError, OSError, ValueError, RemoteProtocolError) as exc:
            log.warning("ACL 2.0 users not copied from broker %s (%s); the previous copy "
                        "stays (%d users)", addr, exc, len(self._users))
            return False
        changed = (users != self._users or acls != self._acls
                   or cluster != self.directory.cluster)
        if changed:
            self._users, self._acls = users, acls
            self.directory.cluster = cluster
            self._version += 1
            log.info("ACL 2.0 users copied from broker %s: %d users, %d ACLs", addr,
                     len(users), len(acls))
        self.source = addr
        self.copies += 1
        return True

    async def copy_first(self, timeout: float = 5.0) -> bool:
        """With ``authMetadataBroker`` set, take a copy now, waiting at most ``timeout``
        seconds (a server calls it before it listens); whether one was taken."""
        if not self.broker:
            return False
        try:
            async with asyncio.timeout(timeout):
                return await self.copy_once()
        except TimeoutError:
            log.warning("ACL 2.0 users not copied from broker %s within %.0f s; serving "
                        "with the initial user only until a copy arrives", self.broker,
                        timeout)
            return False

    def wants_copy(self) -> bool:
        """Whether a copy is still missing something a registration may bring (no copy
        yet, or one taken before the source's cluster was known)."""
        return self.source is None or not self.directory.cluster

    def wake(self) -> None:
        """Copy now rather than at the next period (a broker registered, say)."""
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tidemq-auth-mirror")

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            await self.copy_once()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.refresh_seconds):
                    await self._wake.wait()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self._client.close()
