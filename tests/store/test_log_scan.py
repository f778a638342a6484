"""The commit-log walker on real segment files with bit flips in every field of a record,
at the start, middle and end of segments and at the tail of the log."""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.formats.properties import encode_properties
from tidemq.formats.record import Record
from tidemq.store.layout import StoreLayout
from tidemq.store.log_scan import Damage, End, first_store_timestamp, replay, scan, walk
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.readonly import open_log
from tidemq.store.recovery_plan import rocketmq_crash_start

from .conftest import SEGMENT, small_config

N = 40

#: Every field of a record with IPv4 hosts: name -> (offset, size); the variable part
#: (body, topic, properties) is located per record.
FIXED_FIELDS = {
    "totalsize": (0, 4), "magic": (4, 4), "bodycrc": (8, 4), "queueid": (12, 4),
    "flag": (16, 4), "queueoffset": (20, 8), "physicaloffset": (28, 8), "sysflag": (36, 4),
    "borntimestamp": (40, 8), "bornhost": (48, 8), "storetimestamp": (56, 8),
    "storehost": (64, 8), "reconsumetimes": (72, 4), "preparedtxoffset": (76, 8),
    "bodylength": (84, 4),
}
VARIABLE_FIELDS = ("body", "topiclength", "topic", "propertieslength", "properties")
FIELDS = tuple(FIXED_FIELDS) + VARIABLE_FIELDS
#: Flips the format cannot see (no header CRC): the record stays valid.
UNSEEN = {"queueid", "flag", "queueoffset", "borntimestamp", "bornhost", "storetimestamp",
          "storehost", "reconsumetimes", "preparedtxoffset", "topic"}
#: Flips the format always sees.
ALWAYS_SEEN = {"totalsize", "magic", "bodycrc", "physicaloffset", "bodylength", "body",
               "topiclength", "propertieslength"}


def message(i: int) -> MessageInput:
    body = bytes((i * 7 + k) % 251 for k in range(150 + i % 50))
    return MessageInput(body, encode_properties({"UNIQ_KEY": f"U{i:04d}", "TAGS": "t"}))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, Record]]]:
    root = tmp_path_factory.mktemp("pristine") / "store"
    with MessageStore(small_config(root)) as store:
        for i in range(N):
            store.put("T", i % 2, message(i))
    with open_log(StoreLayout(root), SEGMENT) as log:
        records = [(o, r._replace(body=memoryview(bytes(r.body))))
                   for o, r in (s for s in walk(log.maps, 0) if type(s) is tuple)]
    assert len(records) == N
    return root / "commitlog", records


def field_span(rec: Record, field: str) -> tuple[int, int]:
    if field in FIXED_FIELDS:
        return FIXED_FIELDS[field]
    body = 88 + len(rec.body)
    topic = len(rec.topic.encode())
    spans = {"body": (88, len(rec.body)), "topiclength": (body, 1),
             "topic": (body + 1, topic), "propertieslength": (body + 1 + topic, 2),
             "properties": (body + 3 + topic, len(rec.properties))}
    return spans[field]


def positions(records: list[tuple[int, Record]]) -> dict[str, int]:
    """Record indexes at the start, middle and end of a segment and at the log's tail."""
    starts = [i for i, (o, _) in enumerate(records) if o % SEGMENT == 0 and i]
    first = starts[0]
    return {"segment start": first, "segment middle": first + 2,
            "segment end": starts[1] - 1, "log tail": len(records) - 1}


def flip_and_walk(commitlog: Path, at: int, mask: int) -> list[object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        shutil.copytree(commitlog, root / "commitlog")
        seg = root / "commitlog" / f"{at - at % SEGMENT:020d}"
        with seg.open("r+b") as f:
            f.seek(at % SEGMENT)
            byte = f.read(1)[0]
            f.seek(at % SEGMENT)
            f.write(bytes([byte ^ mask]))
        with open_log(StoreLayout(root), SEGMENT) as log:
            return [s if type(s) is not tuple else s[0] for s in walk(log.maps, 0)]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS),
       where=st.sampled_from(["segment start", "segment middle", "segment end", "log tail"]),
       data=st.data())
def test_a_flipped_bit_damages_one_record_at_most(
        pristine: tuple[Path, list[tuple[int, Record]]], field: str, where: str,
        data: st.DataObject) -> None:
    commitlog, records = pristine
    index = positions(records)[where]
    victim, rec = records[index]
    start, size = field_span(rec, field)
    at = victim + start + data.draw(st.integers(0, size - 1), label="byte")
    mask = 1 << data.draw(st.integers(0, 7), label="bit")
    steps = flip_and_walk(commitlog, at, mask)

    valid = [s for s in steps if isinstance(s, int)]
    damaged = [s for s in steps if isinstance(s, Damage)]
    end = steps[-1]
    assert isinstance(end, End) and not any(isinstance(s, End) for s in steps[:-1])
    others = [o for o, _ in records if o != victim]
    log_end = records[-1][0] + records[-1][1].total_size
    if victim in valid:  # a flip the format cannot see: nothing is lost
        assert valid == [o for o, _ in records] and not damaged
        assert field in UNSEEN | {"sysflag", "properties"}
    elif where == "log tail":  # the torn tail: truncated there, nothing else lost
        assert valid == others and not damaged
        assert end.offset == victim
        return
    else:  # a damaged middle record: skipped, every record after it kept
        assert valid == others
        assert [d.offset for d in damaged] == [victim]
        nxt = records[index + 1][0]
        assert damaged[0].end in (nxt, victim + rec.total_size)
    assert end.offset in (log_end, log_end - log_end % SEGMENT + SEGMENT)
    if field in ALWAYS_SEEN:
        assert victim not in valid


def test_zeros_in_the_middle_are_a_hole_not_the_end(
        pristine: tuple[Path, list[tuple[int, Record]]], tmp_path: Path) -> None:
    commitlog, records = pristine
    victim, rec = records[positions(records)["segment middle"]]
    root = tmp_path / "store"
    shutil.copytree(commitlog, root / "commitlog")
    seg = root / "commitlog" / f"{victim - victim % SEGMENT:020d}"
    with seg.open("r+b") as f:
        f.seek(victim % SEGMENT)
        f.write(bytes(rec.total_size))  # a page that never reached the disk
    with open_log(StoreLayout(root), SEGMENT) as log:
        steps = list(walk(log.maps, 0))
    damaged = [s for s in steps if isinstance(s, Damage)]
    assert [(d.offset, d.length) for d in damaged] == [(victim, rec.total_size)]
    assert [s[0] for s in steps if type(s) is tuple] == [o for o, _ in records if o != victim]


def test_a_copy_of_an_earlier_record_behind_damage_is_not_trusted(
        pristine: tuple[Path, list[tuple[int, Record]]], tmp_path: Path) -> None:
    """A well-formed record after the damage that repeats a queue offset already seen is
    stale, not a continuation: the damage is the tail."""
    commitlog, records = pristine
    last, rec = records[-1]
    end = last + rec.total_size
    root = tmp_path / "store"
    shutil.copytree(commitlog, root / "commitlog")
    seg = root / "commitlog" / f"{end - end % SEGMENT:020d}"
    copy = bytearray(seg.read_bytes()[last % SEGMENT : last % SEGMENT + rec.total_size])
    struct.pack_into(">q", copy, 28, end + 64)  # even its PHYSICALOFFSET is right
    with seg.open("r+b") as f:
        f.seek(end % SEGMENT)
        f.write(b"\x77" * 64 + bytes(copy))
    with open_log(StoreLayout(root), SEGMENT) as log:
        steps = list(walk(log.maps, 0))
    assert steps[-1] == End(end, "bad magic code 0x77777777")
    assert not any(isinstance(s, Damage) for s in steps)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 7)), max_size=4),
       start=st.integers(0, N - 1))
def test_a_replay_takes_the_steps_of_the_walk_it_follows(
        pristine: tuple[Path, list[tuple[int, Record]]],
        flips: list[tuple[int, int]], start: int) -> None:
    """Recovery re-dispatches what its plan's scan validated with :func:`replay`: from
    any record boundary, over bytes with any flips, it sees the records and damaged
    stretches the scan saw, in the same order, and nothing past the scan's end."""
    commitlog, records = pristine
    log_end = records[-1][0] + records[-1][1].total_size
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        shutil.copytree(commitlog, root / "commitlog")
        for where, bit in flips:
            at = where % log_end
            seg = root / "commitlog" / f"{at - at % SEGMENT:020d}"
            with seg.open("r+b") as f:
                f.seek(at % SEGMENT)
                byte = f.read(1)[0]
                f.seek(at % SEGMENT)
                f.write(bytes([byte ^ (1 << bit)]))
        with open_log(StoreLayout(root), SEGMENT) as log:
            begin = records[start][0]
            walked: list[object] = []
            found = scan(log.maps, begin, on_record=lambda r, o: walked.append((o, r.queue_offset)),
                         on_damage=walked.append)
            replayed: list[object] = []
            replay(log.maps, begin, found.end, found.damaged,
                   lambda r, o: replayed.append((o, r.queue_offset)), replayed.append)
    assert replayed == walked


def test_a_segment_is_dated_by_its_first_valid_record(
        pristine: tuple[Path, list[tuple[int, Record]]]) -> None:
    """Each segment's first record dates it; a segment whose first record does not check
    out has no date, and a crashed RocketMQ store's scan passes over it to an older one."""
    commitlog, records = pristine
    firsts = {o: r.store_timestamp for o, r in records if o % SEGMENT == 0}
    assert len(firsts) >= 3
    newest = max(firsts)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        shutil.copytree(commitlog, root / "commitlog")
        with (root / "commitlog" / f"{newest:020d}").open("r+b") as f:
            f.seek(4)  # its first record's magic
            f.write(b"\0")
        with open_log(StoreLayout(root), SEGMENT) as log:
            dated = {m.base: first_store_timestamp(m) for m in log.maps if m.base in firsts}
            assert dated == {**firsts, newest: 0}
            assert rocketmq_crash_start(log.maps, max(firsts.values())) == sorted(firsts)[-2]
            assert rocketmq_crash_start(log.maps, min(firsts.values()) - 1) == 0
            assert rocketmq_crash_start(log.maps, 0) == 0
