"""The packages that re-export names from their modules on first use (:mod:`tidemq.lazy`):
each name of the ``__init__.pyi`` that type checkers read is the object its module holds,
``__all__`` lists the same names, and an unknown name is an AttributeError."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ["tidemq", "tidemq.net", "tidemq.codec", "tidemq.client"]


def stub_names(package: str) -> dict[str, str]:
    """name -> module, from the imports of the package's ``__init__.pyi``."""
    stub = Path(importlib.import_module(package).__file__ or "").with_suffix(".pyi")
    names: dict[str, str] = {}
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names.update({alias.asname or alias.name: node.module for alias in node.names})
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_is_its_modules_object(package: str) -> None:
    pkg = importlib.import_module(package)
    names = stub_names(package)
    assert set(names) == set(pkg.__all__)
    for name, module in names.items():
        assert getattr(pkg, name) is getattr(importlib.import_module(module), name), name


@pytest.mark.parametrize("package", PACKAGES)
def test_an_unknown_name_is_an_attribute_error(package: str) -> None:
    pkg = importlib.import_module(package)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = pkg.NoSuchName


def test_importing_a_module_loads_no_sibling() -> None:
    """``import tidemq.net.bind`` (what every server command imports) loads neither the
    asyncio servers nor the codec; ``from tidemq.net import ...`` still works."""
    code = ("import sys, tidemq.net.bind; "
            "print(sorted(m for m in ('tidemq.net.server', 'tidemq.net.client', "
            "'tidemq.codec', 'asyncio') if m in sys.modules)); "
            "from tidemq.net import RemotingServer; print(RemotingServer.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "tidemq.net.server"]
