"""Bodies that Java's fastjson writes and a JSON reader refuses (sans-IO).

fastjson serialises a ``Map`` whose keys are objects with those objects as keys: a Java
consumer's GET_CONSUMER_RUNNING_INFO answer has ``"mqTable":{{"brokerName":"b",
"queueId":0,"topic":"T"}:{"cachedMsgCount":0,...}}``, and numeric keys go unquoted
(``{0:"10.0.0.1:10911"}``). :func:`loads` reads standard JSON plus both:

* a bare number as a key becomes its text (``{0: x}`` -> ``{"0": x}``), as
  :mod:`tidemq.codec.bodies` reads it;
* a map with an object or array key becomes a list of rows, one per entry: the key's
  and the value's members merged when both are objects (``{**key, **value}``, which is how
  TideMQ itself writes such tables), else ``{"key": key, "value": value}``.

Anything else that is not JSON raises :class:`ValueError` with the position.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "loads"]

#: Deeper nesting is refused (bodies are small; the reader recurses).
MAX_DEPTH = 256

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


def loads(data: str | bytes | bytearray | memoryview) -> Any:
    """The value in ``data`` (UTF-8 when bytes); see the module docstring. Standard JSON
    is read by :func:`json.loads` (a body of thousands of groups in a fraction of the
    time), anything else by this module's reader."""
    text = bytes(data).decode() if not isinstance(data, str) else data
    try:
        standard = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        pass  # fastjson's own forms, or not JSON at all: the reader below says where
    else:
        if _within_depth(standard):
            return standard
    value, end = _value(text, _skip(text, 0), 0)
    end = _skip(text, end)
    if end != len(text):
        raise ValueError(f"extra data at position {end}")
    return value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _within_depth(value: Any) -> bool:
    """Whether ``value`` nests at most :data:`MAX_DEPTH` deep (as the reader allows)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth > MAX_DEPTH:
            return False
        stack.extend((child, depth + 1) for child in item
                     if isinstance(child, (dict, list)))
    return True


def _skip(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _value(text: str, pos: int, depth: int) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} at position {pos}")
    char = text[pos:pos + 1]
    if char == "{":
        return _object(text, pos + 1, depth + 1)
    if char == "[":
        return _array(text, pos + 1, depth + 1)
    if char == '"':
        return json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined,no-any-return]
    number = _NUMBER.match(text, pos)
    if number is not None:
        literal = number.group()
        return (float(literal) if number.group(1) or number.group(2) else int(literal),
                number.end())
    for word, value in _LITERALS.items():
        if text.startswith(word, pos):
            return value, pos + len(word)
    raise ValueError(f"expected a value at position {pos}")


def _array(text: str, pos: int, depth: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    pos = _skip(text, pos)
    if text.startswith("]", pos):
        return items, pos + 1
    while True:
        item, pos = _value(text, pos, depth)
        items.append(item)
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif text.startswith("]", pos):
            return items, pos + 1
        else:
            raise ValueError(f"expected ',' or ']' at position {pos}")


def _object(text: str, pos: int, depth: int) -> tuple[Any, int]:
    entries: list[tuple[Any, Any]] = []
    pos = _skip(text, pos)
    if text.startswith("}", pos):
        return {}, pos + 1
    while True:
        key, pos = _value(text, pos, depth)
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise ValueError(f"expected ':' at position {pos}")
        value, pos = _value(text, _skip(text, pos + 1), depth)
        entries.append((key, value))
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif text.startswith("}", pos):
            return _mapping(entries), pos + 1
        else:
            raise ValueError(f"expected ',' or '}}' at position {pos}")


def _mapping(entries: list[tuple[Any, Any]]) -> Any:
    if any(isinstance(key, (dict, list)) for key, _ in entries):
        return [{**key, **value} if isinstance(key, dict) and isinstance(value, dict)
                else {"key": key, "value": value} for key, value in entries]
    out: dict[str, Any] = {}
    for key, value in entries:
        if isinstance(key, bool) or key is None:
            raise ValueError(f"a map key must be text, a number or an object, not {key!r}")
        out[key if isinstance(key, str) else json.dumps(key)] = value
    return out
