"""A replica's column dispatch of a run gives, record by record, what recovery's
translation of each record gives: queue, offsets, size, store time, tags code and index
keys -- whether the run's keys come out as columns or one record at a time."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tidemq.formats.properties import encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store.append import MessageInput
from tidemq.store.dispatch import DispatchBatch
from tidemq.store.index_keys import KeyColumns
from tidemq.store.message_store import MessageStore
from tidemq.store.recovery import dispatch_batch_for
from tidemq.store.replica_runs import run_batches

from .conftest import FakeClock, small_config

Flat = tuple[str, int, int, int, int, int, int, tuple[str, ...]]

_VALUE = st.text(alphabet=st.sampled_from("AB09é\x01_ "), min_size=0, max_size=6)
_PROPS = st.fixed_dictionaries(
    {"UNIQ_KEY": _VALUE},
    optional={"XUNIQ_KEY": st.just("x"), "WAIT": st.just("true"), "TAGS": st.just("t"),
              "KEYS": st.just("k1 k2")})


def _flat(batches: list[DispatchBatch]) -> list[Flat]:
    return [(b.topic, b.queue_id, b.queue_offset + i, phys, b.sizes[i], b.store_timestamp,
             b.tags[i], tuple(b.keys[i]) if b.keys else ())
            for b in batches for i, phys in enumerate(b.phys)]


def _written(put: Callable[[MessageStore], None]) -> bytes:
    """The commit-log bytes a fresh store appends while ``put`` runs on it."""
    with tempfile.TemporaryDirectory() as tmp:
        store = MessageStore(small_config(Path(tmp), mapped_file_size_commit_log=1 << 20),
                             clock=FakeClock(1_700_000_000_000))
        store.start()
        try:
            runs: list[bytes] = []
            store.add_append_hook(lambda _start, view: runs.append(bytes(view)))
            put(store)
            return b"".join(runs)
        finally:
            store.shutdown()


def _log(puts: list[tuple[int, list[dict[str, str]]]]) -> bytes:
    def put(store: MessageStore) -> None:
        for queue_id, batch in puts:
            msgs = []
            for props in batch:
                keys = [props["UNIQ_KEY"]] if props["UNIQ_KEY"] else []
                keys += [k for k in props.get("KEYS", "").split(" ") if k]
                msgs.append(MessageInput(b"body", encode_properties(props), keys=tuple(keys)))
            store.put_batch("T" if queue_id < 2 else "U", queue_id, msgs)

    return _written(put)


def _reference(data: bytes, pos: int = 0, end: int | None = None) -> list[Flat]:
    view, out = memoryview(data), []
    while pos < (len(data) if end is None else end):
        rec = decode_record(view, pos, expected_physical_offset=pos)
        assert isinstance(rec, Record)
        batch = dispatch_batch_for(rec, pos)
        assert batch is not None
        out += _flat([batch])
        pos += rec.total_size
    return out


#: UNIQ_KEY values of one byte width: two-byte pieces, ASCII or not
_WIDE = st.integers(1, 4).flatmap(lambda n: st.lists(
    st.sampled_from(["AZ", "09", "\x01A", "é", "_ "]), min_size=n, max_size=n).map("".join))


#: a last property of one width: mostly the same, sometimes another value or KEYS
_LAST = st.sampled_from([("WAIT", "true")] * 4 + [("WAIT", "fals"), ("KEYS", "true")])


def _alike(p: dict[str, str]) -> st.SearchStrategy[list[dict[str, str]]]:
    """Records laid out as ``p``: UNIQ_KEY values of one width and a last property."""
    width = len(p["UNIQ_KEY"].encode())
    uniq = _WIDE.filter(lambda u: len(u.encode()) == width) if width else st.just("")
    one = st.tuples(uniq, _LAST).map(
        lambda q: {**{k: v for k, v in p.items() if k not in ("WAIT", "KEYS")},
                   "UNIQ_KEY": q[0], q[1][0]: q[1][1]})
    return st.lists(one, min_size=8, max_size=12)  # enough to be keyed as columns


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(puts=st.lists(st.tuples(st.integers(0, 2), st.one_of(
    st.lists(_PROPS, min_size=1, max_size=5),  # records keyed and sized alike or not
    _PROPS.flatmap(lambda p: st.one_of(st.just({**p, "UNIQ_KEY": ""}), _WIDE.map(
        lambda u: {**p, "UNIQ_KEY": u}))).flatmap(_alike))), min_size=1, max_size=6))
@example(puts=[(1, [{"UNIQ_KEY": "AZ", "WAIT": "true"}] * 8
                    + [{"UNIQ_KEY": "09", "KEYS": "true"}])])
@example(puts=[(1, [{"WAIT": "k", "UNIQ_KEY": "AZ"}] * 8 + [{"KEYS": "k", "UNIQ_KEY": "09"}])])
@example(puts=[(1, [{"XUNIQ_KEY": "x", "UNIQ_KEY": "é"}, {"XUNIQ_KEY": "y", "UNIQ_KEY": "é"}] * 4)])
@example(puts=[(1, [{"UNIQ_KEY": "AZ"}] * 8 + [{"UNIQ_KEY": "é"}])])
@example(puts=[(0, [{"UNIQ_KEY": "AZ"}, {"UNIQ_KEY": "é"}, {"UNIQ_KEY": ""}])])
def test_a_run_dispatches_as_its_records_do(
        puts: list[tuple[int, list[dict[str, str]]]]) -> None:
    data = _log(puts)
    run = run_batches(data, 0)
    assert run is not None and (run.taken, run.general) == (len(data), 0)
    assert _flat(run.batches) == _reference(data)


def test_a_producers_batch_is_keyed_as_columns() -> None:
    batch = [{"UNIQ_KEY": f"{i:032X}", "WAIT": "true"} for i in range(50)]
    data = _log([(1, batch)])
    run = run_batches(data, 0)
    assert run is not None and len(run.batches) == 1
    batches = run.batches
    assert type(batches[0].phys) is range  # as a uniform put_batch hands them on
    assert type(batches[0].keys) is KeyColumns
    assert list(batches[0].keys) == [(f"{i:032X}",) for i in range(50)]
    assert _flat(batches) == _reference(data)


def _mixed_log(kinds: list[str], width: int) -> bytes:
    """One record per kind, all of one size: ``plain``, ``name`` (a property named
    ``INNER_X``) or ``body`` (the letters ``INNER_`` in the body only)."""
    def put(store: MessageStore) -> None:
        for i, kind in enumerate(kinds):
            uniq = f"{i:0{width}X}"
            props = {"UNIQ_KEY": uniq, "INNER_X" if kind == "name" else "OTHER_X": "v"}
            body = b"xxINNER_xx" if kind == "body" else b"x" * 10
            store.put("T", 0, MessageInput(body, encode_properties(props), keys=(uniq,)))

    return _written(put)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(["plain", "plain", "name", "body"]), min_size=1,
                      max_size=24),
       width=st.integers(4, 6))
@example(kinds=["plain"] * 9 + ["name"] + ["body"] * 9, width=4)
@example(kinds=["name"] * 10, width=4)
def test_records_with_inner_names_go_one_by_one_and_the_rest_as_columns(
        kinds: list[str], width: int) -> None:
    """A replica's dispatch of a run, as :class:`ReplicaLog` drives it: the records whose
    property names hold ``INNER_`` are handed back to go record by record, every other
    record goes as columns -- also one whose body holds the letters -- and together they
    give what recovery gives record by record."""
    data = _mixed_log(kinds, width)
    pos, got, columns = 0, [], 0
    while pos < len(data):
        run = run_batches(memoryview(data)[pos:], pos)
        assert run is not None and (run.taken or run.general)
        got += _flat(run.batches)
        columns += sum(len(b.phys) for b in run.batches)
        pos += run.taken
        got += _reference(data, pos, pos + run.general)
        pos += run.general
    assert pos == len(data)
    assert got == _reference(data)
    assert columns == len(kinds) - kinds.count("name")


def test_a_run_with_a_rotten_body_goes_record_by_record() -> None:
    """Bytes from the master's disk are checked as the read path checks them: a run
    whose records do not all pass (here one body byte flipped, so its CRC fails) is not
    dispatched as columns but record by record, where damage is found and reported."""
    batch = [{"UNIQ_KEY": f"{i:032X}", "WAIT": "true"} for i in range(20)]
    data = bytearray(_log([(1, batch)]))
    assert run_batches(bytes(data), 0) is not None
    view = memoryview(bytes(data))
    tenth = decode_record(view, 0, expected_physical_offset=0)
    assert isinstance(tenth, Record)
    at = 10 * tenth.total_size  # records of one size: the eleventh record's start
    body = bytes(data).index(b"body", at)
    data[body] ^= 0x20
    assert run_batches(bytes(data), 0) is None
    assert run_batches(bytes(data), 0, check_crc=False) is not None  # the old behaviour
