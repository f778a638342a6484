"""``tidemq console``: the web console for a running cluster, in the foreground until
SIGINT/SIGTERM (``tidemq standalone`` also starts one, on port 8080 by default); and
``tidemq console user ...``, which edits the console's users file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from tidemq.cli.commands.admin_common import NAMESRV_ENV, TlsCa, TlsCert, TlsKey, UseTls
from tidemq.cli.commands.server import (
    CONSOLE_REACH,
    ConfigOpt,
    HttpsCert,
    HttpsKey,
    LogFile,
    LogFormat,
    LogLevel,
    SetOpt,
    _overrides,
    _report_unknown,
    _run,
    _serve,
    _setup_logging,
    console_config,
    https_context,
)
from tidemq.cli.markup import escape, say
from tidemq.client.config import DEFAULT_NAMESRV, ClientConfig, parse_namesrv
from tidemq.errors import ConfigError, TideMQError
from tidemq.net.bind import LOOPBACK, warn_if_exposed

__all__ = ["app", "register"]

log = logging.getLogger("tidemq.cli")

app = typer.Typer(help="Serve the web console (no command), or edit its users (user ...).")
users_app = typer.Typer(help="Console users: tidemq console user add NAME --role viewer.",
                        no_args_is_help=True)
app.add_typer(users_app, name="user")

UsersFileOpt = Annotated[Path, typer.Option(
    "--users-file", "-f", envvar="TIDEMQ_CONSOLEUSERSFILE", show_envvar=True,
    help="The console users file (YAML; created when missing).")]
PasswordStdin = Annotated[bool, typer.Option(
    "--password-stdin", help="Read the password from the first line of standard input "
                             "(else it is asked for, twice, without echo).")]


@app.callback(invoke_without_command=True)
def console(
    ctx: typer.Context,
    namesrv: Annotated[str, typer.Option(
        "-n", "--namesrv", envvar=NAMESRV_ENV, show_envvar=True,
        help="Name server addresses, 'host:port;host:port'.")] = DEFAULT_NAMESRV,
    host: Annotated[str, typer.Option(
        help="Address to listen on (0.0.0.0: every interface; needs users, or "
             "--allow-anonymous).")] = LOOPBACK,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    users_file: Annotated[Path | None, typer.Option(
        "--users-file", help="Users log in; they are in this file (consoleUsersFile).")
    ] = None,
    allow_anonymous: Annotated[bool, typer.Option(
        "--allow-anonymous", help="Serve beyond loopback with no users and no login "
                                  "(consoleAllowAnonymous).")] = False,
    config: ConfigOpt = None, set_: SetOpt = None,
    log_level: LogLevel = "INFO", log_file: LogFile = None, log_format: LogFormat = "text",
    https_cert: HttpsCert = "", https_key: HttpsKey = "",
    tls: UseTls = None, tls_ca: TlsCa = "", tls_cert: TlsCert = "", tls_key: TlsKey = "",
) -> None:
    """Serve the web console: cluster, topics, consumer groups and lag, messages."""
    if ctx.invoked_subcommand is not None:
        return
    _setup_logging(log_level, log_file, log_format)
    from tidemq.console import ConsoleServer  # here: other commands need no web stack

    cfg, unknown = console_config(config, _overrides(set_), users_file=users_file,
                                  allow_anonymous=allow_anonymous)
    _report_unknown(unknown)
    try:
        client = ClientConfig(namesrv_addr=parse_namesrv(namesrv), use_tls=tls,
                              tls_trust_cert_path=tls_ca, tls_cert_path=tls_cert,
                              tls_key_path=tls_key)
        web = ConsoleServer(namesrv, host=host, port=port, config=cfg, client=client,
                            https=https_context(https_cert, https_key))
    except TideMQError as exc:
        say(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None

    async def start() -> None:
        try:
            await web.start()
        except OSError as exc:
            raise ConfigError(f"web console on {host}:{port}: {exc}", key="port") from None
        if not web.console.auth.logins:
            warn_if_exposed(log, "the web console", host, reach=CONSOLE_REACH)
        say(f"TideMQ console on {web.url} (name server {namesrv}; "
            f"{'users log in' if web.console.auth.logins else 'no login'})")

    _run(_serve(start, web.stop))


#: The shortest password ``console user add`` and ``passwd`` accept (NIST SP 800-63B's
#: minimum for a password a user chooses).
MIN_PASSWORD_LENGTH = 8


def _password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise typer.BadParameter("the password must not be empty")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise typer.BadParameter("the password is too short (at least "
                                 f"{MIN_PASSWORD_LENGTH} characters)")
    return password


def _edit(path: Path, name: str, **changes: object) -> None:
    from tidemq.console.users import edit_users_file

    try:
        user = edit_users_file(path, name, **changes)  # type: ignore[arg-type]
    except TideMQError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if user is None:
        typer.echo(f"removed {name} from {path}", err=True)
    else:
        typer.echo(f"{path}: {user.name} ({user.role.value})", err=True)


@users_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="User name.")],
    users_file: UsersFileOpt,
    role: Annotated[str, typer.Option(help="admin (may change things) or viewer "
                                           "(read-only).")] = "viewer",
    password_stdin: PasswordStdin = False,
) -> None:
    """Add a user, or replace one of the same name (role and password)."""
    from tidemq.console.users import Role

    try:
        parsed = Role(role)
    except ValueError:
        raise typer.BadParameter("admin or viewer", param_hint="--role") from None
    _edit(users_file, name, role=parsed, password=_password(password_stdin))


@users_app.command("passwd")
def user_passwd(name: Annotated[str, typer.Argument(help="User name.")],
                users_file: UsersFileOpt, password_stdin: PasswordStdin = False) -> None:
    """Set a user's password (their open sessions end)."""
    _edit(users_file, name, password=_password(password_stdin))


@users_app.command("remove")
def user_remove(name: Annotated[str, typer.Argument(help="User name.")],
                users_file: UsersFileOpt) -> None:
    """Remove a user (their open sessions end)."""
    _edit(users_file, name, remove=True)


@users_app.command("list")
def user_list(users_file: UsersFileOpt) -> None:
    """The users and their roles."""
    from tidemq.console.users import parse_users

    try:
        users = parse_users(users_file.read_text("utf-8"), str(users_file))
    except (OSError, TideMQError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    for name, (role, _hash) in users.items():
        typer.echo(f"{name}\t{role.value}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="console")
