"""Properties files a server writes for itself: every cut of one is refused or reads
back whole; files written before the end line, or by hand, still read."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import parse_properties, properties_text
from tidemq.formats.kept_properties import END_LINE, kept_text, parse_kept, read_kept

FIRST = "# Keys kept by a test; its last line is '# end'."
HEADER = "# a second comment line\n"

_keys = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1,
                max_size=12)
_values = st.text(st.characters(codec="utf-8"), max_size=20)


def _parse(text: str) -> dict[str, str]:
    return parse_kept(text, FIRST, name="kept.properties", key="where")


@given(st.dictionaries(_keys, _values, max_size=5), st.data())
def test_every_cut_is_refused_or_reads_back_whole(props: dict[str, str],
                                                   data: st.DataObject) -> None:
    text = kept_text(FIRST, HEADER, props)
    assert _parse(text) == props and text.endswith(f"\n{END_LINE}\n")
    cut = data.draw(st.integers(0, len(text) - 1))
    try:
        read = _parse(text[:cut])
    except ConfigError as exc:
        assert "kept.properties" in str(exc) and "cut short" in str(exc)
        assert exc.key == "where"
    else:  # only the final line break may go
        assert (cut, read) == (len(text) - 1, props)


@given(st.dictionaries(_keys, _values, min_size=1, max_size=5), st.data())
def test_a_zero_filled_tail_is_refused(props: dict[str, str], data: st.DataObject) -> None:
    text = kept_text(FIRST, HEADER, props)
    start = data.draw(st.integers(0, len(text) - 1))
    with pytest.raises(ConfigError, match="cut short"):
        _parse(text[:start] + "\0" * data.draw(st.integers(1, len(text))))


@given(st.dictionaries(_keys, _values, max_size=5))
def test_files_without_the_first_line_read_when_their_last_line_is_whole(
        props: dict[str, str]) -> None:
    old = "# Keys kept by a test.\n" + properties_text(props)
    assert _parse(old) == parse_properties(old) == props


def test_a_hand_edit_that_keeps_the_end_reads() -> None:
    text = kept_text(FIRST, HEADER, {"a": "1", "b": "2"})
    assert _parse(text.replace("a=1\n", "")) == {"b": "2"}
    assert _parse(text.rstrip("\n") + "  \r\n") == {"a": "1", "b": "2"}


@pytest.mark.parametrize(("text", "problem"), [
    ("", "is empty"),
    ("# Keys kept\nmaxPullBytes=12", "ends inside a line"),
    (f"{FIRST}\nmaxPullBytes=12\n", "ends before its last line '# end'"),
    (f"{FIRST}\n{HEADER}a=1\n# en", "ends before its last line '# end'"),
])
def test_what_was_cut_is_said(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        _parse(text)
    assert str(err.value).startswith(f"kept.properties {problem}: cut short"), err.value


def test_a_file_below_a_file_is_none(tmp_path: Path) -> None:
    """Where a directory of the path is a file, there is no file to read: the server's
    start then names the directory it cannot use, not this file."""
    (tmp_path / "store").write_text("a file")
    assert read_kept(tmp_path / "store" / "overrides.properties", FIRST, key="k") == {}
