"""The garbage collector's settings in a server process (name server, broker, standalone).

A broker allocates many short-lived container objects on its hot paths (a dispatch
round's rows and batches, a request's headers and futures): young collections are made
rarer (:data:`THRESHOLDS`). Whatever is alive once the process is set up is frozen out of
the collector's scans (``gc.freeze``), so that a full collection walks only what was made
since, and holds the GIL -- every thread of the process stops -- that much shorter.

``tidemq bench dispatch`` runs its store under the same settings (:func:`server_gc`),
with its pre-built messages frozen as a broker's start-up objects are: a full collection
over them would stop the dispatcher for as long as a broker's never does.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["THRESHOLDS", "server_gc", "tune_gc"]

#: ``gc.set_threshold`` of a server process: a young collection every 20,000 container
#: allocations net, a middle one every 20 of those, a full one every 50 middle ones.
THRESHOLDS = (20_000, 20, 50)


def tune_gc() -> None:
    """Freeze what is alive now out of every later collection, and set :data:`THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


@contextlib.contextmanager
def server_gc() -> Iterator[None]:
    """:func:`tune_gc` for the block; the thresholds before it and an unfrozen heap after."""
    old = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
