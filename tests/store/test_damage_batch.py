"""Damaged records of a batch consume queue (RIP-26) in the middle of the log: a start
that rebuilds the queue goes on past them (hole entries for offsets whose message count
is unreadable), readers skip them and serve every other message, verify reports only the
damaged record."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.formats.batch import encode_batch
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store.batch_consume_queue import BCQ_DTYPE, BCQ_UNIT, HOLE_SIZE, BatchConsumeQueue
from tidemq.store.inspect import verify
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore

from .conftest import SEGMENT, small_config
from .test_damage import crashed, patch, props_at

TAGS = ("a", "b")
#: ``(phys, size, base, count)`` of each inner batch.
Records = list[tuple[int, int, int, int]]


def inner(count: int, start: int) -> bytes:
    return encode_batch([(b"%06d" % (start + i), encode_properties({"UNIQ_KEY": f"K{start + i}"}),
                          i) for i in range(count)])


def open_store(root: Path) -> MessageStore:
    """A store whose topic T indexes with a batch consume queue, as a broker opens it
    (the queue type is known before recovery)."""
    store = MessageStore(small_config(root))
    store.set_batch_topic("T")
    store.start()
    return store


def build(root: Path, counts: list[int]) -> Records:
    """Inner batches of ``counts`` messages in T/0, tagged a, b, a, ...; ``(phys, size,
    base, count)`` of each."""
    out = []
    store = open_store(root)
    try:
        base = 0
        for i, n in enumerate(counts):
            tag = TAGS[i % 2]
            r = store.put_inner_batch("T", 0, inner(n, base), encode_properties(
                {"UNIQ_KEY": f"B{base}", "TAGS": tag}), n, tags_code=tag_code(tag),
                keys=(f"B{base}",))
            out.append((r.phys_offsets[0], r.sizes[0], base, n))
            base += n
    finally:
        store.shutdown()
    return out


def tag_code(tag: str) -> int:
    return tags_code(tag)


def damage(root: Path, rec: tuple[int, int, int, int], where: str) -> None:
    phys, size, _, _ = rec
    if where == "body":
        patch(root, phys + size - 60, b"\x99")  # the body CRC no longer matches
    elif where == "properties":
        patch(root, props_at(root, phys, size) + 2, b"\xff")  # INNER_NUM unreadable
    else:
        patch(root, phys + 4, b"\x00")  # the magic code: the header is gone


def served(store: MessageStore, max_count: int, tags: frozenset[int] | None = None
           ) -> list[int]:
    """The base offset of every inner batch a reader of T/0 is served."""
    out: list[int] = []
    offset = 0
    while offset < store.max_offset("T", 0):
        result = store.get("T", 0, offset, max_count=max_count, tag_codes=tags)
        assert result.next_begin_offset > offset, result.status
        for buf in result.buffers:
            pos = 0
            while pos < len(buf):
                rec = decode_record(buf, pos, check_crc=True)
                assert isinstance(rec, Record)
                props = decode_properties(rec.properties)
                out.append(int(props["INNER_BASE"]))
                pos += rec.total_size
        offset = result.next_begin_offset
    return out


COUNTS = [1 + i % 4 for i in range(30)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Records]:
    """The inner batches of :data:`COUNTS`, built once; tests damage copies of them."""
    root = tmp_path_factory.mktemp("pristine") / "s"
    return root, build(root, COUNTS)


def copy_of(pristine: tuple[Path, Records], root: Path) -> Records:
    """A copy of the pristine store at ``root``; what :func:`build` said of it."""
    shutil.copytree(pristine[0], root)
    return pristine[1]


@pytest.mark.parametrize("where", ["body", "properties", "header"])
@pytest.mark.parametrize("rebuilt", [False, True], ids=["queue kept", "queue rebuilt"])
def test_a_damaged_inner_batch_is_skipped_and_the_queue_goes_on(
        tmp_path: Path, pristine: tuple[Path, Records], where: str, rebuilt: bool) -> None:
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    victim = 14  # three messages: their count is in the damaged properties
    damage(root, records[victim], where)
    if rebuilt:
        shutil.rmtree(StoreLayout(root).batch_consumequeue_dir)
    crashed(root)
    store = open_store(root)
    try:
        total = sum(COUNTS)
        assert store.max_offset("T", 0) == total
        expected = [b for _, _, b, _ in records if b != records[victim][2]]
        for max_count in (1, 7, 64):
            assert served(store, max_count) == expected
        only_a = frozenset({tag_code("a")})
        assert served(store, 16, only_a) == [b for i, (_, _, b, _) in enumerate(records)
                                             if i % 2 == 0 and i != victim]
        r = store.put_inner_batch("T", 0, inner(2, total), encode_properties(
            {"UNIQ_KEY": "next", "TAGS": "a"}), 2, tags_code=tag_code("a"), keys=("next",))
        assert r.queue_offset == total  # the queue goes on
    finally:
        store.shutdown()
    problems = [(p.kind, p.offset, p.detail) for p in verify(root).problems]
    expect = [("commitlog", records[victim][0])]
    if where == "header" and not rebuilt:  # the entry written before the damage stays
        expect.append(("batch queue", records[victim][2]))
    assert [p[:2] for p in problems] == expect, problems


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(counts=st.lists(st.integers(1, 6), min_size=3, max_size=24),
       pick=st.integers(0, 1 << 16), where=st.sampled_from(["body", "properties", "header"]))
def test_any_damaged_inner_batch_leaves_every_other_one_readable_after_a_rebuild(
        counts: list[int], pick: int, where: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "s"
        records = build(root, counts)
        victim = 1 + pick % (len(records) - 2)  # in the middle: a record follows it
        damage(root, records[victim], where)
        shutil.rmtree(StoreLayout(root).batch_consumequeue_dir)
        crashed(root)
        store = open_store(root)
        try:
            assert store.max_offset("T", 0) == sum(counts)
            assert served(store, 5) == [b for i, (_, _, b, _) in enumerate(records)
                                        if i != victim]
        finally:
            store.shutdown()


@settings(max_examples=50, deadline=None)
@given(before=st.integers(0, 5), gap=st.integers(1, 70_000))
def test_hole_entries_cover_exactly_the_gap(before: int, gap: int) -> None:
    """However wide the gap (an entry covers at most 32767 offsets), the hole entries
    cover exactly its offsets, carry the previous end and time, and the queue reopens
    where they end with the same entries."""
    with tempfile.TemporaryDirectory() as tmp:
        layout = StoreLayout(Path(tmp))
        bcq = BatchConsumeQueue(layout, "T", 0, BCQ_UNIT * 4)
        for i in range(before):
            bcq.append(i * 3, [100 * i], [100], [0], store_ts=10 + i, batch_sizes=[3])
        start = bcq.max_offset
        bcq.fill_hole(start + gap)
        assert bcq.max_offset == start + gap
        assert bcq.max_phys_end == (100 * before if before else 0)
        ent = np.concatenate([np.frombuffer(mf.view, dtype=BCQ_DTYPE,
                                            count=mf.wrote // BCQ_UNIT) for mf in bcq.files])
        holes = ent[before:]
        assert (holes["size"] == HOLE_SIZE).all() and int(holes["batch"].sum()) == gap
        assert (holes["base"][1:] == holes["base"][:-1] + holes["batch"][:-1]).all()
        assert int(holes["base"][0]) == start
        assert (holes["phys"] == (100 * before if before else 0)).all()
        assert (holes["store_ts"] == (9 + before if before else 0)).all()
        bcq.append(start + gap, [100 * before + 500], [80], [0], store_ts=99)
        bcq.close()
        again = BatchConsumeQueue(layout, "T", 0, BCQ_UNIT * 4)
        again.load()
        assert (again.max_offset, again.max_phys_end) == (start + gap + 1, 100 * before + 580)
        assert again.entry(start + gap - 1) == (100 * before if before else 0, HOLE_SIZE, 0)
        again.close()


def _byte(root: Path, phys: int) -> int:
    with StoreLayout(root).commitlog_segment(phys - phys % SEGMENT).open("rb") as f:
        f.seek(phys % SEGMENT)
        return f.read(1)[0]


@pytest.mark.parametrize("flip", [(20, 0x01), (27, 0x01), (27, 0x02)],
                         ids=["far ahead", "one off", "behind"])
def test_a_damaged_queue_offset_becomes_a_hole_when_the_queue_is_rebuilt(
        tmp_path: Path, flip: tuple[int, int]) -> None:
    """Single messages in a batch consume queue carry their offset in QUEUEOFFSET, which
    has no checksum: a flipped one does not follow its queue on a rebuild, its slot
    becomes a hole, it is reported, and the queue goes on."""
    root = tmp_path / "s"
    store = open_store(root)
    try:
        where = [store.put("T", 0, MessageInput(b"%04d" % i, encode_properties(
            {"UNIQ_KEY": f"U{i}"}))).phys_offsets[0] for i in range(24)]
    finally:
        store.shutdown()
    victim = 10 if flip[1] == 0x01 else 11  # 11 ^ 2 = 9: behind its queue
    at, mask = flip
    patch(root, where[victim] + at, bytes([_byte(root, where[victim] + at) ^ mask]))
    shutil.rmtree(StoreLayout(root).batch_consumequeue_dir)
    crashed(root)
    store = open_store(root)
    try:
        report = store.recovery_report
        assert report is not None and [d.offset for d in report.misplaced] == [where[victim]]
        assert store.max_offset("T", 0) == 24
        got = []
        offset = 0
        while offset < 24:
            result = store.get("T", 0, offset, max_count=5)
            assert result.next_begin_offset > offset
            for buf in result.buffers:
                pos = 0
                while pos < len(buf):
                    rec = decode_record(buf, pos, check_crc=True)
                    assert isinstance(rec, Record)
                    got.append(int(bytes(rec.body)))
                    pos += rec.total_size
            offset = result.next_begin_offset
        assert got == [i for i in range(24) if i != victim]
    finally:
        store.shutdown()


def test_a_damaged_inner_base_becomes_a_hole_when_the_queue_is_rebuilt(
        tmp_path: Path, pristine: tuple[Path, Records]) -> None:
    """INNER_BASE, in the properties, has no checksum either: a digit changed into another
    one leaves a record that passes every check but claims offsets that are not its; its
    offsets become a hole and every other batch is served."""
    root = tmp_path / "s"
    records = copy_of(pristine, root)
    victim = 14
    phys, size, base, _ = records[victim]
    start = props_at(root, phys, size)
    with StoreLayout(root).commitlog_segment(phys - phys % SEGMENT).open("rb") as f:
        f.seek(start % SEGMENT)
        props = f.read(phys + size - start)
    at = props.index(b"INNER_BASE\x01") + len(b"INNER_BASE\x01")
    patch(root, start + at, b"9")  # base 33 -> 93: far ahead of the queue
    shutil.rmtree(StoreLayout(root).batch_consumequeue_dir)
    crashed(root)
    store = open_store(root)
    try:
        report = store.recovery_report
        assert report is not None and [d.offset for d in report.misplaced] == [phys]
        assert store.max_offset("T", 0) == sum(COUNTS)
        assert served(store, 7) == [b for _, _, b, _ in records if b != base]
    finally:
        store.shutdown()
