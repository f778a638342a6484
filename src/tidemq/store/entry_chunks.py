"""The fixed-size entries of a store file read a chunk at a time, for ``tidemq store
verify``: a consume queue, a batch consume queue or an index file is never read whole, so
what verify holds of one is :data:`~tidemq.store.spool.CHUNK` entries however long it
grew. Each chunk is a numpy array over bytes read from the file (not a mapping: nothing
stays open between chunks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tidemq.store import spool

__all__ = ["entry_chunks", "valid_prefix"]


def entry_chunks(path: Path, dtype: np.dtype[Any], *, start: int = 0,
                 count: int | None = None, rows: int | None = None
                 ) -> Iterator[np.ndarray[Any, Any]]:
    """The whole entries of ``dtype`` in ``path`` from byte ``start`` (at most ``count``
    of them), in order, ``rows`` (default :data:`~tidemq.store.spool.CHUNK`) at a time; a
    trailing partial entry is left out."""
    unit = dtype.itemsize
    rows = max(rows or spool.CHUNK, 1)
    left = count
    with path.open("rb") as f:
        f.seek(start)
        while left is None or left > 0:
            want = rows if left is None else min(rows, left)
            data = f.read(want * unit)
            got = len(data) // unit
            if not got:
                return
            yield np.frombuffer(data, dtype=dtype, count=got)
            if left is not None:
                left -= got
            if got < want:
                return


def valid_prefix(path: Path, dtype: np.dtype[Any],
                 valid_bytes: Callable[[np.ndarray[Any, Any]], int]) -> int:
    """``valid_bytes`` (the bytes of valid entries at the start of an array of entries)
    of the whole file ``path``, read a chunk at a time."""
    total = 0
    for chunk in entry_chunks(path, dtype):
        valid = valid_bytes(chunk)
        total += valid
        if valid < len(chunk) * dtype.itemsize:
            break
    return total
