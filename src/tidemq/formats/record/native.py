"""The compiled module ``tidemq.formats._crecords``, where it was built and is not ignored
(``TIDEMQ_NO_NATIVE=1``), for the modules that keep a twin of one of its functions.

Loading it needs the standard library only: a header codec or a name server takes a
compiled function from here without importing numpy. :mod:`.loops` proves on its import
that the module writes the bytes its twins write.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import cast

__all__ = ["MODULE", "compiled"]


def _load() -> ModuleType | None:
    if os.environ.get("TIDEMQ_NO_NATIVE") == "1":
        return None
    try:
        from tidemq.formats import _crecords
    except ImportError:
        return None
    return _crecords


#: The compiled module (``None``: not built, or ignored).
MODULE = _load()


def compiled(name: str) -> Callable[..., object] | None:
    """The compiled module's function ``name`` for a neighbour module that keeps its twin
    (``None``: not built, ignored, or built from a source without it)."""
    return cast("Callable[..., object] | None", getattr(MODULE, name, None))
