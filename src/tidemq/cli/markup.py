"""The server commands' lines on stderr, written in rich's console markup
(``[red]error:[/] ...``) without loading rich where nobody sees the styles.

On a terminal a line goes through rich's console, styled and wrapped to the terminal's
width. Anywhere else (a log file, a pipe, the process that started the server) rich
would print the same text without styles; :func:`plain` gives that text without
importing rich, which a server process would otherwise load for these few lines alone,
and the line is written whole, not wrapped at 80 columns. Emoji codes (``:smile:``),
which rich would replace, are left as they are.
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any

__all__ = ["counted", "escape", "plain", "say"]

#: rich's markup tags (``rich.markup.RE_TAGS``): a tag, and the backslashes before it.
_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")


#: What rich reads as a tag in inserted text (``rich.markup.escape``'s pattern).
_TAG_LIKE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun`` in English: "1 message", "0 messages", "1,200 queues".
    ``noun`` is singular and takes a plain ``s``."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def escape(text: str) -> str:
    """``text`` as markup that reads back as ``text``, on a terminal and in :func:`plain`
    alike (``rich.markup.escape``): a bracket that would open or close a tag gets a
    backslash, and the backslashes before it are doubled. Whatever a line quotes --
    an error's message, a name, a path -- goes through it: ``[/x]`` in a value would
    otherwise vanish, or make rich refuse the whole line."""
    text = _TAG_LIKE.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", text)
    if text.endswith("\\") and not text.endswith("\\\\"):
        return text + "\\"
    return text


def plain(markup: str) -> str:
    """``markup``'s text, as ``rich.markup.render(markup).plain`` gives it: its tags
    removed, an escaped bracket (``\\[b]``) kept without its backslash. Unlike rich, a
    closing tag that closes nothing is dropped too, not an error."""
    if "[" not in markup:
        return markup
    pieces: list[str] = []
    position = 0
    for match in _TAG.finditer(markup):
        start, end = match.span()
        pieces.append(markup[position:start])
        backslashes, escaped = divmod(len(match.group(1)), 2)
        pieces.append("\\" * backslashes)
        if escaped:
            pieces.append(match.group(0)[len(match.group(1)):])
        position = end
    pieces.append(markup[position:])
    # a bracket escaped outside a tag loses its backslash, piece by piece as in rich
    return "".join(piece.replace("\\[", "[") for piece in pieces)


def say(markup: str) -> None:
    """Write ``markup`` as a line on stderr: styled on a terminal, its plain text
    otherwise."""
    stream = sys.stderr
    if stream.isatty():
        _console().print(markup)
    else:
        stream.write(plain(markup) + "\n")
        stream.flush()


@functools.cache
def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True)
