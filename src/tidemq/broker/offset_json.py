"""The committed offsets' JSON (``{"offsetTable": {"topic@group": {"0": 42}}}``), and any
JSON of one large table (the subscription groups'), encoded a slice of the table at a
time.

``json.dumps`` encodes in C without letting another thread run: the whole table of a
broker with thousands of groups in one call would hold the interpreter, and so the
event loop, however the call was moved to a thread. :func:`offset_json_parts` encodes the
live offsets table (no copy of it) :data:`ENTRY_SLICE` keys a call of the compiled
:func:`offset_entries` (its twin :func:`py_offset_entries`), into parts never joined:
the file's writes and the answer's transport take them as they are. :func:`table_json`
encodes any table beside a few small members, :data:`SLICE` keys a ``json.dumps`` call,
the bytes of one ``json.dumps(..., sort_keys=True)``; :func:`load_offset_json`
(:func:`load_table_json` any such table) reads such a body a key at a time, the value of
one ``json.loads``.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import msgspec

from tidemq.formats.record.native import compiled

__all__ = ["COMPACT", "ENTRY_SLICE", "SLICE", "SPACED", "load_offset_json", "load_table_json",
           "offset_entries", "offset_json_parts", "py_offset_entries", "table_json"]

#: ``json.dumps``'s separators: the offsets file's.
SPACED = (", ", ": ")
#: The wire's (GET_ALL_CONSUMER_OFFSET's body).
COMPACT = (",", ":")
#: Keys of the table one ``json.dumps`` call encodes; ten times as many are sorted a call.
SLICE = 500


#: Keys of the offsets table one compiled call encodes (well under a millisecond's work).
ENTRY_SLICE = 4096

OffsetTable = Mapping[str, Mapping[int, int]]

_compiled_entries = cast("Callable[..., bytes | None] | None", compiled("offset_entries_json"))


def py_offset_entries(table: OffsetTable, keys: Sequence[str], start: int, stop: int,
                      item_sep: bytes, key_sep: bytes) -> bytes:
    """The members of the offsets' JSON map for ``keys[start:stop]`` that ``table`` holds,
    in that order, each queue map in its own order, joined by ``item_sep``: the bytes of
    ``json.dumps`` of those entries between its braces."""
    separators = (item_sep.decode(), key_sep.decode())
    parts = []
    for key in keys[start:stop]:
        queues = table.get(key)
        if queues is not None:
            parts.append(f"{json.dumps(key)}{separators[1]}"
                         f"{json.dumps(queues, separators=separators)}")
    return separators[0].join(parts).encode()


def offset_entries(table: OffsetTable, keys: Sequence[str], start: int, stop: int,
                   item_sep: bytes, key_sep: bytes) -> bytes:
    """:func:`py_offset_entries`, in C where it is built and the slice is the usual kind
    (printable ASCII keys, int queue ids and offsets of a dict); one call holds the
    interpreter for the slice only."""
    if _compiled_entries is not None and type(table) is dict and type(keys) is list:
        out = _compiled_entries(table, keys, start, stop, item_sep, key_sep)
        if out is not None:
            return out
    return py_offset_entries(table, keys, start, stop, item_sep, key_sep)


def offset_json_parts(table: OffsetTable, keys: Sequence[str],
                      separators: tuple[str, str] = SPACED, *,
                      slice_keys: int = ENTRY_SLICE) -> list[bytes]:
    """``{"offsetTable": {...}}`` of the entries of ``table`` that ``keys`` names, in
    their order, in parts (their concatenation is the body). ``table`` may change
    meanwhile (it is read a slice at a time: each entry as it is when its slice is
    encoded, one no longer there left out); ``keys`` only grow at the end."""
    item_sep, key_sep = (sep.encode() for sep in separators)
    parts = [b'{"offsetTable"' + key_sep + b"{"]
    for start in range(0, len(keys), slice_keys):
        part = offset_entries(table, keys, start, start + slice_keys, item_sep, key_sep)
        if part:
            if len(parts) > 1:
                parts.append(item_sep)
            parts.append(part)
    parts.append(b"}}")
    return parts


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
