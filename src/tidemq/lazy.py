"""A package's re-exported names, imported from their modules on first use (PEP 562).

A package whose ``__init__`` imported every module it re-exports would make each import
of one of its modules load them all: ``import tidemq.net.bind`` would load the asyncio
servers and clients, ``import tidemq.client.admin`` every producer and consumer. Such a
package declares where each name lives instead, and a ``__init__.pyi`` beside it gives
type checkers the real imports::

    __getattr__ = exports(__name__, {"tidemq.net.address": ("parse_address",), ...})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name of ``modules`` (module -> the names it
    gives) imported from its module when first asked for, and kept in the package."""
    where = {name: module for module, names in modules.items() for name in names}

    def lookup(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return lookup
