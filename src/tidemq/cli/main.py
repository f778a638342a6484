"""The ``tidemq`` command: one sub-app per module under ``tidemq.cli.commands``."""

from __future__ import annotations

import typer

from tidemq.cli.commands import admin, bench, server
from tidemq.cli.commands import console as console_commands
from tidemq.cli.commands import store as store_commands

app = typer.Typer(no_args_is_help=True, help="TideMQ: a RocketMQ-compatible broker in Python.")
app.add_typer(admin.app, name="admin")
app.add_typer(bench.app, name="bench")
app.add_typer(store_commands.app, name="store")
server.register(app)
console_commands.register(app)


def main() -> None:
    app()
