"""The tables of ``docs/configuration.md``, written from the code's own definitions: every
key of the broker's, the store's, the name server's, the controller's and the console's
config dataclasses (type, default, whether ``updateBrokerConfig`` / ``updateNamesrvConfig``
may change it, and the field's ``#:`` description, :mod:`tidemq.cli.config_docs`), and the
flags of the server commands.

The page is hand-written but for its tables: each lies between ``<!-- generated: NAME -->``
and ``<!-- end generated: NAME -->``, and :func:`render` replaces what is between them.
``python -m tidemq.cli.config_reference`` rewrites the page; with ``--check`` it changes
nothing and fails when the page differs from what it would write.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import re
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tidemq.broker import runtime_config as broker_runtime
from tidemq.broker.config import BrokerConfig
from tidemq.cli.config_docs import field_docs
from tidemq.console.config import ConsoleConfig
from tidemq.errors import ConfigError
from tidemq.formats.javaprops import camel, config_keys
from tidemq.namesrv import runtime_config as namesrv_runtime
from tidemq.namesrv.config import NamesrvConfig
from tidemq.namesrv.controller.config import ControllerConfig
from tidemq.net.server_keys import ServerKeys
from tidemq.store.config import StoreConfig

__all__ = ["CONFIGS", "SECTIONS", "Setting", "main", "missing_descriptions", "render",
           "settings"]

#: Every config dataclass a user writes keys of.
CONFIGS: tuple[type[Any], ...] = (BrokerConfig, StoreConfig, NamesrvConfig, ControllerConfig,
                                  ConsoleConfig)

#: The servers that read a shared key, by config dataclass.
_READERS = (("broker", BrokerConfig), ("name server", NamesrvConfig),
            ("controller", ControllerConfig))

_BEGIN = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.MULTILINE)


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """One key as a row of the page."""

    key: str
    type: str
    default: str
    runtime: bool
    meaning: str


def settings(cls: type[Any], runtime_keys: Iterable[str] = (),
             fields: Iterable[str] | None = None) -> list[Setting]:
    """The keys of config dataclass ``cls`` (of its ``fields`` only, when given), in the
    order they are declared."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    runtime = set(runtime_keys)
    wanted = None if fields is None else set(fields)
    rows = []
    for field in dataclasses.fields(cls):
        if wanted is not None and field.name not in wanted:
            continue
        key = field.metadata.get("key", camel(field.name))
        meaning = docs[field.name]
        aliases = field.metadata.get("aliases", ())
        if aliases:
            meaning += f" Also read as {', '.join(f'`{a}`' for a in aliases)}."
        rows.append(Setting(key=key, type=_type_text(hints[field.name]),
                            default=_default_text(field), runtime=key in runtime,
                            meaning=meaning))
    return rows


def missing_descriptions() -> list[str]:
    """``Class.field`` of every field of :data:`CONFIGS` without a ``#:`` description."""
    return [f"{cls.__name__}.{name}" for cls in CONFIGS
            for name, text in field_docs(cls).items() if not text]


def _own_fields(cls: type[Any]) -> list[str]:
    """The fields declared in ``cls``'s own body."""
    own = inspect.get_annotations(cls)
    return [f.name for f in dataclasses.fields(cls) if f.name in own]


def _type_text(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " \\| ".join(str(member.value) for member in tp)
    return {bool: "boolean", int: "integer", float: "number", str: "string"}[tp]


def _default_text(field: dataclasses.Field[Any]) -> str:
    value = field.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def _cell(text: str) -> str:
    """reST markup of a description as Markdown, safe inside a table cell."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)  # :mod:`x` -> `x`
    text = text.replace("``", "`")
    text = re.sub(r"\bdocs/([\w-]+\.md(?:#[\w-]+)?)", r"[\1](\1)", text)
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if text else "(empty)"


def _table(rows: list[Setting], *, extra: Callable[[Setting], str] | None = None,
           extra_title: str = "") -> str:
    head = ["Key", "Type", "Default", "Run time"] + ([extra_title] if extra else []) + [
        "Meaning"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"`{row.key}`", row.type, _code(row.default),
                 "yes" if row.runtime else "no"]
        if extra is not None:
            cells.append(extra(row))
        cells.append(_cell(row.meaning))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _broker() -> str:
    return _table(settings(BrokerConfig, broker_runtime.RUNTIME_KEYS,
                           _own_fields(BrokerConfig)))


def _store() -> str:
    broker_keys = config_keys(BrokerConfig)
    fields = [name for key, name in config_keys(StoreConfig).items() if key not in broker_keys]
    return _table(settings(StoreConfig, broker_runtime.RUNTIME_KEYS, fields))


def _shared() -> str:
    runtime = {*broker_runtime.RUNTIME_KEYS, *namesrv_runtime.RUNTIME_KEYS}
    readers = {name: set(config_keys(cls)) for name, cls in _READERS}

    def read_by(row: Setting) -> str:
        return ", ".join(name for name, keys in readers.items() if row.key in keys)

    rows = settings(ServerKeys, runtime)
    return _table(rows, extra=read_by, extra_title="Read by")


def _namesrv() -> str:
    return _table(settings(NamesrvConfig, namesrv_runtime.RUNTIME_KEYS,
                           _own_fields(NamesrvConfig)))


def _controller() -> str:
    return _table(settings(ControllerConfig, (), _own_fields(ControllerConfig)))


def _console() -> str:
    return _table(settings(ConsoleConfig))


def _flags(command: str) -> Callable[[], str]:
    def table() -> str:
        from typer.main import get_command

        from tidemq.cli.main import build_app

        root: Any = get_command(build_app(command))
        cmd = root.commands[command]
        lines = ["| Flag | Default | Meaning |", "|---|---|---|"]
        for param in cmd.params:
            if param.param_type_name != "option" or param.hidden:
                continue
            names = ", ".join(f"`{name}`" for name in [*param.opts, *param.secondary_opts])
            meaning = param.help or ""
            if param.envvar:
                names_env = ([param.envvar] if isinstance(param.envvar, str)
                             else list(param.envvar))
                meaning += " Environment: " + ", then ".join(f"`{e}`" for e in names_env) + "."
            lines.append(f"| {names} | {_flag_default(param)} | {_cell(meaning)} |")
        return "\n".join(lines)

    return table


def _flag_default(param: Any) -> str:
    """A command-line option's default as the page shows it."""
    value = param.default
    if param.is_flag and param.secondary_opts and value is None:
        return "(unset)"
    if param.is_flag:
        return "on" if value else "off"
    if value is None or value == "":
        return "(none)"
    return f"`{value}`"


#: Each generated part of the page, by the name its markers give.
SECTIONS: Mapping[str, Callable[[], str]] = {
    "broker": _broker,
    "store": _store,
    "shared": _shared,
    "namesrv": _namesrv,
    "controller": _controller,
    "console": _console,
    "flags-broker": _flags("broker"),
    "flags-standalone": _flags("standalone"),
    "flags-namesrv": _flags("namesrv"),
    "flags-controller": _flags("controller"),
    "flags-console": _flags("console"),
}


def render(page: str) -> str:
    """``page`` with every generated part written afresh. Every part of :data:`SECTIONS`
    must be in it once, and no other."""
    names = _BEGIN.findall(page)
    for name in names:
        if name not in SECTIONS:
            raise ConfigError(f"the page has a generated part {name!r} the generator does "
                              "not know")
    missing = [name for name in SECTIONS if names.count(name) != 1]
    if missing:
        raise ConfigError(f"the page must have each generated part once: {missing}")
    for name, make in SECTIONS.items():
        begin, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
        head, _, rest = page.partition(begin + "\n")
        _, found, tail = rest.partition(end)
        if not found:
            raise ConfigError(f"the page's generated part {name!r} has no {end!r}")
        page = f"{head}{begin}\n{make()}\n{end}{tail}"
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tidemq.cli.config_reference",
        description="Rewrite the tables of the configuration reference page.")
    parser.add_argument("page", nargs="?", default="docs/configuration.md", type=Path)
    parser.add_argument("--check", action="store_true",
                        help="Change nothing; fail when the page is not up to date.")
    args = parser.parse_args(argv)
    missing = missing_descriptions()
    if missing:
        print(f"settings without a description: {', '.join(missing)}", file=sys.stderr)
        return 1
    old = args.page.read_text("utf-8")
    new = render(old)
    if args.check:
        if new != old:
            print(f"{args.page} is out of date: run python -m tidemq.cli.config_reference",
                  file=sys.stderr)
            return 1
        return 0
    if new != old:
        args.page.write_text(new, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
