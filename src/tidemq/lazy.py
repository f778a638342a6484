"""A package's re-exported names, imported from their modules on first use (PEP 562).

A package whose ``__init__`` imported every module it re-exports would make each import
of one of its modules load them all: ``import tidemq.net.bind`` would load the asyncio
servers and clients, ``import tidemq.client.admin`` every producer and consumer. Such a
package lists its names once, as the real imports of an ``__init__.pyi`` beside its
``__init__.py`` (what type checkers read), and its ``__init__.py`` reads that list::

    __all__, __getattr__ = stub_exports(__name__, __file__)

Each ``from M import a, b`` of the stub says where ``a`` and ``b`` live; its ``__all__``
is the package's.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["stub_exports"]


def stub_exports(package: str, init_file: str) -> tuple[list[str], Callable[[str], Any]]:
    """``__all__`` and ``__getattr__`` of ``package`` (whose ``__init__.py`` is
    ``init_file``), from its ``__init__.pyi``: each name the stub imports is imported from
    its module when first asked for, and kept in the package."""
    stub = Path(init_file).with_suffix(".pyi")
    where: dict[str, str] = {}
    names: list[str] = []
    for node in ast.parse(stub.read_text(encoding="utf-8"), str(stub)).body:
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            where.update({alias.asname or alias.name: node.module for alias in node.names})
        elif (isinstance(node, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
            names = list(ast.literal_eval(node.value))

    def lookup(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return names, lookup
