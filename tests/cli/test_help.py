"""``tidemq --help`` and every command's: a paragraph of help is one line of text, which
the help screen wraps to the terminal; a docstring's own line breaks would cut the
screen's lines in mid-sentence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from tidemq.cli.main import build_app, flowed


def _commands(command: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _commands(sub, f"{path} {name}")


def test_every_help_paragraph_is_one_line() -> None:
    root = typer.main.get_command(build_app())
    cut = [path for path, command in _commands(root, "tidemq")
           if any("\n" in paragraph for paragraph in (command.help or "").split("\n\n"))]
    assert cut == []


def test_a_subcommand_run_alone_gets_the_same_help() -> None:
    alone = typer.main.get_command(build_app("admin", "updateLogicalQueueNum"))
    help_text = alone.commands["admin"].commands["updateLogicalQueueNum"].help
    assert help_text.startswith("Change the number of writable logical queues "
                                "(UpdateLogicalQueueNum). Fewer: the highest ones")


def test_flowed_joins_lines_and_keeps_paragraphs() -> None:
    assert flowed("""One line
        and its continuation.

        A second
        paragraph.""") == "One line and its continuation.\n\nA second paragraph."
