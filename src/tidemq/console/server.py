"""ConsoleServer: the web console served by uvicorn on the running event loop.

::

    console = ConsoleServer("127.0.0.1:9876", host="127.0.0.1", port=8080)
    await console.start()        # binds (port 0: any free port), connects the admin client
    ...
    await console.stop()

It shares the loop with whatever else runs there (``tidemq standalone`` runs it beside
the name server and the broker). uvicorn's startup, main loop and shutdown are driven
directly, leaving out its signal handling: the process that owns the loop decides when
to stop.

Who may use it: with ``consoleUsersFile`` set, users log in; without, nobody does and
everyone may change everything, so the console then refuses to start on an address
other machines reach unless ``consoleAllowAnonymous`` says so. Start-up logs which of
the three it is.

Given ``https`` (a :class:`~tidemq.net.tls.ServerTlsContext`; the command line builds
it from ``--https-cert`` and ``--https-key``), the console is served over HTTPS only and
follows the certificate and key files: a renewed pair is served to the next connection,
open ones keep theirs. ``client`` is the admin client's config (name servers with TLS or
an ACL need it; by default the environment's settings apply).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Sequence

import uvicorn

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.acl_logins import acl_logins
from tidemq.console.acl_users import AclUsers
from tidemq.console.app import Console, create_app
from tidemq.console.config import ConsoleConfig
from tidemq.console.head_deadline import HeadDeadlineProtocol
from tidemq.console.hosts import is_loopback
from tidemq.console.users import UserDirectory, UsersFile
from tidemq.errors import ConfigError
from tidemq.net.tls import ServerTlsContext

__all__ = ["ConsoleServer", "check_exposure", "users_of"]

log = logging.getLogger(__name__)


def users_of(config: ConsoleConfig, admin: AdminClient | None = None
             ) -> UserDirectory | None:
    """The users of ``consoleUsersFile``, or the ACL 2.0 users read through ``admin``
    (``consoleUsersFromAcl``; None without ``admin``); None when neither is set. Raises
    :class:`ConfigError` when the file does not read."""
    if config.users_file:
        return UsersFile(config.users_file)
    if config.users_from_acl and admin is not None:
        return AclUsers(functools.partial(acl_logins, admin, config.acl_broker or None),
                        refresh=config.acl_refresh)
    return None


def check_exposure(host: str, config: ConsoleConfig, users: UserDirectory | None) -> None:
    """Refuse an anonymous console bound beyond loopback, unless the config allows it."""
    if (users is None and not config.users_from_acl and not is_loopback(host)
            and not config.allow_anonymous):
        raise ConfigError(
            f"the web console would listen on {host} with no users: anyone who reaches "
            "it could change the cluster. Add users (tidemq console user add, then "
            "consoleUsersFile / --users-file), bind 127.0.0.1, or allow it explicitly "
            "(consoleAllowAnonymous=true, --allow-anonymous)", key="consoleUsersFile")


class ConsoleServer:
    """The console on ``host:port`` for the cluster behind ``namesrv``."""

    def __init__(self, namesrv: str | Sequence[str], *, host: str = "127.0.0.1",
                 port: int = 8080, config: ConsoleConfig | None = None,
                 users: UserDirectory | None = None, https: ServerTlsContext | None = None,
                 client: ClientConfig | None = None) -> None:
        """``users``: where users come from; by default the ``consoleUsersFile`` of
        ``config``, if any. Raises :class:`ConfigError` for a users file that does not
        read, and for an anonymous console bound beyond loopback."""
        config = config or ConsoleConfig()
        self.admin = AdminClient(namesrv, config=client)
        if users is None:
            users = users_of(config, self.admin)
        check_exposure(host, config, users)
        #: The users read from the ACL (``consoleUsersFromAcl``), refreshed while it runs.
        self.acl_users = users if isinstance(users, AclUsers) else None
        #: The HTTPS certificate and key, followed while serving; ``None``: plain HTTP.
        self.https = https
        self.console = Console(self.admin, config, users)
        self.app = create_app(self.console, host)
        self.host = host
        self._requested_port = port
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.https is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        await self.admin.start()
        if self.acl_users is not None:
            await self.acl_users.start()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._requested_port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            if self.acl_users is not None:
                await self.acl_users.stop()
            await self.admin.close()
            raise
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, lifespan="off", ws="none", http=HeadDeadlineProtocol,
                                access_log=False, log_config=None, server_header=False)
        config.load()
        # uvicorn's create_server takes the context as it is
        config.ssl = self.https.handshake_context() if self.https is not None else None
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])  # listening once this returns
        self._server = server
        self._task = asyncio.create_task(self._serve(server, sock), name="tidemq-console")
        self.console.sampler.start()
        if self.console.auth.logins:
            cfg = self.console.config
            log.info("console on %s: users log in (%s)", self.url,
                     cfg.users_file or ("the ACL 2.0 users of "
                                        + (cfg.acl_broker or "the first master broker"))
                     if cfg.users_file or cfg.users_from_acl else "users given by the embedder")
        elif is_loopback(self.host):
            log.info("console on %s: no users configured, so no login (this machine only)",
                     self.url)
        else:
            log.warning("console on %s: no users configured and consoleAllowAnonymous set: "
                        "anyone who reaches it can change the cluster, with no login",
                        self.url)

    @staticmethod
    async def _serve(server: uvicorn.Server, sock: socket.socket) -> None:
        await server.main_loop()
        await server.shutdown(sockets=[sock])

    async def stop(self) -> None:
        server, task, self._server, self._task = self._server, self._task, None, None
        if server is not None and task is not None:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.acl_users is not None:
            await self.acl_users.stop()
        await self.console.close()
        await self.admin.close()

    async def __aenter__(self) -> ConsoleServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
