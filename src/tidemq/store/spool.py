"""Columns too long to hold in memory, spilled to files of a temporary directory.

``tidemq store verify`` collects a few numbers per record (where it starts, its size,
queue and queue offset) and per key the index must hold; on a store of a terabyte that
is billions of rows. :class:`SpilledColumns` keeps the last ``chunk`` rows in memory and
appends the rest, column by column, to one file each; :meth:`SpilledColumns.arrays` reads
them back as read-only mapped numpy arrays (the page cache holds them, not the heap), so
what verify holds in memory is a chunk however large the store is. Rows arrive in log
order, so every column keyed by a physical offset is sorted and searchable as it is.
"""

from __future__ import annotations

import array
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = ["CHUNK", "SpilledColumns"]

#: Rows kept in memory before they are appended to the files.
CHUNK = 1 << 16

_DTYPES = {"q": np.int64, "i": np.int32}


class SpilledColumns:
    """Numeric columns of one length (``codes``: name -> ``"q"`` for int64 or ``"i"`` for
    int32), appended row by row to :attr:`cols` by the caller, who calls :meth:`spill`
    when :meth:`full`."""

    def __init__(self, directory: Path, codes: dict[str, str], chunk: int | None = None
                 ) -> None:
        self.directory = directory
        self.chunk = chunk or CHUNK
        self.codes = dict(codes)
        #: The rows not spilled yet, one array per column; cleared in place by a spill,
        #: so a caller may hold on to them.
        self.cols: dict[str, array.array[int]] = {n: array.array(c) for n, c in codes.items()}
        self._files: dict[str, BinaryIO] = {}
        self._spilled = 0
        self._read: dict[str, np.ndarray[Any, Any]] | None = None

    def __len__(self) -> int:
        return self._spilled + len(next(iter(self.cols.values()), ()))

    def full(self) -> bool:
        return len(next(iter(self.cols.values()), ())) >= self.chunk

    def spill(self) -> None:
        """Append the rows held in memory to the files."""
        n = len(next(iter(self.cols.values()), ()))
        if not n:
            return
        for name, buf in self.cols.items():
            if len(buf) != n:
                raise ValueError(f"column {name} has {len(buf)} rows, expected {n}")
        for name, buf in self.cols.items():
            f = self._files.get(name)
            if f is None:
                f = self._files[name] = (self.directory / f"{name}.col").open("wb")
            buf.tofile(f)
            del buf[:]
        self._spilled += n
        self._read = None

    def arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        """Every column as a read-only array: mapped from its file, empty when no row was
        added. Rows added later need another call."""
        if self._read is None or len(next(iter(self.cols.values()), ())):
            self.spill()
            out: dict[str, np.ndarray[Any, Any]] = {}
            for name, code in self.codes.items():
                f = self._files.get(name)
                if f is None:
                    out[name] = np.empty(0, dtype=_DTYPES[code])
                    continue
                f.flush()
                out[name] = np.memmap(f.name, dtype=_DTYPES[code], mode="r",
                                      shape=(self._spilled,))
            self._read = out
        return self._read

    def close(self) -> None:
        self._read = None
        for f in self._files.values():
            f.close()
        self._files.clear()
