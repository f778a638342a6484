"""The compiled module ``tidemq.formats._crecords`` for tests that hold it to its pure
twins, or check that it is the one the code uses.

``TIDEMQ_NO_NATIVE=1`` runs the project on the twins alone: those tests are skipped then
(under CI a skip is a failure unless its reason is allowed; this one is not). A build
older than its source fails them: they would hold stale code to today's twins.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest

__all__ = ["compiled"]


def compiled() -> ModuleType:
    """``_crecords``, or a skip when the run asked for the twins only."""
    if os.environ.get("TIDEMQ_NO_NATIVE") == "1":
        pytest.skip("TIDEMQ_NO_NATIVE=1: the pure twins only")
    from tidemq.formats import _crecords
    from tidemq.formats.record.native import stale_reason
    reason = stale_reason(_crecords)
    if reason is not None:
        pytest.fail(reason)
    return _crecords
