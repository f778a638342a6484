"""Java ``.properties`` files and binding them to config dataclasses.

Syntax handled: ``key=value`` or ``key: value`` or ``key value``; ``#`` and ``!`` comments;
blank lines; a trailing backslash continues a line; ``\\t \\n \\\\`` escapes; surrounding
spaces trimmed.

Binding: a dataclass field ``flush_disk_type`` is set by the RocketMQ key
``flushDiskType`` (snake_case to camelCase) and also by its own name. Values are converted
to the field's type (``bool`` accepts true/false, yes/no, 1/0). Unknown keys are returned,
never silently dropped, so callers can report them; bad values raise
:class:`~tidemq.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from tidemq.errors import ConfigError

__all__ = ["bind", "camel", "config_keys", "parse_properties"]

T = TypeVar("T")

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "\\": "\\"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``.properties`` text into an ordered mapping (last definition wins)."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split(logical)
        out[key] = value
    return out


def _split(line: str) -> tuple[str, str]:
    for i, ch in enumerate(line):
        if ch in "=:" or ch.isspace():
            key, rest = line[:i], line[i + 1 :].strip()
            if ch.isspace() and rest[:1] in ("=", ":"):
                rest = rest[1:].strip()
            return _unescape(key), _unescape(rest)
    return _unescape(line), ""


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(_ESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def camel(name: str) -> str:
    """``flush_disk_type`` -> ``flushDiskType``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def config_keys(cls: type[Any]) -> dict[str, str]:
    """RocketMQ key -> field name for a config dataclass."""
    return {camel(f.name): f.name for f in dataclasses.fields(cls)}


def _convert(key: str, raw: Any, tp: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if tp is bool:
            low = raw.strip().lower()
            if low in ("true", "yes", "1", "on"):
                return True
            if low in ("false", "no", "0", "off"):
                return False
            raise ValueError(raw)
        if tp is int:
            return int(raw.strip())
        if tp is float:
            return float(raw.strip())
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            try:
                return tp[raw.strip()]
            except KeyError:
                return tp(raw.strip())
    except (ValueError, KeyError):
        raise ConfigError(f"bad value {raw!r} for {key}: expected {getattr(tp, '__name__', tp)}",
                          key=key) from None
    return raw


def bind(cls: type[T], values: Mapping[str, Any], base: T | None = None) -> tuple[T, list[str]]:
    """Build ``cls`` from ``values`` (RocketMQ or field names); return it and unknown keys."""
    keys = config_keys(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    changes: dict[str, Any] = {}
    unknown: list[str] = []
    for key, raw in values.items():
        field = keys.get(key) or (key if key in names else None)
        if field is None:
            unknown.append(key)
            continue
        changes[field] = _convert(key, raw, hints[field])
    obj = dataclasses.replace(base, **changes) if base is not None else cls(**changes)  # type: ignore[type-var]
    return obj, unknown
