"""The message property string (docs/reference/store.md §1.5, docs/reference/remoting.md §3.1).

Layout (UTF-8 text)::

    name \\x01 value \\x02 name \\x01 value \\x02 ...

* The writer emits ``\\x02`` after every pair, the last included; pairs with an empty
  name or value are skipped.
* The reader splits on ``\\x02``, ignores segments shorter than 3 characters, splits each
  at the first ``\\x01`` and drops pairs with an empty side. A repeated name keeps the
  last value.
* Stored length is a signed short: at most 32 767 bytes.
* Names and values cannot contain either separator: a writer refuses them
  (:func:`property_error`), and a property string whose pairs a reader would split
  differently than they were written is refused (:func:`property_text_error`).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping

from tidemq.errors import CorruptRecord

__all__ = [
    "MAX_PROPERTIES_BYTES",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "PropertyKey",
    "decode_properties",
    "encode_properties",
    "first_broken_pair",
    "index_keys",
    "names_start",
    "parse_checked_property_text",
    "parse_property_text",
    "property_error",
    "property_text",
    "property_text_error",
    "text_without",
    "user_keys",
    "wants_flush",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767


class PropertyKey:
    """Well-known property names."""

    TAGS = "TAGS"
    KEYS = "KEYS"
    UNIQ_KEY = "UNIQ_KEY"
    WAIT = "WAIT"
    DELAY = "DELAY"
    CLUSTER = "CLUSTER"
    INNER_NUM = "INNER_NUM"
    INNER_BASE = "INNER_BASE"
    INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    RETRY_TOPIC = "RETRY_TOPIC"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    SHARDING_KEY = "__SHARDINGKEY"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    TRANSIENT_PREFIX = "__RMQ.TRANSIENT."


def user_keys(props: Mapping[str, str]) -> tuple[str, ...]:
    """The KEYS property split on spaces, empty ones dropped: the keys a message is
    indexed under beside its UNIQ_KEY."""
    keys = props.get("KEYS")
    return tuple(filter(None, keys.split(" "))) if keys else ()


def index_keys(props: Mapping[str, str]) -> tuple[str, ...]:
    """The index keys of a message: its UNIQ_KEY (when it has a non-empty one), then its
    KEYS (:func:`user_keys`)."""
    uniq = props.get("UNIQ_KEY")
    keys = user_keys(props)
    return (uniq, *keys) if uniq else keys


def wants_flush(props: Mapping[str, str]) -> bool:
    """Whether the producer waits for the flush: WAIT, true unless "false" in any case."""
    return props.get("WAIT", "true").lower() != "false"


def encode_properties(props: Mapping[str, str]) -> bytes:
    """Encode ``props`` in insertion order; empty names or values are skipped."""
    return property_text(props).encode("utf-8") if props else b""


def property_text(props: Mapping[str, str]) -> str:
    """:func:`encode_properties` before the UTF-8 encoding: the text a send header
    carries."""
    if not props:
        return ""
    return "".join([f"{name}\x01{value}\x02" for name, value in props.items()
                    if name and value is not None and value != ""])


def text_without(text: str, props: Mapping[str, str], name: str) -> str | None:
    """:func:`property_text` of ``props`` less ``name``, where ``props`` is
    :func:`parse_property_text` of ``text``, cut out of ``text`` itself -- or ``None``
    (encode the pairs instead) unless every segment of ``text`` is a pair of its own
    name: then the text, ended by the separator, is already the pairs' encoding."""
    segments = text.count(PROPERTY_SEPARATOR)
    if text[-1:] != PROPERTY_SEPARATOR:
        text += PROPERTY_SEPARATOR
        segments += 1
    if segments != len(props):  # a pair dropped or a name repeated
        return None
    value = props.get(name)
    if value is None:
        return text
    pair = f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
    if text.startswith(pair):
        return text[len(pair):]
    return text.replace(PROPERTY_SEPARATOR + pair, PROPERTY_SEPARATOR, 1)


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """Decode a property string; invalid UTF-8 raises :class:`CorruptRecord`."""
    if not data:
        return {}
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecord(f"properties are not UTF-8: {exc}") from None
    return parse_property_text(text)


def parse_property_text(text: str) -> dict[str, str]:
    """:func:`decode_properties` of text already decoded: pairs with an empty name or value
    are dropped, the last of a repeated name wins."""
    out: dict[str, str] = {}
    for segment in text.split("\x02"):
        if len(segment) < 3:
            continue
        name, sep, value = segment.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out


_SPLIT_PAIR = operator.methodcaller("split", NAME_VALUE_SEPARATOR)


#: Property strings at least this long are parsed by :func:`_found_pairs` first.
_FOUND_FROM = 2048
#: Pairs :func:`_found_pairs` reads at most before it leaves the text to the split.
_FOUND_PAIRS = 32


def _found_pairs(text: str) -> dict[str, str] | None:
    """The pairs of a long property string with a few long values (a trace message's
    ``KEYS``), its separators found by ``str.find`` (a ``memchr``) rather than a split's
    loop over every character; ``None`` when some pair has an empty side, a segment has
    no or two ``\x01``, or there are more than :data:`_FOUND_PAIRS` pairs: then the
    split and the check decide."""
    out: dict[str, str] = {}
    pos, n = 0, len(text)
    find = text.find
    while pos < n:
        if len(out) == _FOUND_PAIRS:
            return None
        end = find(PROPERTY_SEPARATOR, pos)
        if end < 0:
            end = n
        sep = find(NAME_VALUE_SEPARATOR, pos, end)
        if sep <= pos or sep >= end - 1 or find(NAME_VALUE_SEPARATOR, sep + 1, end) >= 0:
            return None
        out[text[pos:sep]] = text[sep + 1:end]  # a repeated name: the last, as the parse
        pos = end + 1
    return out


def names_start(text: str, starts: tuple[str, ...]) -> bool:
    """Whether a property of ``text`` has a name that starts with one of ``starts`` (a
    start ending in ``\x01`` is a whole name). It may say so of a value too: a text
    under :data:`_FOUND_FROM` characters, or with more than :data:`_FOUND_PAIRS` pairs,
    is searched whole; a long one with a few pairs (a trace message's ``KEYS``) only
    where its names start, after each separator found by ``str.find``, so that its
    thousands of characters are not read once for each start."""
    if len(text) >= _FOUND_FROM:
        pos, find = 0, text.find
        for _ in range(_FOUND_PAIRS):
            if text.startswith(starts, pos):
                return True
            pos = find(PROPERTY_SEPARATOR, pos) + 1
            if not pos:
                return False
    return any(map(text.__contains__, starts))


def parse_checked_property_text(text: str) -> dict[str, str] | str:
    """:func:`parse_property_text` of ``text`` when :func:`property_text_error` accepts
    it, else the error (the same string): the check and the parse in one C-level split
    when no pair has an empty side (each segment must split into one name and one
    value); a long text with a few pairs by :func:`_found_pairs` first."""
    if len(text) >= _FOUND_FROM:
        found = _found_pairs(text)
        if found is not None:
            return found
    if (not text or text[0] == NAME_VALUE_SEPARATOR or text[-1] == NAME_VALUE_SEPARATOR
            or "\x01\x02" in text or "\x02\x01" in text):
        problem = property_text_error(text)  # a pair to drop, or nothing to split
        return parse_property_text(text) if problem is None else problem
    segments = text.split(PROPERTY_SEPARATOR)
    if not segments[-1]:
        segments.pop()
    try:
        return dict(map(_SPLIT_PAIR, segments))
    except ValueError:  # a segment without exactly one separator
        problem = property_text_error(text)
        return parse_property_text(text) if problem is None else problem


def property_error(name: str, value: str) -> str | None:
    """Why the pair ``name = value`` cannot be written, or ``None``: a separator in either
    would split or cut it when read back."""
    for what, text in (("name", name), ("value", value)):
        for sep, label in ((NAME_VALUE_SEPARATOR, "\\x01"), (PROPERTY_SEPARATOR, "\\x02")):
            if sep in text:
                return (f"property {name!r}: the {what} contains {label}, a separator of the "
                        "property string")
    return None


#: A property string every segment of which holds exactly one ``\\x01``, the last
#: ``\\x02`` optional: what :func:`property_text_error` accepts, in one C-level match.
#: Property strings longer than this with at most :data:`_FEW` pairs are checked pair by
#: pair (faster than the match when the values are long).
_LONG = 512
_FEW = 32
_WELL_FORMED = re.compile("(?:[^\x01\x02]*\x01[^\x01\x02]*\x02)*"
                          "(?:[^\x01\x02]*\x01[^\x01\x02]*)?")


def property_text_error(text: str) -> str | None:
    """Why the encoded property string ``text`` would not read back as the pairs it was
    written from, or ``None``. Every segment between ``\\x02`` separators must hold
    exactly one ``\\x01``; only the last separator may be followed by nothing (it may also
    be missing). Pairs with an empty name or value are tolerated (a reader drops them).

    A long string of few pairs (a trace message's ``KEYS``: kilobytes in one value) is
    checked pair by pair, with C-level counts over each value; any other with one
    C-level match."""
    if len(text) > _LONG and text.count(PROPERTY_SEPARATOR) <= _FEW:
        return first_broken_pair(text)
    if _WELL_FORMED.fullmatch(text) is not None:
        return None
    return first_broken_pair(text)


def first_broken_pair(text: str) -> str | None:
    """:func:`property_text_error`, segment by segment: the check's plain twin, which
    also says which pair is broken."""
    if not text:
        return None
    segments = text.split(PROPERTY_SEPARATOR)
    if not segments[-1]:
        segments.pop()
    for i, segment in enumerate(segments):
        if segment.count(NAME_VALUE_SEPARATOR) != 1:
            shown = segment if len(segment) <= 40 else segment[:37] + "..."
            return (f"property pair {i} ({shown!r}) is not one name \\x01 value: a name or "
                    "value holds a separator of the property string (\\x01 or \\x02)")
    return None
