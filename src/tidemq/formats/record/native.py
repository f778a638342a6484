"""The compiled module ``tidemq.formats._crecords``, where it was built and is not ignored
(``TIDEMQ_NO_NATIVE=1``), for the modules that keep a twin of one of its functions.

Loading it needs the standard library only: a header codec or a name server takes a
compiled function from here without importing numpy. :mod:`.loops` proves on its import
that the module writes the bytes its twins write.

A source checkout keeps ``_crecords.c`` beside the built module. The build records the
digest of the source it compiled (``SOURCE_DIGEST``); when the source beside it has
another, the build is stale (an edit or a pull since ``make``) and the twins serve
instead, with a warning that says how to rebuild. An installed wheel has no source beside
it and nothing to compare.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import cast

__all__ = ["MODULE", "StaleBuildWarning", "compiled", "source_digest", "stale_reason"]

#: The C source of the module, where the package is a source checkout.
SOURCE = Path(__file__).resolve().parent.parent / "_crecords.c"


class StaleBuildWarning(RuntimeWarning):
    """The compiled module was built from another ``_crecords.c`` than the one beside it."""


def source_digest(source: Path) -> str:
    """The digest a build records of ``source`` (``setup.py`` computes the same)."""
    return hashlib.sha256(source.read_bytes()).hexdigest()[:16]


def stale_reason(module: ModuleType, source: Path | None = None) -> str | None:
    """Why ``module`` does not match ``source``, by default :data:`SOURCE` (``None``: it
    does, or there is no source)."""
    source = SOURCE if source is None else source
    try:
        expected = source_digest(source)
    except OSError:
        return None
    built = getattr(module, "SOURCE_DIGEST", "")
    if built == expected:
        return None
    what = f"digest {built}" if built else "no digest"
    return (f"the compiled module {module.__file__} was built from another {source.name} "
            f"({what}; the source has {expected}): using the pure-Python twins. Rebuild it "
            f"with `make` (or `pip install -e .`)")


def _load() -> ModuleType | None:
    if os.environ.get("TIDEMQ_NO_NATIVE") == "1":
        return None
    try:
        from tidemq.formats import _crecords
    except ImportError:
        return None
    reason = stale_reason(_crecords)
    if reason is not None:
        warnings.warn(reason, StaleBuildWarning, stacklevel=2)
        return None
    return _crecords


#: The compiled module (``None``: not built, ignored, or stale).
MODULE = _load()


def compiled(name: str) -> Callable[..., object] | None:
    """The compiled module's function ``name`` for a neighbour module that keeps its twin
    (``None``: not built, ignored, stale, or built from a source without it)."""
    return cast("Callable[..., object] | None", getattr(MODULE, name, None))
