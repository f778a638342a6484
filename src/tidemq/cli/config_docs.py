"""The description of each field of a config dataclass, read from its source: the ``#:``
comment lines right above the field, as Sphinx reads them. A field declared again in a
subclass takes the subclass's comment. The text is joined into one line, as written (reST
markup and all)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from typing import Any

__all__ = ["field_docs"]


def field_docs(cls: type[Any]) -> dict[str, str]:
    """Field name -> its ``#:`` description (empty when it has none), for every field of
    dataclass ``cls``, inherited ones included."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_docs(klass))
    return {f.name: docs.get(f.name, "") for f in dataclasses.fields(cls)}


def _own_docs(klass: type[Any]) -> dict[str, str]:
    """The ``#:`` comments of the fields declared in ``klass``'s own body."""
    lines, _ = inspect.getsourcelines(klass)
    (node,) = ast.parse(textwrap.dedent("".join(lines))).body
    assert isinstance(node, ast.ClassDef)
    out: dict[str, str] = {}
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            comment: list[str] = []
            row = item.lineno - 2  # the line above, 0-based
            while row >= 0 and lines[row].strip().startswith("#:"):
                comment.insert(0, lines[row].strip()[2:].strip())
                row -= 1
            out[item.target.id] = " ".join(comment)
    return out
