"""Properties files a server writes for itself (the keys changed at run time): Java
properties text that tells a complete file from one a damaged disk cut short.

The properties format has no end: a file cut inside its last line reads as a shorter
value, one cut between lines as fewer keys. A server replaces such a file whole and
atomically, so a cut file can only come from a damaged disk. Each file it writes
therefore begins with a comment line saying that its last line is ``# end``, and ends
with that line: a file that begins so and lacks it is refused. Both are comments, so the
file stays properties text anyone can read and edit (deleting a key's line keeps the
end). A file without the first line (written before it existed, or by hand) is read
when its last line is whole: ends with a line break.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import parse_properties, properties_text

__all__ = ["END_LINE", "kept_text", "parse_kept", "read_kept"]

#: The last line of a complete file.
END_LINE = "# end"


def kept_text(first_line: str, header: str, props: Mapping[str, str]) -> str:
    """The file of ``props``: ``first_line`` (a comment that announces the end line,
    without its line break), ``header`` (comment lines), the keys, :data:`END_LINE`."""
    return f"{first_line}\n{header}{properties_text(props)}{END_LINE}\n"


def parse_kept(text: str, first_line: str, *, name: str, key: str) -> dict[str, str]:
    """The keys of ``text``, the content of the file ``name`` that :func:`kept_text` with
    ``first_line`` writes; a :class:`~tidemq.errors.ConfigError` (with ``key``, the key
    that says where the file is) naming the file when it was cut short."""
    if text.rstrip("\r\n \t").rpartition("\n")[2].strip() == END_LINE:
        return parse_properties(text)
    if not text:
        problem = "is empty"
    elif text.startswith(first_line + "\n") or text.startswith(first_line + "\r"):
        problem = f"ends before its last line {END_LINE!r}"
    elif text.endswith(("\n", "\r")):
        return parse_properties(text)
    else:
        problem = "ends inside a line"
    raise ConfigError(
        f"{name} {problem}: cut short (a damaged disk?), so some of its keys may be lost "
        f"or shortened; check them against what was changed at run time, then end the "
        f"file with the line {END_LINE!r}, or delete it to go back to the properties file",
        key=key)


def read_kept(path: Path, first_line: str, *, key: str) -> dict[str, str]:
    """The keys of the file at ``path`` (none when there is none), which :func:`kept_text`
    with ``first_line`` writes; a :class:`~tidemq.errors.ConfigError` (with ``key``, the
    key that says where the file is) naming the file when it does not read, is not UTF-8
    or was cut short."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # a file where a directory should
        return {}  # be holds none: the start names that path when it needs it
    except OSError as exc:
        raise ConfigError(f"{path} does not read: {exc}", key=key) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 properties text: {exc}", key=key) from None
    return parse_kept(text, first_line, name=str(path), key=key)
