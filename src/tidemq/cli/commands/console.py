"""``tidemq console``: the web console for a running cluster, in the foreground until
SIGINT/SIGTERM (``tidemq standalone`` also starts one, on port 8080 by default)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from tidemq.cli.commands.server import (
    CONSOLE_REACH,
    LogFile,
    LogFormat,
    LogLevel,
    _run,
    _serve,
    _setup_logging,
)
from tidemq.cli.commands.server import console as err_console
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.errors import ConfigError
from tidemq.net.bind import LOOPBACK, warn_if_exposed

__all__ = ["console", "register"]

log = logging.getLogger("tidemq.cli")


def console(
    namesrv: Annotated[str, typer.Option(
        "-n", "--namesrv", envvar="TIDEMQ_NAMESRV", show_envvar=True,
        help="Name server addresses, 'host:port;host:port'.")] = DEFAULT_NAMESRV,
    host: Annotated[str, typer.Option(
        help="Address to listen on (0.0.0.0: every interface; the console has no login).")
    ] = LOOPBACK,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    log_level: LogLevel = "INFO", log_file: LogFile = None, log_format: LogFormat = "text",
) -> None:
    """Serve the web console: cluster, topics, consumer groups and lag, messages."""
    _setup_logging(log_level, log_file, log_format)
    from tidemq.console import ConsoleServer  # here: other commands need no web stack

    web = ConsoleServer(namesrv, host=host, port=port)

    async def start() -> None:
        try:
            await web.start()
        except OSError as exc:
            raise ConfigError(f"web console on {host}:{port}: {exc}", key="port") from None
        warn_if_exposed(log, "the web console", host, reach=CONSOLE_REACH)
        err_console.print(f"TideMQ console on {web.url} (name server {namesrv})")

    _run(_serve(start, web.stop))


def register(app: typer.Typer) -> None:
    app.command("console")(console)
