"""``tidemq namesrv``, ``tidemq controller``, ``tidemq broker`` and ``tidemq standalone``: run
servers in the
foreground until SIGINT/SIGTERM, then shut down cleanly (the store writes its checkpoint
and removes its abort marker, so the next start skips crash recovery)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from tidemq.broker.gc_settings import tune_gc
from tidemq.cli.logs import LEVELS, setup_logging
from tidemq.cli.markup import escape, say
from tidemq.cli.stray_env import warn_stray_env
from tidemq.errors import TideMQError
from tidemq.net.bind import LOOPBACK, is_loopback, local_host, warn_if_exposed

if TYPE_CHECKING:
    from tidemq.broker.app import BrokerApp
    from tidemq.console import ConsoleServer
    from tidemq.console.config import ConsoleConfig
    from tidemq.net.acl.policy import Acl, User
    from tidemq.net.tls import ServerTlsContext

log = logging.getLogger("tidemq.cli")
#: What anyone who reaches the web console can do.
CONSOLE_REACH = ("see, send and delete topics and messages through it (no users are "
                 "configured, so it has no login)")
#: The keys the broker's metrics endpoint and the console's share.
METRICS_AUTH_KEYS = ("metricsAuthToken", "metricsAuthUser", "metricsAuthPassword")
#: The broker keys ``tidemq standalone`` sets from its flags, over its config file and the
#: ``TIDEMQ_*`` variables (``--set`` still wins): key -> where the value comes from.
STANDALONE_KEYS = {"listenPort": "--broker-port", "bindAddress": "--host",
                   "storePathRootDir": "--data", "namesrvAddr": "its own name server"}

ConfigOpt = Annotated[Path | None, typer.Option("-c", "--config", help=".properties file.")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="Override a key: --set listenPort=10911 (repeatable).")]
LogLevel = Annotated[str, typer.Option(help="Log level: DEBUG, INFO, WARNING, ERROR or CRITICAL.")]
LogFile = Annotated[Path | None, typer.Option(help="Also log to this rotating file.")]
LogFormat = Annotated[str, typer.Option(help="Log lines as 'text' or 'json' (one object a line).")]
HostOpt = Annotated[str | None, typer.Option(
    help="Address to listen on (bindAddress; default 127.0.0.1, this machine only; "
         "0.0.0.0: every interface, open to anyone unless aclEnable is on).")]

HttpsCert = Annotated[str, typer.Option(
    "--https-cert", envvar="TIDEMQ_CONSOLE_CERT", show_envvar=True,
    help="Serve the web console over HTTPS with this certificate (PEM; with --https-key).")]
HttpsKey = Annotated[str, typer.Option(
    "--https-key", envvar="TIDEMQ_CONSOLE_KEY", show_envvar=True,
    help="The HTTPS certificate's private key (PEM).")]


def https_context(cert: str, key: str) -> ServerTlsContext | None:
    """The web console's HTTPS certificate from its flags (``None``: plain HTTP), followed
    while it runs; a file that does not load raises ConfigError naming it."""
    if not cert and not key:
        return None
    if not cert or not key:
        raise typer.BadParameter("--https-cert and --https-key go together")
    from tidemq.net.tls import ServerTlsContext, TlsMode, TlsServerSettings

    return ServerTlsContext(TlsServerSettings(mode=TlsMode.ENFORCING, cert_path=cert,
                                              key_path=key))


def _overrides(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _report_unknown(unknown: list[str]) -> None:
    for key in unknown:
        say(f"[yellow]warning:[/] unknown configuration key {escape(repr(key))} (ignored)")


def tune_runtime() -> None:
    """Server processes allocate many short-lived objects: fewer young collections."""
    tune_gc()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()


async def _serve(start: Callable[[], Awaitable[Any]], stop: Callable[[], Awaitable[None]]) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    await start()
    try:
        await stopping.wait()
    finally:
        say("shutting down ...")
        await stop()


def _run(coro: Awaitable[None]) -> None:
    import asyncio  # here: a server's --help needs no event loop

    tune_runtime()
    try:
        asyncio.run(coro)  # type: ignore[arg-type]
    except TideMQError as exc:
        say(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    except OSError as exc:  # a port that cannot be bound, a store directory ...
        say(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None


def console_config(path: Path | None, overrides: dict[str, str], *,
                   users_file: Path | None = None, allow_anonymous: bool = False,
                   ) -> tuple[ConsoleConfig, list[str]]:
    """The console's settings: ``path``, ``TIDEMQ_*`` variables, ``overrides``, then
    the flags; the process ends with the error when one is wrong."""
    from tidemq.console.config import load_console_config

    if users_file is not None:
        overrides = {**overrides, "consoleUsersFile": str(users_file)}
    if allow_anonymous:
        overrides = {**overrides, "consoleAllowAnonymous": "true"}
    return _load(load_console_config, path, overrides)


def _console_keys(overrides: dict[str, str]) -> dict[str, str]:
    """The ``--set`` keys of ``tidemq standalone`` that are the console's."""
    from tidemq.console.config import ConsoleConfig
    from tidemq.formats.javaprops import config_keys

    keys = set(config_keys(ConsoleConfig))
    return {k: v for k, v in overrides.items() if k in keys}


def _with_host(host: str | None, overrides: dict[str, str]) -> dict[str, str]:
    """``--host`` as the ``bindAddress`` override (an explicit ``--set`` wins)."""
    return overrides if host is None else {"bindAddress": host, **overrides}


def namesrv(config: ConfigOpt = None, set_: SetOpt = None, host: HostOpt = None,
            log_level: LogLevel = "INFO", log_file: LogFile = None,
            log_format: LogFormat = "text") -> None:
    """Run a name server (on 127.0.0.1 unless --host or bindAddress says otherwise); with
    enableControllerInNamesrv=true it is also a controller (docs/replication.md)."""
    # each server's modules are imported by the commands that run it only
    from tidemq.namesrv import NameServerApp
    from tidemq.namesrv.config import load_namesrv_config
    from tidemq.namesrv.controller import ControllerApp, load_controller_config

    _setup_logging(log_level, log_file, log_format)
    warn_stray_env()
    overrides = _with_host(host, _overrides(set_))
    cfg, unknown = _load(load_namesrv_config, config, overrides)
    ccfg, controller_unknown = _load(
        functools.partial(load_controller_config, beside=cfg.data_dir), config, overrides)
    _report_unknown(sorted(set(unknown) & set(controller_unknown)))
    embedded = (_built(functools.partial(ControllerApp, ccfg))
                if ccfg.enable_controller_in_namesrv else None)
    app = _built(functools.partial(NameServerApp, cfg, controller=embedded))

    async def start() -> None:
        await app.start()
        say(f"name server listening on {app.address}")

    _run(_serve(start, app.stop))


def controller(config: ConfigOpt = None, set_: SetOpt = None, host: HostOpt = None,
               log_level: LogLevel = "INFO", log_file: LogFile = None,
               log_format: LogFormat = "text") -> None:
    """Run a standalone controller (controllerRaftPeers, controllerRaftSelfId, listenPort;
    see docs/replication.md)."""
    from tidemq.namesrv.controller import ControllerApp, load_controller_config

    _setup_logging(log_level, log_file, log_format)
    warn_stray_env()
    cfg, unknown = _load(load_controller_config, config, _with_host(host, _overrides(set_)))
    _report_unknown(unknown)
    if not cfg.controller_raft_peers:
        say("[red]error:[/] a controller needs controllerRaftPeers and controllerRaftSelfId")
        raise typer.Exit(1)
    app = _built(functools.partial(ControllerApp, cfg))

    async def start() -> None:
        await app.start()
        say(f"controller {cfg.controller_raft_self_id} listening on {app.address}, "
            f"Raft on {cfg.raft_address}")

    _run(_serve(start, app.stop))


def broker(config: ConfigOpt = None, set_: SetOpt = None, host: HostOpt = None,
           log_level: LogLevel = "INFO", log_file: LogFile = None,
           log_format: LogFormat = "text") -> None:
    """Run a broker (registers with the name servers in namesrvAddr; listens on 127.0.0.1
    unless --host or bindAddress says otherwise)."""
    from tidemq.broker.app import BrokerApp
    from tidemq.broker.config import load_broker_config

    _setup_logging(log_level, log_file, log_format)
    warn_stray_env()
    bcfg, scfg, unknown = _load(load_broker_config, config, _with_host(host, _overrides(set_)))
    _report_unknown(unknown)
    app = _built(functools.partial(BrokerApp, bcfg, scfg))

    async def start() -> None:
        await app.start()
        say(f"broker {escape(bcfg.broker_name)} serving on {app.broker_addr}, "
            f"store {escape(scfg.store_path_root_dir)}")

    _run(_serve(start, app.stop))


class _BrokerUsers:
    """The ACL 2.0 users of a standalone's broker, for its name server (none until the
    broker has started)."""

    def __init__(self, broker: Callable[[], BrokerApp | None]) -> None:
        self._broker = broker

    def user(self, username: str) -> User | None:
        app = self._broker()
        return None if app is None else app.auth_store.user(username)

    def acl_of(self, username: str) -> Acl | None:
        app = self._broker()
        return None if app is None else app.auth_store.acl_of(username)

    @property
    def version(self) -> int:
        app = self._broker()
        return -1 if app is None else app.auth_store.version


def standalone(
    data: Annotated[Path, typer.Option(help="Data directory.")] = Path("./data"),
    namesrv_port: Annotated[int, typer.Option(help="Name server port.")] = 9876,
    broker_port: Annotated[int, typer.Option(help="Broker port.")] = 10911,
    config: ConfigOpt = None, set_: SetOpt = None, log_level: LogLevel = "INFO",
    log_file: LogFile = None, log_format: LogFormat = "text",
    console_port: Annotated[int, typer.Option(help="Web console port.")] = 8080,
    no_console: Annotated[bool, typer.Option("--no-console", help="No web console.")] = False,
    console_cert: HttpsCert = "", console_key: HttpsKey = "",
    host: Annotated[str, typer.Option(
        help="Address every server listens on: 127.0.0.1 (this machine only) unless "
             "told otherwise; 0.0.0.0 opens all of them to the network (the console then "
             "needs --console-users or --console-allow-anonymous; the broker checks an "
             "ACL only with aclEnable).")] = LOOPBACK,
    console_users: Annotated[Path | None, typer.Option(
        "--console-users", help="Console users log in; they are in this file "
                                "(consoleUsersFile; see tidemq console user add).")] = None,
    console_allow_anonymous: Annotated[bool, typer.Option(
        "--console-allow-anonymous", help="Serve the console beyond loopback with no users "
                                          "and no login.")] = False,
) -> None:
    """Run a name server, a broker and the web console in one process, data in ./data."""
    from tidemq.broker.app import BrokerApp
    from tidemq.broker.config import load_broker_config
    from tidemq.client.config import ClientConfig
    from tidemq.namesrv import NameServerApp
    from tidemq.namesrv.config import load_namesrv_config
    from tidemq.net.acl.users import UserDirectory

    _setup_logging(log_level, log_file, log_format)
    warn_stray_env()
    all_overrides = _overrides(set_)
    console_overrides = _console_keys(all_overrides)
    # metricsAuth* guard the broker's metrics and the console's alike.
    user_overrides = {k: v for k, v in all_overrides.items()
                      if k not in console_overrides or k in METRICS_AUTH_KEYS}
    console_cfg = None
    console_users_dir = None
    if not no_console:  # checked before anything starts: a refusal leaves nothing running
        from tidemq.console.server import check_exposure, users_of

        console_cfg, _ = console_config(None, console_overrides, users_file=console_users,
                                        allow_anonymous=console_allow_anonymous)
        try:
            console_users_dir = users_of(console_cfg)
            check_exposure(host, console_cfg, console_users_dir)
        except TideMQError as exc:
            say(f"[red]error:[/] {escape(str(exc))}")
            raise typer.Exit(1) from None
    # The name server takes no TIDEMQ_* variables here: they are the broker's
    # (TIDEMQ_METRICSPORT would otherwise give both the same port).
    ns_cfg, _ = _load(functools.partial(load_namesrv_config, env={}), None,
                      {"listenPort": namesrv_port, "bindAddress": host,
                       "kvConfigPath": str(data / "namesrv" / "kvConfig.json")})
    # The broker and the console reach the name server where it listens; with port 0 that
    # is known once it has started.
    local = local_host(host)
    overrides = {"listenPort": broker_port, "bindAddress": host,
                 "namesrvAddr": f"{local}:{namesrv_port}",
                 "storePathRootDir": str(data / "store"), **user_overrides}
    _report_taken_from_flags(config, user_overrides)
    bcfg, scfg, unknown = _load(load_broker_config, config, overrides)
    _report_unknown(unknown)
    app: BrokerApp | None = None
    # One process, one certificate and one ACL: the name server's port takes the broker's
    # TLS settings and its ACL -- the ACL 1.0 accounts (aclEnable, aclFile), or the
    # broker's ACL 2.0 users (authenticationEnabled), once the broker has loaded them.
    users = None
    if bcfg.authentication_enabled:
        users = UserDirectory(_BrokerUsers(lambda: app), authorize=bcfg.authorization_enabled,
                              cluster=bcfg.broker_cluster_name)
    ns = NameServerApp(dataclasses.replace(ns_cfg, **{
        f.name: getattr(bcfg, f.name) for f in dataclasses.fields(ns_cfg)
        if f.name.startswith("tls_server_") or f.name in ("acl_enable", "acl_file")}),
        acl_directory=users)
    web: ConsoleServer | None = None

    async def start() -> None:
        nonlocal app, web
        await ns.start()
        namesrv_addr = ns.address
        broker_cfg = bcfg
        if "namesrvAddr" not in user_overrides:
            broker_cfg = dataclasses.replace(bcfg, namesrv_addr=namesrv_addr)
        app = BrokerApp(broker_cfg, scfg)
        await app.start()
        if not no_console:  # imported here: the other server commands need no web stack
            from tidemq.console import ConsoleServer

            tls = broker_cfg.tls_client
            # The console is the broker's own client: it signs as the broker does
            # (accessKey/secretKey, innerClientAuthenticationCredentials), else with
            # TIDEMQ_ACCESS_KEY / TIDEMQ_SECRET_KEY.
            access_key, secret_key = broker_cfg.credentials or ("", "")
            client_cfg = ClientConfig(
                namesrv_addr=(namesrv_addr,), use_tls=tls.enable,
                tls_trust_cert_path=tls.trust_cert_path, tls_cert_path=tls.cert_path,
                tls_key_path=tls.key_path, tls_key_password=tls.key_password,
                tls_auth_server=tls.auth_server, access_key=access_key, secret_key=secret_key)
            web = ConsoleServer(namesrv_addr, host=host, port=console_port,
                                config=console_cfg, users=console_users_dir,
                                https=https_context(console_cert, console_key), client=client_cfg)
            if (bcfg.acl_enable or bcfg.authentication_enabled) and not client_cfg.access_key:
                log.warning("the web console has no credentials while the ACL is on: its "
                            "pages will be refused; set accessKey/secretKey (or "
                            "innerClientAuthenticationCredentials) for the broker, or "
                            "TIDEMQ_ACCESS_KEY/TIDEMQ_SECRET_KEY")
            try:
                await web.start()
                if not web.console.auth.logins:
                    warn_if_exposed(log, "the web console", host, reach=CONSOLE_REACH)
            except OSError as exc:  # the console is auxiliary: serve messages without it
                say(f"[yellow]warning:[/] no web console on port {console_port}: "
                    f"{escape(str(exc))} (choose another with --console-port)")
                await web.stop()
                web = None
        say(f"[bold green]TideMQ standalone is running[/]\n"
            f"  name server  {ns.address}   (clients: namesrv={namesrv_addr})\n"
            f"  broker       {app.broker_addr}  ({escape(bcfg.broker_name)})\n"
            f"  console      {web.url if web is not None else 'off'}\n"
            f"  data         {escape(str(data.resolve()))}\n"
            f"  listening    {_exposure(host)}\n"
            f"  try: tidemq admin sendMessage -n {namesrv_addr} -t Hello -p hi\n"
            f"Press Ctrl+C to stop.")

    async def stop() -> None:
        if web is not None:
            await web.stop()
        if app is not None:
            await app.stop()
        await ns.stop()

    _run(_serve(start, stop))


def _report_taken_from_flags(path: Path | None, overrides: dict[str, str]) -> None:
    """Warn of each key of :data:`STANDALONE_KEYS` that the config file or a ``TIDEMQ_*``
    variable gives and ``--set`` does not: the standalone's flag sets it instead."""
    from tidemq.broker.config import BrokerConfig
    from tidemq.formats.javaprops import env_values, read_properties, shown_key
    from tidemq.store.config import StoreConfig

    def shown(key: str) -> str:  # a field name, a key or an alias: the key shown
        return shown_key(StoreConfig, shown_key(BrokerConfig, key))

    try:
        in_file = {shown(k) for k in read_properties(path)} if path else set()
    except TideMQError:
        in_file = set()  # loading the broker's settings reports it
    in_env = {shown(k) for k in (*env_values(BrokerConfig, os.environ),
                                 *env_values(StoreConfig, os.environ))}
    given = {shown(k) for k in overrides}
    for key, source in STANDALONE_KEYS.items():
        where = (escape(str(path)) if key in in_file else
                 "a TIDEMQ_* variable" if key in in_env else None)
        if where is not None and key not in given:
            say(f"[yellow]warning:[/] {key} given by {where} is not used: tidemq standalone "
                f"takes it from {source} (--set {key}=... wins over both)")


def _exposure(host: str) -> str:
    if is_loopback(host):
        return f"on {host}: this machine only (--host 0.0.0.0 opens it to the network)"
    return f"on {host}: reachable from other machines (see the warnings above)"


_C = TypeVar("_C")


def _load(loader: Callable[..., _C], path: Path | None, overrides: dict[str, Any]) -> _C:
    """A configuration, or the process ends with the error saying which key is wrong."""
    try:
        return loader(path, overrides=overrides)
    except TideMQError as exc:
        say(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None


def _built(make: Callable[[], _C]) -> _C:
    """A server, or the process ends with the error saying which key is wrong (a file
    named by a key that does not read, say)."""
    try:
        return make()
    except TideMQError as exc:
        say(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None


def _setup_logging(level: str, log_file: Path | None, log_format: str) -> None:
    """Logging as the three options say; a bad one is a usage error naming it."""
    if level.upper() not in LEVELS:
        raise typer.BadParameter(f"log level must be one of {', '.join(LEVELS)}, not "
                                 f"{level!r}", param_hint="--log-level")
    try:
        setup_logging(level, log_file, log_format=log_format)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--log-format") from None
    except OSError as exc:
        raise typer.BadParameter(f"cannot write {log_file}: {exc.strerror or exc}",
                                 param_hint="--log-file") from None


def register(app: typer.Typer) -> None:
    app.command("namesrv")(namesrv)
    app.command("controller")(controller)
    app.command("broker")(broker)
    app.command("standalone")(standalone)
