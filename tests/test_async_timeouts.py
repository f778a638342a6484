"""No ``asyncio.wait_for`` in ``src/``: on Python 3.11 it loses a cancellation that
arrives in the same loop step as the awaited result (the cancelled task then runs on,
e.g. a stopping HA link that keeps copying). ``async with asyncio.timeout(...)`` does
not; it is what the code uses instead."""

from __future__ import annotations

import ast
from pathlib import Path

import tidemq

SRC = Path(tidemq.__file__).parent


def _wait_for_calls(path: Path) -> list[int]:
    text = path.read_text()
    if "wait_for" not in text:  # no call without the name: the file need not be parsed
        return []
    tree = ast.parse(text, str(path))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "wait_for" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "asyncio"]


def test_src_uses_asyncio_timeout_not_wait_for() -> None:
    found = [f"{path.relative_to(SRC.parent)}:{line}" for path in sorted(SRC.rglob("*.py"))
             for line in _wait_for_calls(path)]
    assert not found, f"asyncio.wait_for in {found}: use `async with asyncio.timeout(...)`"


def test_the_check_sees_a_call(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import asyncio\nasync def f(e):\n    await asyncio.wait_for(e.wait(), 1)\n"
                      "def g(cond):\n    cond.wait_for(lambda: True, 1)\n")
    assert _wait_for_calls(sample) == [3]
