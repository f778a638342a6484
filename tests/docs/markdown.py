"""The repository's Markdown files as the tests under ``tests/docs`` read them: README.md
and every file under ``docs/``, each split into its prose and its fenced code."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Markdown:
    """One file: ``prose`` is its text with every line of a fenced block (fences
    included) blanked, so line numbers still count; ``code`` the blanked lines, numbered
    from 1."""

    path: Path
    prose: str
    code: tuple[tuple[int, str], ...]

    def line_of(self, offset: int) -> int:
        """The line number of a character offset into :attr:`prose`."""
        return self.prose.count("\n", 0, offset) + 1


@cache
def read(path: Path) -> Markdown:
    prose: list[str] = []
    code: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            prose.append("")
        elif fenced:
            code.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    return Markdown(path, "\n".join(prose), tuple(code))


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
