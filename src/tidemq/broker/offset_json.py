"""The committed offsets' JSON (``{"offsetTable": {"topic@group": {"0": 42}}}``), and any
JSON of one large table (the subscription groups'), encoded a slice of the table at a
time.

``json.dumps`` encodes in C without letting another thread run: the whole table of a
broker with thousands of groups in one call would hold the interpreter, and so the
event loop, however the call was moved to a thread. :func:`offset_table_json` encodes
:data:`SLICE` keys a call, the same bytes as one ``json.dumps(..., sort_keys=True)``
(:func:`table_json` any such table beside a few small members);
:func:`load_offset_json` (:func:`load_table_json` any such table) reads such a body a
key at a time, the value of one ``json.loads``.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["COMPACT", "SLICE", "SPACED", "load_offset_json", "load_table_json",
           "offset_table_json", "table_json"]

#: ``json.dumps``'s separators: the offsets file's.
SPACED = (", ", ": ")
#: The wire's (GET_ALL_CONSUMER_OFFSET's body).
COMPACT = (",", ":")
#: Keys of the table one ``json.dumps`` call encodes; ten times as many are sorted a call.
SLICE = 500


def offset_table_json(table: Mapping[str, Mapping[str, int]],
                      separators: tuple[str, str] = SPACED, *, slice_keys: int = SLICE) -> bytes:
    """``json.dumps({"offsetTable": table}, sort_keys=True, separators=separators)``,
    encoded ``slice_keys`` keys of ``table`` a call. ``table`` must not change meanwhile
    (give it a copy)."""
    return table_json("offsetTable", table, separators=separators, slice_keys=slice_keys)


def table_json(name: str, table: Mapping[str, Any], others: Mapping[str, Any] | None = None,
               separators: tuple[str, str] = SPACED, *, slice_keys: int = SLICE) -> bytes:
    """``json.dumps({**others, name: table}, sort_keys=True, separators=separators)``,
    encoded ``slice_keys`` keys of ``table`` a call (``others``, a few small members,
    in one call each), each slice's bytes kept apart until one join makes the body (a
    copy of megabytes holds the interpreter too: one, not one a step). Neither may
    change meanwhile (give copies)."""
    item_sep, key_sep = separators
    sep = item_sep.encode()
    keys = _sorted(list(table), slice_keys * 10)
    inner: list[bytes] = []
    for start in range(0, len(keys), slice_keys):
        part = json.dumps({k: table[k] for k in keys[start:start + slice_keys]},
                          sort_keys=True, separators=separators)
        if inner:
            inner.append(sep)
        inner.append(part[1:-1].encode())  # without the braces: the slices make one map
    members = {member: [json.dumps(value, sort_keys=True, separators=separators).encode()]
               for member, value in (others or {}).items()}
    members[name] = [b"{", *inner, b"}"]
    out = [b"{"]
    for member in sorted(members):
        if len(out) > 1:
            out.append(sep)
        out.append(f"{json.dumps(member)}{key_sep}".encode())
        out.extend(members[member])
    out.append(b"}")
    return b"".join(out)


def _sorted(keys: list[str], run: int) -> list[str]:
    """``sorted(keys)``: ``run`` keys sorted a call, the runs merged in Python (one sort
    of a hundred thousand keys holds the interpreter for tens of milliseconds)."""
    if len(keys) <= run:
        return sorted(keys)
    return list(heapq.merge(*(sorted(keys[start:start + run])
                              for start in range(0, len(keys), run))))


#: A JSON object's members, each left undecoded.
_members = msgspec.json.Decoder(dict[str, msgspec.Raw])


def load_offset_json(body: bytes | bytearray | memoryview) -> Any:
    """``json.loads(body)``, the entries of its ``offsetTable`` decoded one call each."""
    return load_table_json(body, "offsetTable")


def load_table_json(body: bytes | bytearray | memoryview, name: str) -> Any:
    """``json.loads(body)``, the entries of its member ``name`` decoded one call each:
    the body is first split into its members undecoded (one pass in C that builds no
    objects). A body of another shape, or one the split does not take, is decoded
    whole."""
    data = bytes(body)
    try:
        top = _members.decode(data)
        table = top.pop(name, None)
        entries = _members.decode(table) if table is not None else None
    except msgspec.MsgspecError:
        return json.loads(data)
    if entries is None:
        return json.loads(data)
    out = {member: json.loads(bytes(raw)) for member, raw in top.items()}
    out[name] = {key: json.loads(bytes(raw)) for key, raw in entries.items()}
    return out
