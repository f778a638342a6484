"""typer's :class:`~typer.testing.CliRunner` that builds each app's click command once.

typer's runner turns the app into a click command on every ``invoke``: for ``tidemq``
that reads the signature of every command of every group (``admin`` alone has more than a
hundred), which costs more CPU than most commands the tests run. A click command holds no
state of one invocation, so one built command serves every ``invoke`` of its app.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import typer
import typer.main
import typer.testing

__all__ = ["CliRunner"]

_commands: weakref.WeakKeyDictionary[typer.Typer, Any] = weakref.WeakKeyDictionary()


def _command(app: typer.Typer) -> Any:
    command = _commands.get(app)
    if command is None:
        command = _commands[app] = typer.main.get_command(app)
    return command


class CliRunner(typer.testing.CliRunner):
    def invoke(self, app: typer.Typer, args: str | Sequence[str] | None = None,
               **kwargs: Any) -> typer.testing.Result:
        command = _command(app)
        build = typer.testing._get_command  # what typer's invoke calls to build it
        typer.testing._get_command = lambda _app: command
        try:
            return super().invoke(app, args, **kwargs)
        finally:
            typer.testing._get_command = build
