"""Java ``.properties`` files and binding them to config dataclasses.

Syntax handled as ``java.util.Properties.load``: lines end at ``\\n``, ``\\r`` or ``\\r\\n``
only; ``key=value``, ``key: value`` or ``key value``, the key ending at the first unescaped
``=``, ``:`` or whitespace (space, tab, form feed); ``#`` and ``!`` comments; blank lines; an
odd number of trailing backslashes continues a line; ``\\t \\n \\r \\f \\uXXXX`` escapes, any
other escaped character stands for itself. Unlike Java, unescaped trailing whitespace of a
value is trimmed.

Binding: a dataclass field ``flush_disk_type`` is set by the RocketMQ key
``flushDiskType`` (snake_case to camelCase, or the field's ``metadata["key"]`` where
the RocketMQ name has an acronym, as ``checkCRCOnRecover``) and by its own name.
Values are converted to the field's type (``bool`` accepts true/false, yes/no, 1/0).
Unknown keys are returned, never silently dropped, so callers can report them; bad
values raise :class:`~tidemq.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import re
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

from tidemq.errors import ConfigError

__all__ = ["MASK", "bind", "camel", "config_keys", "describe", "env_values", "load_config",
           "parse_properties", "parse_properties_body", "primary_keys", "properties_text",
           "read_properties", "runtime_update", "shown_key", "stray_env"]

T = TypeVar("T")

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "\\": "\\"}
_HEX = frozenset("0123456789abcdefABCDEF")
_WS = " \t\f"
_LINES = re.compile(r"\r\n|\r|\n")


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``.properties`` text into an ordered mapping (last definition wins)."""
    out: dict[str, str] = {}
    logical = ""
    continuing = False
    for raw in _LINES.split(text):
        line = raw.lstrip(_WS)
        if not continuing and (not line or line[0] in "#!"):
            continue
        if (len(line) - len(line.rstrip("\\"))) % 2:
            logical += line[:-1]
            continuing = True
            continue
        key, value = _split(logical + line)
        out[key] = value
        logical = ""
        continuing = False
    if continuing:
        key, value = _split(logical)
        out[key] = value
    return out


def _split(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n and line[i] not in "=:" and line[i] not in _WS:
        i += 2 if line[i] == "\\" else 1
    key, j = line[:i], i
    while j < n and line[j] in _WS:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
    while j < n and line[j] in _WS:
        j += 1
    value = line[j:]
    trimmed = value.rstrip(_WS)
    if len(trimmed) < len(value) and (len(trimmed) - len(trimmed.rstrip("\\"))) % 2:
        trimmed = value[: len(trimmed) + 1]  # keep an escaped trailing space
    return _unescape(key), _unescape(trimmed)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            digits = text[i + 2 : i + 6]
            if nxt == "u" and len(digits) == 4 and all(c in _HEX for c in digits):
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def camel(name: str) -> str:
    """``flush_disk_type`` -> ``flushDiskType``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def primary_keys(cls: type[Any]) -> dict[str, str]:
    """The key a config dataclass shows for each field (its RocketMQ key) -> field name."""
    return {f.metadata.get("key", camel(f.name)): f.name for f in dataclasses.fields(cls)}


def config_keys(cls: type[Any]) -> dict[str, str]:
    """Every key a config dataclass reads -> field name: the keys it shows
    (:func:`primary_keys`), then the other names a field also takes (its ``aliases``: where
    RocketMQ names the same setting differently)."""
    keys = primary_keys(cls)
    for f in dataclasses.fields(cls):
        keys.update(dict.fromkeys(f.metadata.get("aliases", ()), f.name))
    return keys


def shown_key(cls: type[Any], key: str) -> str:
    """The key config dataclass ``cls`` shows for ``key``, one of its keys or aliases."""
    field = config_keys(cls).get(key, key)
    return {name: shown for shown, name in primary_keys(cls).items()}.get(field, key)


#: What a ``# comment`` written after a value looks like (it is read as part of it).
_TRAILING_COMMENT = re.compile(r"\s[#!]")


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
        hint = (" (a .properties line has no comment after its value: a '#' comment belongs "
                "on a line of its own)") if _TRAILING_COMMENT.search(raw) else ""
        raise ConfigError(f"bad value {raw!r} for {key}: expected {_takes(tp)}{hint}",
                          key=key) from None
    return raw


def _takes(tp: Any) -> str:
    """What a value of type ``tp`` is, in the words of an error about one."""
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(tp.__members__)
    return {bool: "true or false", int: "an integer", float: "a number"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def parse_properties_body(body: bytes | bytearray | memoryview) -> dict[str, str]:
    """:func:`parse_properties` of a request body (UTF-8 text); a
    :class:`~tidemq.errors.ConfigError` when it is not UTF-8."""
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the body is not UTF-8 properties text: {exc}") from None
    return parse_properties(text)


def runtime_update(cls: type[T], config: T, changes: Mapping[str, str],
                   runtime: Collection[str], *, server: str,
                   known: Collection[str] | None = None) -> T:
    """``config`` (a config dataclass ``cls``) after ``changes`` made while ``server``
    runs; changes nothing. A :class:`~tidemq.errors.ConfigError` names the first key that
    is unknown (not one of ``cls``'s keys, or of ``known`` where given), that cannot change
    at run time (its shown key is not in ``runtime``), or whose value is bad."""
    if not changes:
        raise ConfigError("no key given")
    keys = config_keys(cls) if known is None else known
    for key in sorted(changes):
        if key not in keys:
            raise ConfigError(f"unknown config key {key!r}", key=key)
        if shown_key(cls, key) not in runtime:
            raise ConfigError(
                f"{key} cannot change while {server} runs: set it in its properties file "
                f"and restart (keys that can: {', '.join(sorted(runtime))})", key=key)
    new, _ = bind(cls, dict(changes), base=config)
    return new


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


def _env_names(cls: type[Any]) -> dict[str, str]:
    """What may follow the prefix of a variable for a key of ``cls``, lower case -> key."""
    keys = config_keys(cls)
    wanted = {k.lower(): k for k in keys} | {f.lower(): k for k, f in keys.items()}
    wanted |= {f.replace("_", "").lower(): k for k, f in keys.items()}
    return wanted


def _env_key(wanted: Mapping[str, str], rest: str) -> str | None:
    return wanted.get(rest.lower()) or wanted.get(rest.replace("_", "").lower())


def env_values(cls: type[Any], env: Mapping[str, str], prefix: str = "TIDEMQ_") -> dict[str, str]:
    """Variables ``<prefix><KEY>`` of ``env`` that name a key of config dataclass ``cls``.

    The name after the prefix matches the RocketMQ key or the field name, case-insensitive,
    underscores optional (``TIDEMQ_LISTENPORT``, ``TIDEMQ_LISTEN_PORT``); the result maps
    the RocketMQ key to the value, ready for :func:`bind`.
    """
    wanted = _env_names(cls)
    out: dict[str, str] = {}
    for name, value in env.items():
        if name.startswith(prefix):
            key = _env_key(wanted, name[len(prefix):])
            if key is not None:
                out[key] = value
    return out


def stray_env(classes: Collection[type[Any]], env: Mapping[str, str],
              prefix: str = "TIDEMQ_", other: Collection[str] = ()) -> dict[str, str | None]:
    """Variables ``<prefix>...`` of ``env`` that :func:`env_values` of none of ``classes``
    reads and that are not in ``other`` (names read for other purposes), in name order,
    each -> the key of ``classes`` it is closest to (``None`` when none is close)."""
    wanted: dict[str, str] = {}
    for cls in classes:
        wanted.update(_env_names(cls))
    plain = {name.replace("_", ""): key for name, key in wanted.items()}
    out: dict[str, str | None] = {}
    for name in sorted(env):
        rest = name[len(prefix):]
        if not name.startswith(prefix) or name in other or _env_key(wanted, rest) is not None:
            continue
        close = difflib.get_close_matches(rest.replace("_", "").lower(), plain, n=1, cutoff=0.75)
        out[name] = plain[close[0]] if close else None
    return out


MASK = "******"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def describe(cls: type[Any], obj: Any) -> dict[str, str]:
    """Every key of config dataclass ``cls`` -> ``obj``'s value as properties text; the
    fields declared ``repr=False`` (secrets) shown as :data:`MASK` when set."""
    secret = {f.name for f in dataclasses.fields(cls) if not f.repr}
    out: dict[str, str] = {}
    for key, field in primary_keys(cls).items():
        value = getattr(obj, field)
        out[key] = MASK if field in secret and value else _text(value)
    return out


_STORE_ESCAPES = {"\\": "\\\\", " ": "\\ ", "\t": "\\t", "\n": "\\n", "\r": "\\r",
                  "\f": "\\f", "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}


def _escape(text: str, *, key: bool) -> str:
    """As ``java.util.Properties.store`` escapes (UTF-8 output, so no ``\\u`` escapes):
    a value keeps its inner spaces; its trailing ones are escaped too, since the reader
    trims unescaped ones."""
    inner = len(text.rstrip(" "))
    return "".join(ch if ch == " " and not key and 0 < i < inner
                   else _STORE_ESCAPES.get(ch, ch) for i, ch in enumerate(text))


def properties_text(props: Mapping[str, str]) -> str:
    """``key=value`` lines that :func:`parse_properties` reads back as ``props``."""
    return "".join(f"{_escape(k, key=True)}={_escape(v, key=False)}\n"
                   for k, v in props.items())


def read_properties(path: str | Path) -> dict[str, str]:
    """:func:`parse_properties` of the file at ``path``; a file that cannot be read (missing,
    a directory, not allowed, not UTF-8) is a :class:`~tidemq.errors.ConfigError` that
    names it."""
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {str(path)!r}: "
                          f"{exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the configuration file {str(path)!r} is not UTF-8 text (byte "
                          f"{exc.start})") from None
    return parse_properties(text)


def load_config(cls: type[T], path: str | Path | None = None, *,
                overrides: Mapping[str, Any] | None = None,
                env: Mapping[str, str] | None = None) -> tuple[T, list[str]]:
    """``cls`` from a properties file, ``TIDEMQ_*`` variables of ``env`` (default:
    ``os.environ``) and ``overrides``, later ones winning; plus the unknown keys of the file
    and the overrides (variables that name no key are not ours to report)."""
    values: dict[str, Any] = {}
    if path is not None:
        values.update(read_properties(path))
    values.update(env_values(cls, os.environ if env is None else env))
    values.update(overrides or {})
    known = set(config_keys(cls)) | {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(k for k in values if k not in known)
    config, _ = bind(cls, {k: v for k, v in values.items() if k in known})
    return config, unknown
