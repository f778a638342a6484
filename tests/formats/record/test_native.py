"""Which compiled module the code uses: a build older than the source beside it serves
no one."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from tests.native import compiled

from tidemq.formats.record import native


def test_the_build_under_test_is_the_build_of_the_source_beside_it() -> None:
    module = compiled()
    assert native.SOURCE.exists(), "the tests run from a source checkout"
    assert native.source_digest(native.SOURCE) == module.SOURCE_DIGEST
    assert native.stale_reason(module) is None
    assert native.MODULE is module


def test_an_edited_source_makes_the_build_stale(tmp_path: Path) -> None:
    module = compiled()
    edited = tmp_path / "_crecords.c"
    shutil.copyfile(native.SOURCE, edited)
    with edited.open("a") as f:
        f.write("/* one more line */\n")
    reason = native.stale_reason(module, edited)
    assert reason is not None
    assert module.SOURCE_DIGEST in reason and native.source_digest(edited) in reason
    assert "make" in reason


def test_a_build_without_a_digest_is_stale() -> None:
    unmarked = ModuleType("_crecords")
    unmarked.__file__ = "elsewhere/_crecords.so"
    reason = native.stale_reason(unmarked)
    assert reason is not None and "no digest" in reason


def test_without_a_source_beside_it_nothing_is_compared(tmp_path: Path) -> None:
    assert native.stale_reason(compiled(), tmp_path / "absent.c") is None


def test_a_stale_build_is_not_loaded_and_says_how_to_rebuild(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled()
    edited = tmp_path / "_crecords.c"
    edited.write_bytes(native.SOURCE.read_bytes() + b"\n")
    monkeypatch.setattr(native, "SOURCE", edited)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert native._load() is None
    assert [w.category for w in caught] == [native.StaleBuildWarning]
    assert "pure-Python twins" in str(caught[0].message)
