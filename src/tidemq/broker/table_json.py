"""A broker table's JSON file read at start (``consumerOffset.json``,
``subscriptionGroup.json``, ``logicalQueues.json``).

Each is replaced atomically (:func:`~tidemq.store.checkpoint.atomic_write`), so a crash
leaves the old table or the new one. A file that is there but does not read -- empty, cut
short by a disk that lost a write, garbled -- stops the start with
:class:`~tidemq.errors.MetadataUnreadable` naming it: never a start with an empty table
in its place, which the next write would make for good.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tidemq.errors import MetadataUnreadable, ProtocolError

__all__ = ["read_file", "read_table"]

_T = TypeVar("_T")


def read_table(path: Path, shape: Callable[[dict[str, Any]], _T]) -> _T | None:
    """``shape`` of the JSON object ``path`` holds; ``None`` when there is no file. A
    ``shape`` that fails on what it is given (a missing key, a value of the wrong type)
    makes the file unreadable too."""
    return read_file(path, lambda raw: shape(_object(raw)))


def read_file(path: Path, decode: Callable[[bytes], _T]) -> _T | None:
    """``decode`` of the bytes ``path`` holds; ``None`` when there is no file. A file
    ``decode`` fails on stops the start (:class:`~tidemq.errors.MetadataUnreadable`,
    its reason "empty" or what failed)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode(raw)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError,
            ProtocolError) as exc:
        reason = "empty" if not raw.strip() else f"{type(exc).__name__}: {exc}"
        raise MetadataUnreadable(str(path), reason) from None


def _object(raw: bytes) -> dict[str, Any]:
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise TypeError(f"a JSON {type(data).__name__}, not an object")
    return data
