"""``tidemq store verify`` checks the LMQ store's entries against the commit log
(:mod:`tidemq.store.lmq_check`), and ``--repair`` rebuilds them, keeping consumer offsets
and tombstones."""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict, WriteBatch

from tidemq.formats.properties import encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store.inspect import Problem, VerifyReport, dump_records, verify
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.repair import repair

from .conftest import CQ_FILE, SEGMENT, small_config

N = 36
LMQS = ("%LMQ%a", "%LMQ%b", "%LMQ%c")
_Q = struct.Struct(">q")


def config(root: Path) -> Any:
    return small_config(root, enable_lmq=True, enable_multi_dispatch=True,
                        max_hash_slot_num=8, max_index_num=32)


def targets(i: int) -> list[str]:
    return [q for k, q in enumerate(LMQS) if i % (k + 2) == 0] or [LMQS[0]]


def build(root: Path) -> dict[str, list[int]]:
    """``N`` messages fanned out to one or more LMQs; a group's offset in LMQ a; LMQ c
    deleted half way (a tombstone). Returns each LMQ's bodies in order."""
    out: dict[str, list[int]] = {q: [] for q in LMQS}
    with MessageStore(config(root)) as store:
        for i in range(N):
            lmqs = targets(i)
            props = encode_properties({"UNIQ_KEY": f"U{i}",
                                       "INNER_MULTI_DISPATCH": ",".join(lmqs)})
            store.put_multi_dispatch("T", i % 2, MessageInput(b"%04d" % i, props,
                                                              keys=(f"U{i}",)), lmqs)
            for q in lmqs:
                out[q].append(i)
            if i == N // 2:
                assert store.wait_dispatched()
                store.delete_lmq(LMQS[2])
                out[LMQS[2]] = []
        assert store.wait_dispatched()
        lmq = store.lmq
        assert lmq is not None
        lmq.commit_offset("g", LMQS[0], 3)
    return out


def read_all(root: Path) -> tuple[dict[str, list[int]], int | None]:
    """Every LMQ's bodies, after a start, and group g's offset in LMQ a."""
    out: dict[str, list[int]] = {}
    with MessageStore(config(root)) as store:
        for q in LMQS:
            got: list[int] = []
            offset = store.min_offset(q, 0)
            while offset < store.max_offset(q, 0):
                result = store.get(q, 0, offset, max_count=8)
                assert result.next_begin_offset > offset
                for buf in result.buffers:
                    pos = 0
                    while pos < len(buf):
                        rec = decode_record(buf, pos, check_crc=True)
                        assert isinstance(rec, Record)
                        got.append(int(bytes(rec.body)))
                        pos += rec.total_size
                offset = result.next_begin_offset
            out[q] = got
        lmq = store.lmq
        assert lmq is not None
        return out, lmq.committed_offset("g", LMQS[0])


def lmq_problems(report: VerifyReport) -> list[Problem]:
    return [p for p in report.problems if p.kind == "lmq"]


def fix(root: Path) -> None:
    report = verify(root)
    repair(root, segment_size=SEGMENT, cq_file_size=CQ_FILE,
           bcq_file_size=report.bcq_file_size, index_geometry=(8, 32))


def edit(root: Path, change: Any) -> None:
    db = Rdict(str(StoreLayout(root).lmq_dir), Options(raw_mode=True))
    try:
        wb = WriteBatch(raw_mode=True)
        change(db, wb)
        db.write(wb)
        db.flush()
    finally:
        db.close()


def entry_keys(root: Path, name: str) -> list[bytes]:
    db = Rdict(str(StoreLayout(root).lmq_dir), Options(raw_mode=True))
    try:
        prefix = b"E" + name.encode() + b"\x00"
        return [k for k in db.keys(from_key=prefix) if k.startswith(prefix)]
    finally:
        db.close()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[int]]]:
    root = tmp_path_factory.mktemp("pristine") / "s"
    return root, build(root)


@pytest.fixture
def store(pristine: tuple[Path, dict[str, list[int]]], tmp_path: Path
          ) -> tuple[Path, dict[str, list[int]]]:
    root = tmp_path / "s"
    shutil.copytree(pristine[0], root)
    return root, pristine[1]


def test_sound_lmq_entries_verify(store: tuple[Path, dict[str, list[int]]]) -> None:
    root, bodies = store
    report = verify(root)
    assert report.ok, report.problems
    assert report.lmq_entries == sum(map(len, bodies.values()))
    assert read_all(root) == (bodies, 3)


@pytest.mark.parametrize("damage", ["lost", "wrong record", "cut run", "size", "past end"])
def test_damaged_lmq_entries_are_reported_and_rebuilt(
        store: tuple[Path, dict[str, list[int]]], damage: str) -> None:
    root, bodies = store
    name = LMQS[1]
    key = entry_keys(root, name)[2]
    other = dump_records(root, None, 2).records[1]  # message 1: fanned out to LMQ a only

    def change(db: Rdict, wb: WriteBatch) -> None:
        value = db[key]
        if damage == "lost":
            wb.delete(key)
        elif damage == "wrong record":  # the first record, which is not b's
            wb.put(key, _Q.pack(other.phys) + other.size.to_bytes(4, "big") + value[12:])
        elif damage == "cut run":
            wb.put(key, value[:-5])
        elif damage == "size":
            wb.put(key, value[:8] + (999).to_bytes(4, "big") + value[12:])
        else:
            wb.put(key, _Q.pack(1 << 40) + value[8:])

    edit(root, change)
    found = [(p.where, p.offset, p.detail) for p in lmq_problems(verify(root))]
    expect = {"lost": "entries of records below the LMQ checkpoint",
              "wrong record": "does not fan out to this LMQ at this offset",
              "cut run": "ends in a partial entry",
              "size": "size 999 differs from the record",
              "past end": "past the end of the valid log"}[damage]
    assert any(where == name and expect in detail for where, _, detail in found), found
    fix(root)
    assert verify(root).ok
    assert read_all(root) == (bodies, 3)  # the group's offset survives the rebuild


def test_an_lmq_store_rocksdb_cannot_open_is_reported_and_repaired(
        store: tuple[Path, dict[str, list[int]]]) -> None:
    root, bodies = store
    lmq_dir = StoreLayout(root).lmq_dir
    for path in lmq_dir.glob("MANIFEST-*"):
        path.write_bytes(path.read_bytes()[:10])  # torn
    found = [(p.where, p.detail) for p in lmq_problems(verify(root))]
    assert len(found) == 1 and found[0][0] == "LMQ store" and "cannot be opened" in found[0][1]
    fix(root)
    assert verify(root).ok
    got, _offset = read_all(root)
    assert got == bodies


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1 << 16), cut=st.integers(1, 27), flip=st.integers(0, 27))
def test_any_damaged_run_is_found_and_repair_restores_every_lmq(
        pristine: tuple[Path, dict[str, list[int]]], which: int, cut: int, flip: int) -> None:
    """A run with a byte of its first entry changed and some bytes cut off its end:
    verify names its LMQ, and a repair brings every LMQ back."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "s"
        shutil.copytree(pristine[0], root)
        keys = entry_keys(root, LMQS[0]) + entry_keys(root, LMQS[1])
        key = keys[which % len(keys)]

        def change(db: Rdict, wb: WriteBatch) -> None:
            value = bytearray(db[key])
            value[flip % 12] ^= 0x01  # phys or size: never harmless
            wb.put(key, bytes(value[: len(value) - cut]))

        edit(root, change)
        name = key[1:-9].decode()
        assert name in {p.where for p in lmq_problems(verify(root))}
        fix(root)
        assert verify(root).ok
        assert read_all(root) == (pristine[1], 3)
