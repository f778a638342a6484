"""What the ``tidemq admin`` command modules share: the common options, how a command runs
against the cluster, and how it prints (tables for humans, ``--json`` for scripts).

Both :mod:`tidemq.cli.commands.admin` and :mod:`tidemq.cli.commands.logical` import this
module; neither imports the other's commands at module level.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from tidemq.client import AdminClient
from tidemq.client.config import (
    ACCESS_KEY_ENV,
    SECRET_KEY_ENV,
    TLS_CA_ENV,
    TLS_CERT_ENV,
    TLS_ENV,
    TLS_KEY_ENV,
    ClientConfig,
    parse_namesrv,
)
from tidemq.errors import TideMQError

__all__ = ["AccessKey", "JsonFlag", "Namesrv", "SecretKey", "TlsCa", "TlsCert", "TlsKey",
           "Topic", "UseTls", "client_tls", "console_err", "console_out", "emit_json",
           "format_ms", "parse_bool", "parse_time_ms", "print_columns", "run_admin",
           "set_account", "set_tls"]

T = TypeVar("T")

#: Where ``-n`` is read from when not given: TideMQ's variable, then RocketMQ's (what
#: mqadmin and RocketMQ's clients read).
NAMESRV_ENV = ["TIDEMQ_NAMESRV", "NAMESRV_ADDR"]
Namesrv = Annotated[str, typer.Option(
    "-n", "--namesrv", envvar=NAMESRV_ENV, show_envvar=True,
    help="Name server addresses, 'host:port;host:port'.")]
AccessKey = Annotated[str, typer.Option(
    "--access-key", envvar=ACCESS_KEY_ENV, show_envvar=True,
    help="Sign requests with this account (brokers and name servers with aclEnable).")]
SecretKey = Annotated[str, typer.Option(
    "--secret-key", envvar=SECRET_KEY_ENV, show_envvar=True,
    help="The account's secret key (prefer the environment variable: command lines are "
         "visible to other users).")]
UseTls = Annotated[bool | None, typer.Option(
    "--tls/--no-tls", envvar=TLS_ENV, show_envvar=True, show_default=False,
    help="Connect to name servers and brokers with TLS (on by default when a CA file is "
         "given).")]
TlsCa = Annotated[str, typer.Option(
    "--tls-ca", envvar=TLS_CA_ENV, show_envvar=True,
    help="CA certificates (PEM) that sign the servers' certificates (default: the "
         "system's).")]
TlsCert = Annotated[str, typer.Option(
    "--tls-cert", envvar=TLS_CERT_ENV, show_envvar=True,
    help="Client certificate (PEM), for servers that ask for one.")]
TlsKey = Annotated[str, typer.Option(
    "--tls-key", envvar=TLS_KEY_ENV, show_envvar=True, help="The client certificate's key.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
Topic = Annotated[str, typer.Option("-t", "--topic", help="Topic name.")]
BrokerAddr = Annotated[str | None, typer.Option(
    "-b", "--brokerAddr", help="This broker only (host:port).")]
ClusterName = Annotated[str | None, typer.Option(
    "-c", "--clusterName", help="Every master of this cluster.")]


def console_out() -> Console:
    """Tables for humans; when piped, wide enough that ids are not cut."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 200)
    return console


def console_err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


#: The account of this invocation (``--access-key`` / ``--secret-key``), set by the
#: ``admin`` group's options.
_account: dict[str, str] = {}


def set_account(access_key: str, secret_key: str) -> None:
    """Sign this invocation's requests with the account (both empty: unsigned)."""
    if bool(access_key) != bool(secret_key):
        console_err().print("[red]error:[/red] --access-key and --secret-key go together")
        raise typer.Exit(2)
    _account.update(access_key=access_key, secret_key=secret_key)


#: The TLS settings of this invocation (``--tls``, ``--tls-ca`` ...), set by the ``admin``
#: group's options.
_tls: dict[str, Any] = {}


def set_tls(use_tls: bool | None, ca: str, cert: str, key: str) -> None:
    """Connect with TLS as the flags say (unset: from the environment, as any client)."""
    _tls.update(use_tls=use_tls, tls_trust_cert_path=ca, tls_cert_path=cert,
                tls_key_path=key)


def client_tls() -> dict[str, Any]:
    """This invocation's TLS settings as :class:`ClientConfig` arguments."""
    return dict(_tls)


#: The client keys a TLS error names, and what sets the same thing for this command.
_TLS_KEYS_AS_FLAGS = (
    ("tls.client.trustCertPath", "--tls-ca or TIDEMQ_TLS_CA"),
    ("tls.client.certPath", "--tls-cert and --tls-key, or TIDEMQ_TLS_CERT and TIDEMQ_TLS_KEY"),
)


def for_admin(message: str) -> str:
    """An error's words as this command's user needs them: the client keys a TLS error
    names (a broker's) given as this command's flags and variables."""
    for key, flags in _TLS_KEYS_AS_FLAGS:
        message = message.replace(key, flags)
    return message


def run_admin(namesrv: str, action: Callable[[AdminClient], Awaitable[T]]) -> T:
    """Run ``action`` with a started AdminClient; a TideMQ error becomes exit code 1."""

    async def main() -> T:
        config = ClientConfig(namesrv_addr=parse_namesrv(namesrv),
                              access_key=_account.get("access_key", ""),
                              secret_key=_account.get("secret_key", ""), **_tls)
        async with AdminClient(config=config) as admin:
            return await action(admin)

    try:
        return asyncio.run(main())
    except (TideMQError, ValueError) as exc:
        console_err().print(f"[red]error:[/red] {escape(for_admin(str(exc)))}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def print_columns(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Rows under mqadmin's ``#Header`` columns, each column as wide as its widest cell
    and two spaces apart (what scripts written for mqadmin's output split on)."""
    cells = [list(headers)] + [[str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = sys.stdout
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                  + "\n")


def parse_bool(value: str, flag: str) -> bool:
    """mqadmin's ``true``/``false`` option values."""
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise typer.BadParameter(f"expected true or false, got {value!r}", param_hint=flag)
    return lowered == "true"


_MQADMIN_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}#\d{2}:\d{2}:\d{2}:\d{3}$")


def parse_time_ms(value: str, flag: str) -> int:
    """mqadmin's time values: ``now``, epoch milliseconds, or local time as
    ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    text = value.strip()
    if text.lower() == "now":
        return int(datetime.datetime.now().timestamp() * 1000)
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if _MQADMIN_TIME.match(text):
        when = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
        return int(when.timestamp() * 1000)
    raise typer.BadParameter(
        f"expected now, epoch milliseconds or yyyy-MM-dd#HH:mm:ss:SSS, got {value!r}",
        param_hint=flag)


def format_ms(ms: int) -> str:
    """Epoch milliseconds as local ``yyyy-MM-dd HH:mm:ss``, ``-`` for none (as mqadmin's
    #LastTime)."""
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


#: mqadmin's ``-i``: the command printed again every this many seconds.
Interval = Annotated[int | None, typer.Option(
    "-i", "--interval", min=1, help="Print again every this many seconds, until interrupted.")]


def repeat_every(interval: int | None, once: Callable[[], None]) -> None:
    """Run ``once``; with ``interval``, again every that many seconds until interrupted
    (Ctrl-C ends it with status 130, as any interrupted admin command)."""
    while True:
        once()
        if interval is None:
            return
        try:
            time.sleep(interval)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
