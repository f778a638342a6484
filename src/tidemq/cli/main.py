"""The ``tidemq`` command: one sub-app per module under ``tidemq.cli.commands``.

A run imports the modules of the command it names only: ``tidemq broker`` starts
without loading the benchmarks, the console's or the admin commands (every server
process, and every process ``tidemq cluster`` starts, pays for each import at start),
and builds the command line of the command it runs only (``tidemq admin topicList``:
topicList's, not every admin command's), importing the module that holds that command
and no other (:mod:`tidemq.cli.admin_commands`). ``tidemq`` without a known command, and
:data:`app`, have every command.
"""

from __future__ import annotations

import copy
import functools
import gc
import importlib
import inspect
import sys
from collections.abc import Callable

import typer
from typer.main import get_command_name
from typer.models import CommandInfo

from tidemq.cli import admin_commands

__all__ = ["COMMANDS", "app", "build_app", "main"]

HELP = "TideMQ: a RocketMQ-compatible broker in Python."


def _admin_app(command: str | None = None) -> typer.Typer:
    """``tidemq admin``: with ``command`` one of its commands, the app with the commands
    of the module that holds it (:mod:`tidemq.cli.admin_commands`), that module alone
    imported; otherwise with every command."""
    from tidemq.cli.commands import admin

    module = admin_commands.module_of(command) if command is not None else None
    if module is None:
        return _full_admin_app()
    if module == admin_commands.HOME:
        return admin.app
    return _registered(admin.app, (module,), own=False)


@functools.cache
def _full_admin_app() -> typer.Typer:
    """``tidemq admin`` with the commands of every module that adds some (once)."""
    from tidemq.cli.commands import admin

    return _registered(admin.app, admin_commands.ADDED_BY, own=True)


def _registered(home: typer.Typer, modules: tuple[str, ...], *, own: bool) -> typer.Typer:
    """A copy of ``home`` with the commands ``modules`` register on it, after ``home``'s
    own with ``own`` (``home`` itself keeps its own only)."""
    app = copy.copy(home)
    app.registered_commands = list(home.registered_commands) if own else []
    app.registered_groups = list(home.registered_groups) if own else []
    for module in modules:
        importlib.import_module(f"tidemq.cli.commands.{module}").register(app)
    return app


def _add_admin(root: typer.Typer, command: str | None = None) -> None:
    root.add_typer(_admin_app(command), name="admin")


def _add_bench(root: typer.Typer, _command: str | None = None) -> None:
    from tidemq.cli.commands import bench

    root.add_typer(bench.app, name="bench")


def _add_pipeline(root: typer.Typer, _command: str | None = None) -> None:
    from tidemq.cli.commands import pipeline

    root.add_typer(pipeline.app, name="pipeline")


def _add_store(root: typer.Typer, _command: str | None = None) -> None:
    from tidemq.cli.commands import store

    root.add_typer(store.app, name="store")


def _add_servers(root: typer.Typer, _command: str | None = None) -> None:
    from tidemq.cli.commands import server

    server.register(root)


def _add_cluster(root: typer.Typer, _command: str | None = None) -> None:
    from tidemq.cli.commands import cluster

    cluster.register(root)  # tidemq cluster: a failover group on one machine


def _add_console(root: typer.Typer, _command: str | None = None) -> None:
    from tidemq.cli.commands import console

    console.register(root)


#: Each top-level command, by the function that adds it (and the commands beside it
#: from the same module) to a root app; in the order ``tidemq --help`` lists them. Its
#: second argument, when given, is the command of the group that the run names: the
#: function may add the group with the module of that command only.
COMMANDS: dict[str, Callable[[typer.Typer, str | None], None]] = {
    "admin": _add_admin,
    "bench": _add_bench,
    "pipeline": _add_pipeline,
    "store": _add_store,
    "namesrv": _add_servers,
    "controller": _add_servers,
    "broker": _add_servers,
    "standalone": _add_servers,
    "cluster": _add_cluster,
    "console": _add_console,
}


def build_app(command: str | None = None, subcommand: str | None = None) -> typer.Typer:
    """The ``tidemq`` app with every command, or with those of ``command``'s module only
    (``command`` one of :data:`COMMANDS`); with ``subcommand``, a command of ``command``'s
    group, that group has it alone (when it has no such command, all of them).

    A run builds the command line of every command its app has, reading each one's
    signature: ``tidemq broker`` needs the broker's only, ``tidemq admin topicList``
    topicList's, not the hundred others of ``tidemq admin``."""
    root = typer.Typer(no_args_is_help=True, help=HELP)
    if command is None:
        for add in dict.fromkeys(COMMANDS.values()):
            add(root, None)
        _evaluate_annotations(root)
        return root
    # a group even when the module adds one command (typer would run it as the app)
    root.callback()(_group)
    COMMANDS[command](root, subcommand)
    own = [c for c in root.registered_commands if _name(c) == command]
    if own:
        root.registered_commands = own
    if subcommand is not None:
        for group in root.registered_groups:
            if group.name == command and group.typer_instance is not None:
                group.typer_instance = _with_only(group.typer_instance, subcommand)
    _evaluate_annotations(root)
    return root


def _evaluate_annotations(app: typer.Typer) -> None:
    """Evaluate the annotations of ``app``'s commands and callbacks, of its groups' too,
    in place, once: the command modules' are text (``from __future__ import
    annotations``), which typer evaluates twice each time it reads a signature, and it
    reads each one twice."""
    callbacks = [c.callback for c in app.registered_commands]
    if app.registered_callback is not None:
        callbacks.append(app.registered_callback.callback)
    for group in app.registered_groups:
        callbacks.append(group.callback)
        if group.typer_instance is not None:
            _evaluate_annotations(group.typer_instance)
    for fn in callbacks:
        if inspect.isfunction(fn) and any(isinstance(a, str)
                                          for a in fn.__annotations__.values()):
            fn.__annotations__ = inspect.get_annotations(fn, eval_str=True)
        if inspect.isfunction(fn) and fn.__doc__:
            fn.__doc__ = flowed(fn.__doc__)


def flowed(doc: str) -> str:
    """``doc`` with the lines of each paragraph joined: the help screens keep a
    docstring's line breaks, which would cut their lines in mid-sentence."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


def _name(command: CommandInfo) -> str:
    """A command's name, as typer gives it."""
    assert command.callback is not None
    return command.name or get_command_name(command.callback.__name__)


def _with_only(app: typer.Typer, name: str) -> typer.Typer:
    """``app`` with its command or group ``name`` alone (``app`` itself when it has
    neither: the run then says so, and which names are near)."""
    commands = [c for c in app.registered_commands if _name(c) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


def _group() -> None:
    """TideMQ: a RocketMQ-compatible broker in Python."""


def main() -> None:
    named = sys.argv[1] if len(sys.argv) > 1 else None
    # what follows the command when it is a word: a command of its group, if it has one
    sub = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("-") else None
    # What the imports make lives as long as the process: the collector would scan it
    # again and again while the modules load, and find nothing to free.
    gc.disable()
    try:
        root = build_app(named, sub) if named in COMMANDS else build_app()
    finally:
        gc.enable()
    root()


def __getattr__(name: str) -> typer.Typer:
    """:data:`app`, every command, built when first asked for."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    full = build_app()
    globals()["app"] = full
    return full


app: typer.Typer

if __name__ == "__main__":  # python -m tidemq.cli.main
    main()
