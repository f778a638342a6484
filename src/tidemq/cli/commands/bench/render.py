"""The one renderer of ``tidemq bench`` results.

A command turns its result into a :class:`Report`: tables and lines of rich markup in the
order they are printed, and the structure written with ``--json``. :func:`show` prints
the report and writes the JSON. The figure formatters (``ms``, ``pct`` ...) are shared so
that a missing figure reads ``-`` everywhere.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

__all__ = ["Line", "Report", "Table", "console", "figures", "met", "ms", "num", "pct", "say",
           "show", "threads", "us", "verdicts"]

console = Console()


@dataclasses.dataclass(slots=True)
class Table:
    """Rows of cells under ``columns``: the first ``left`` columns are left-justified,
    the others right-justified."""

    title: str
    columns: Sequence[str]
    rows: list[Sequence[str]] = dataclasses.field(default_factory=list)
    left: int = 1
    header: bool = True

    def add(self, *cells: str) -> None:
        self.rows.append(cells)


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    """One line of rich markup; ``soft_wrap`` leaves long lines to the terminal."""

    text: str
    soft_wrap: bool = False


Block = Table | Line


@dataclasses.dataclass(slots=True)
class Report:
    """What a bench command prints after its run, and what ``--json`` writes."""

    data: dict[str, Any]
    blocks: list[Block] = dataclasses.field(default_factory=list)

    def table(self, table: Table) -> Table:
        self.blocks.append(table)
        return table

    def line(self, text: str, *, soft_wrap: bool = False) -> None:
        self.blocks.append(Line(text, soft_wrap))

    def lines(self, texts: Iterable[str]) -> None:
        self.blocks.extend(Line(text) for text in texts)


def show(report: Report, json_out: Path | None) -> None:
    """Print every block of ``report``, then write its data to ``json_out`` if given."""
    for block in report.blocks:
        if isinstance(block, Line):
            console.print(block.text, soft_wrap=block.soft_wrap)
        else:
            console.print(_rich(block))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report.data, indent=2))
        console.print(f"JSON written to {json_out}")


def _rich(table: Table) -> RichTable:
    out = RichTable(title=table.title, show_header=table.header)
    for i, column in enumerate(table.columns):
        out.add_column(column, justify="left" if i < table.left else "right")
    for row in table.rows:
        out.add_row(*row)
    return out


def say(line: str) -> None:
    """A progress line of plain text, printed as it comes."""
    console.print(escape(line), soft_wrap=True)


def figures(title: str, rows: Iterable[tuple[str, str]], *, header: bool = True) -> Table:
    """A two-column table of named figures."""
    return Table(title, ("figure", "value"), list(rows), header=header)


def verdicts(results: dict[str, dict[str, Any]]) -> list[str]:
    """One line per target: the value, the target and whether it is met."""
    return [f"{key}: {v['value']:,.3g} (target {v['target']:,}) {met(v['met'])}"
            for key, v in results.items()]


def threads(rows: Sequence[dict[str, Any]], limit: int = 5) -> str:
    """The busiest ``limit`` threads of a :func:`~tidemq.bench.process.thread_cpu_split`:
    each one's share of a core, then its user and kernel nanoseconds per message."""
    return "; ".join(
        f"{t['thread']} {t['cpu_pct']:.0f}% user {num(t.get('user_ns_per_msg'))} "
        f"sys {num(t.get('sys_ns_per_msg'))} ns/msg" for t in rows[:limit])


def met(ok: bool, missed: str = "NOT met") -> str:
    return "[green]met[/]" if ok else f"[red]{missed}[/]"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def num(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)
