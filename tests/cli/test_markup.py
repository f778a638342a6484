"""A server command's line where no terminal shows styles is the text rich would print
there: :func:`tidemq.cli.markup.plain` against rich's own markup parser."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import render

from tidemq.cli.markup import counted, plain, say

#: Texts made of tags, escapes and brackets in every order (no colons: rich replaces
#: emoji codes, which :func:`plain` leaves as they are).
PIECES = st.sampled_from(["[red]", "[/]", "[/red]", "[bold green]", "[#ff0000]", "[@click]",
                          "[a=b]", "\\", "\\\\", "[", "]", "[X]", "[1]", "x", " ", "error",
                          "[red", "é", "\n"])


@given(st.lists(PIECES, max_size=12).map("".join))
def test_plain_is_the_text_rich_renders(markup: str) -> None:
    try:
        expected = render(markup).plain
    except MarkupError:  # rich refuses a closing tag that closes nothing; plain drops it
        return
    assert plain(markup) == expected


@pytest.mark.parametrize("markup", [
    "[bold green]TideMQ standalone is running[/]\n  name server  127.0.0.1:9876",
    "[red]error:[/] listenPort: not a number: 'x'", "shutting down ...",
    "[yellow]warning:[/] unknown configuration key 'nope' (ignored)"])
def test_a_line_where_no_terminal_shows_styles_is_what_rich_prints(
        markup: str, capsys: pytest.CaptureFixture[str]) -> None:
    say(markup)
    shown = io.StringIO()
    Console(file=shown, width=400).print(markup)
    assert capsys.readouterr().err == shown.getvalue()


@given(st.lists(PIECES, max_size=12).map("".join))
def test_escape_is_riches_and_reads_back_as_the_text(text: str) -> None:
    from rich.markup import escape as rich_escape

    from tidemq.cli.markup import escape

    escaped = escape(text)
    assert escaped == rich_escape(text)
    if "\\" not in text:  # rich reads a backslash before a bracket as an escape, even here
        inside = f"[red]{escaped}[/]"
        assert plain(inside) == render(inside).plain == text


@pytest.mark.parametrize(("count", "text"), [(0, "0 messages"), (1, "1 message"),
                                             (2, "2 messages"), (1200, "1,200 messages")])
def test_a_count_agrees_with_its_noun(count: int, text: str) -> None:
    assert counted(count, "message") == text
