"""A JSON array written an element at a time, for commands whose rows may not fit in
memory together (the messages of a kept cut): the text is the one ``json.dumps(rows,
indent=2)`` would give for the whole list, ended by a newline."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

__all__ = ["JsonRows"]


class JsonRows:
    """:meth:`add` each row as it is decided, then :meth:`close` -- or use it as a context
    manager, which closes it whole unless an exception ends the block."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.count = 0

    def add(self, row: Any) -> None:
        # the element as json.dumps(rows, indent=2) writes it inside the array
        self.out.write(("[\n" if not self.count else ",\n")
                       + json.dumps([row], indent=2)[2:-2])
        self.count += 1

    def close(self, whole: bool = True) -> None:
        """End the array of the rows written; ``[]`` when none was and the output is
        ``whole`` (not cut short by an error, when nothing is written)."""
        if self.count:
            self.out.write("\n]\n")
        elif whole:
            self.out.write("[]\n")
        self.out.flush()

    def __enter__(self) -> JsonRows:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.close(whole=exc_type is None)
