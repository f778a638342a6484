"""Every relative link in README.md and docs/ reaches a file of the repository, and every
``#fragment`` of a link to a Markdown file names a heading of that file, as GitHub makes
the heading's anchor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.docs.markdown import ROOT, markdown_files, read

#: The target of an inline link or image: ``](target)`` or ``](target "title")``.
_LINK = re.compile(r"\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: its text without code marks and link targets,
    lower-cased, every character but letters, digits, ``_``, ``-`` and spaces dropped,
    and spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.replace("`", ""))
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a file's headings; a repeated heading's get ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for match in _HEADING.finditer(read(path).prose):
        base = anchor(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each link of ``path`` that does not resolve within ``root``, as ``file:line:
    target (why)``."""
    doc = read(path)
    root = root.resolve()
    name = path.resolve().relative_to(root).as_posix()
    broken = []
    for match in _LINK.finditer(doc.prose):
        target = match.group(1)
        if _SCHEME.match(target):
            continue
        file, _, fragment = target.partition("#")
        goal = (path.parent / file).resolve() if file else path.resolve()
        where = f"{name}:{doc.line_of(match.start())}: {target}"
        if not goal.is_relative_to(root):
            broken.append(f"{where} (outside the repository)")
        elif not goal.exists():
            broken.append(f"{where} (no such file)")
        elif fragment and goal.suffix == ".md" and fragment not in anchors(goal):
            broken.append(f"{where} (no such heading in {goal.relative_to(root).as_posix()})")
    return broken


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_anchors_are_githubs() -> None:
    assert anchor("One call per message: produce()") == "one-call-per-message-produce"
    assert anchor("Light message queues (RIP-28)") == "light-message-queues-rip-28"
    assert anchor("The `lmqKnownQueues` table") == "the-lmqknownqueues-table"
    assert anchor("Produce, consume, latency") == "produce-consume-latency"


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    """The check itself: a missing file, a missing heading and a bold paragraph taken for
    a heading are each reported; a heading, an absolute URL and a link in code are not."""
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n\n**Not a heading** text\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#a-part) [ok](#page) [web](https://example.org/x#y)\n"
        "[gone](missing.md) [no](other.md#nowhere)\n[bold](other.md#not-a-heading)\n"
        "```\n[code](missing.md)\n```\n")
    found = broken_links(page, tmp_path)
    assert found == ["page.md:4: missing.md (no such file)",
                     "page.md:4: other.md#nowhere (no such heading in other.md)",
                     "page.md:5: other.md#not-a-heading (no such heading in other.md)"]
