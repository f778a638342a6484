"""``tidemq store verify`` checks the key index against the commit log
(:mod:`tidemq.store.index_check`), and ``--repair`` rebuilds it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.formats.properties import encode_properties
from tidemq.store.index_format import ENTRY_DTYPE, HEADER_SIZE
from tidemq.store.inspect import Problem, VerifyReport, verify
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.repair import repair

from .conftest import CQ_FILE, SEGMENT, small_config

N = 40
#: maxIndexNum = 4 * maxHashSlotNum (inferred from the files); 3 * N keys fill 4 files
SLOTS, ENTRIES = 8, 32


def config(root: Path, **overrides: Any) -> Any:
    values: dict[str, Any] = {"max_hash_slot_num": SLOTS, "max_index_num": ENTRIES}
    values.update(overrides)
    return small_config(root, **values)


def build(root: Path, **overrides: Any) -> Path:
    """``N`` messages, each with a UNIQ_KEY and two KEYS, over three queues."""
    with MessageStore(config(root, **overrides)) as store:
        for i in range(N):
            keys = (f"U{i}", f"k{i}", f"shared{i % 4}")
            props = encode_properties({"UNIQ_KEY": f"U{i}", "KEYS": f"k{i} shared{i % 4}"})
            store.put("T", i % 3, MessageInput(b"%04d" % i + bytes(150), props, keys=keys))
    return root


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store as :func:`build` leaves it, made once; tests damage copies of it."""
    return build(tmp_path_factory.mktemp("pristine") / "s")


def copy_of(pristine: Path, root: Path) -> Path:
    shutil.copytree(pristine, root)
    return root


def index_file(root: Path, which: int = 0) -> Path:
    layout = StoreLayout(root)
    return layout.segments_in(layout.index_dir)[which][1]


def entry_at(n: int, slots: int = SLOTS) -> int:
    """The byte offset of entry number ``n`` (1-based) in an index file."""
    return HEADER_SIZE + 4 * slots + ENTRY_DTYPE.itemsize * n


def index_problems(report: VerifyReport) -> list[Problem]:
    return [p for p in report.problems if p.kind == "index"]


def fix(root: Path, slots: int = SLOTS, entries: int = ENTRIES) -> None:
    report = verify(root)
    repair(root, segment_size=SEGMENT, cq_file_size=CQ_FILE,
           bcq_file_size=report.bcq_file_size, index_geometry=(slots, entries))


def lookups(root: Path, **overrides: Any) -> list[int]:
    """How many records every key finds, after a start."""
    with MessageStore(config(root, **overrides)) as store:
        return ([len(store.query_by_key("T", f"U{i}")) for i in range(N)]
                + [len(store.query_by_key("T", f"k{i}")) for i in range(N)]
                + [len(store.query_by_key("T", f"shared{i}")) for i in range(4)])


EVERY_KEY = [1] * (2 * N) + [N // 4] * 4


def test_a_sound_index_verifies(tmp_path: Path, pristine: Path) -> None:
    root = copy_of(pristine, tmp_path / "s")
    report = verify(root)
    assert report.ok and report.warnings == [], (report.problems, report.warnings)
    assert report.index_entries == 3 * N


def test_an_index_file_cut_short_is_reported_and_rebuilt(tmp_path: Path,
                                                         pristine: Path) -> None:
    root = copy_of(pristine, tmp_path / "s")
    path = index_file(root, 1)
    path.write_bytes(path.read_bytes()[: entry_at(10)])
    found = [(p.where, p.detail) for p in index_problems(verify(root))]
    assert found[0][0] == path.name and "expected 712" in found[0][1], found
    assert found[1:] == [("index", "30 keys of records at 2740..5476 have no entry (lookups "
                          "by them fail)")], found
    fix(root)
    report = verify(root)
    assert report.ok and report.index_entries == 3 * N, report.problems
    assert lookups(root) == EVERY_KEY


@pytest.mark.parametrize("damage", ["phys", "hash", "lost entries", "slot", "count",
                                    "chain"])
def test_damaged_entries_are_reported_with_their_location_and_repaired(
        tmp_path: Path, pristine: Path, damage: str) -> None:
    root = copy_of(pristine, tmp_path / "s")
    path = index_file(root)
    data = bytearray(path.read_bytes())
    entry = entry_at(7)
    if damage == "phys":
        data[entry + 4 : entry + 12] = (123).to_bytes(8, "big")  # no record starts there
    elif damage == "hash":
        data[entry] ^= 0x40
    elif damage == "lost entries":  # the last 20 entries gone, the count says so
        kept = int.from_bytes(data[36:40], "big") - 1 - 20
        data[36:40] = (kept + 1).to_bytes(4, "big")
        data[24:32] = data[entry_at(kept) + 4: entry_at(kept) + 12]
        for slot in range(SLOTS):
            at = HEADER_SIZE + 4 * slot
            if int.from_bytes(data[at : at + 4], "big") > kept:
                data[at : at + 4] = bytes(4)
    elif damage == "slot":
        data[HEADER_SIZE + 4 * 5 : HEADER_SIZE + 4 * 6] = (999).to_bytes(4, "big")
    elif damage == "count":
        data[36:40] = (ENTRIES + 7).to_bytes(4, "big")
    else:
        data[entry + 16 : entry + 20] = (50).to_bytes(4, "big")  # points forward
    path.write_bytes(bytes(data))
    found = [(p.where, p.offset, p.detail) for p in index_problems(verify(root))]
    expect = {
        "phys": "an entry points at 123, where no record starts",
        "hash": "has a key hash none of its keys has",
        "lost entries": "20 keys of records at",
        "slot": "hash slots point past the entries written (slot 5 -> 999)",
        "count": f"indexCount {ENTRIES + 7} is outside 1..{ENTRIES}",
        "chain": "chain link 50 does not point back",
    }[damage]
    assert any(expect in d for _, _, d in found), found
    if damage == "chain":
        assert (path.name, 7, "chain link 50 does not point back") in found
    fix(root)
    report = verify(root)
    assert report.ok and report.index_entries == 3 * N, report.problems
    assert lookups(root) == EVERY_KEY


def test_geometry_that_cannot_be_inferred_is_a_warning_unless_given(tmp_path: Path) -> None:
    root = build(tmp_path / "s", max_hash_slot_num=16, max_index_num=200)
    report = verify(root)
    assert report.ok and any("not checked" in w for w in report.warnings), report.warnings
    given_ = verify(root, max_hash_slot_num=16, max_index_num=200)
    assert given_.ok and given_.warnings == [] and given_.index_entries == 3 * N
    wrong = verify(root, max_hash_slot_num=16, max_index_num=100)
    assert not wrong.ok
    assert next(p.detail for p in index_problems(wrong)).startswith(
        f"{index_file(root).stat().st_size} bytes, expected")


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(0, entry_at(ENTRIES) - 1), value=st.integers(1, 255))
def test_any_damaged_byte_is_found_or_harmless_and_repair_restores_every_key(
        pristine: Path, at: int, value: int) -> None:
    """A byte of the header, the slots or the entries changed: verify never fails, and
    when it says the index is sound every lookup still finds its records; after a
    repair every lookup does."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "s"
        shutil.copytree(pristine, root)
        path = index_file(root)
        with path.open("r+b") as f:
            f.seek(at)
            old = f.read(1)[0]
            f.seek(at)
            f.write(bytes([old ^ value]))
        report = verify(root)
        if not index_problems(report):
            harmless = at < 16 or (at >= entry_at(1) and (at - entry_at(1)) % 20 in
                                   range(12, 16))  # the times: lookups do not use them
            assert harmless or lookups(root) == EVERY_KEY, (at, value)
        fix(root)
        assert verify(root).ok
        assert lookups(root) == EVERY_KEY


def test_the_expected_entries_are_what_the_store_wrote(tmp_path: Path,
                                                       pristine: Path) -> None:
    """The check's expectation and dispatch agree entry for entry on a sound store."""
    root = copy_of(pristine, tmp_path / "s")
    layout = StoreLayout(root)
    total = 0
    for _, path in layout.segments_in(layout.index_dir):
        data = path.read_bytes()
        count = int.from_bytes(data[36:40], "big")
        ent = np.frombuffer(data[entry_at(1) : entry_at(count)], dtype=ENTRY_DTYPE)
        assert (np.diff(ent["phys"].astype(np.int64)) >= 0).all()
        total += count - 1
    assert total == 3 * N == verify(root).index_entries
