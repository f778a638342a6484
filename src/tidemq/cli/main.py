"""The ``tidemq`` command."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="TideMQ: a RocketMQ-compatible broker in Python.")


def main() -> None:
    app()
