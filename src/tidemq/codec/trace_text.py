"""The text of a trace message in one call each: the ``Pub`` records of a batch whose
messages differ only in their ids (:func:`pub_run`), and the message's ``KEYS`` made from
its records' keys (:func:`unique_words`). Sans-IO; :mod:`tidemq.codec.trace` defines the
record format.

Where the compiled module ``tidemq.formats._crecords`` is built, its ``trace_pub_run`` and
``unique_words`` do the work without a string per record or per key; :func:`py_pub_run`
and :func:`py_unique_words` are their twins, the same text from the same input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from tidemq.formats.record.native import compiled

__all__ = ["NATIVE_TRACE_TEXT", "pub_run", "py_pub_run", "py_unique_words", "unique_words"]

_SEPARATORS = ("\x01", "\x02")


def py_pub_run(mid: str, between: str, ids: str, offsets: str
               ) -> tuple[str, int, int, int]:
    """The records ``ids[i] + mid + offsets[i]`` joined by ``between``, where ``ids`` and
    ``offsets`` are the msgIds and offsetMsgIds of a batch joined by commas (as many of
    each); their number; and the one width of every id and of every offset id (-1: they
    differ, or one is not ASCII). An id holding a trace separator (0x01, 0x02) is a ``ValueError``,
    as is a count of offset ids other than the ids'."""
    if any(s in ids or s in offsets for s in _SEPARATORS):
        raise ValueError("a trace field may not contain 0x01 or 0x02")
    id_list, offset_list = ids.split(","), offsets.split(",")
    if len(id_list) != len(offset_list):
        raise ValueError(f"trace_pub_run: {len(id_list)} ids and {len(offset_list)} "
                         f"offset ids")
    text = between.join(map(mid.join, zip(id_list, offset_list, strict=True)))
    return text, len(id_list), _width(ids, id_list), _width(offsets, offset_list)


def _width(joined: str, parts: list[str]) -> int:
    widths = set(map(len, parts))
    return widths.pop() if len(widths) == 1 and joined.isascii() else -1


def py_unique_words(text: str) -> str:
    """The words of ``text`` (split at spaces, empty ones dropped), each once, in the order
    they first appear, joined by spaces."""
    return " ".join(dict.fromkeys(filter(None, text.split(" "))))


_compiled_pub_run = cast("Callable[[str, str, str, str], tuple[str, int, int, int]] | None",
                         compiled("trace_pub_run"))
_compiled_unique_words = cast("Callable[[str], str] | None", compiled("unique_words"))
#: Whether :func:`pub_run` and :func:`unique_words` are the compiled loops.
NATIVE_TRACE_TEXT = _compiled_pub_run is not None and _compiled_unique_words is not None


def pub_run(mid: str, between: str, ids: str, offsets: str) -> tuple[str, int, int, int]:
    """:func:`py_pub_run`, compiled where it is built. Text that is not UTF-8 (a lone
    surrogate) goes to the twin, which keeps it as it is."""
    if _compiled_pub_run is not None:
        try:
            return _compiled_pub_run(mid, between, ids, offsets)
        except UnicodeEncodeError:
            pass
    return py_pub_run(mid, between, ids, offsets)


def unique_words(text: str) -> str:
    """:func:`py_unique_words`, compiled where it is built (a lone surrogate: the twin)."""
    if _compiled_unique_words is not None:
        try:
            return _compiled_unique_words(text)
        except UnicodeEncodeError:
            pass
    return py_unique_words(text)
