"""Running one measurement for a ``tidemq bench`` command: a bad setting becomes a usage
error, a failed run one red line and exit status 1; coroutines run on uvloop when it is
installed (as the servers do)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import typer
from rich.markup import escape

from tidemq.cli.commands.bench.render import console
from tidemq.errors import TideMQError

__all__ = ["measure", "run_async"]

T = TypeVar("T")


def measure(run: Callable[[], T], *,
            failures: tuple[type[Exception], ...] = (TideMQError,)) -> T:
    """``run()``; a ``ValueError`` (a setting the benchmark refuses) is a usage error and
    any of ``failures`` ends the command with status 1."""
    try:
        return run()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except failures as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)
