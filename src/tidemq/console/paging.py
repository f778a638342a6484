"""One page of a long list (the topics, the groups), filtered by a name fragment.

A cluster with thousands of topics or groups would otherwise ask the brokers for every
row's figures on each visit; a page asks only for the rows it shows. Nothing here does
I/O.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

__all__ = ["PAGE_SIZE", "Page", "matching", "page_of"]

#: Rows a list page shows.
PAGE_SIZE = 100

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Page(Generic[_T]):
    """``rows`` of ``total`` matching ``query``; ``number`` counts from 1 of ``pages``
    (at least 1, an empty list too); ``listed``: the rows before the filter."""

    rows: list[_T]
    number: int
    pages: int
    total: int
    listed: int
    query: str
    keep: tuple[tuple[str, str], ...] = ()

    def href(self, number: int) -> str:
        """The link to page ``number`` of the same filter (and the page's other
        parameters, ``keep``)."""
        params = [*self.keep, *((("q", self.query),) if self.query else ()),
                  ("page", str(number))]
        return "?" + urllib.parse.urlencode(params)


def _number(raw: str | None) -> int:
    try:
        return max(1, int(raw or "1"))
    except ValueError:
        return 1


def page_of(items: Sequence[_T], params: Mapping[str, str], name: Callable[[_T], str], *,
            size: int = PAGE_SIZE, keep: Sequence[tuple[str, str]] = ()) -> Page[_T]:
    """The page ``params`` ask for (``page``, from 1; past the end: the last) of the
    ``items`` whose ``name`` holds ``params["q"]``, case aside."""
    query = (params.get("q") or "").strip()
    found = matching(items, params, name)
    pages = max(1, -(-len(found) // size))
    number = min(_number(params.get("page")), pages)
    start = (number - 1) * size
    return Page(rows=found[start:start + size], number=number, pages=pages,
                total=len(found), listed=len(items), query=query, keep=tuple(keep))


def matching(items: Sequence[_T], params: Mapping[str, str], name: Callable[[_T], str]
             ) -> list[_T]:
    """The ``items`` whose ``name`` holds ``params["q"]``, case aside, in order."""
    needle = (params.get("q") or "").strip().casefold()
    return [item for item in items if needle in name(item).casefold()] if needle \
        else list(items)
