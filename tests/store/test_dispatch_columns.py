"""A dispatch round's columns built with C-level maps (:func:`fanout_columns`, the index
rows of :func:`index_batches`, a queue's repeated value) against the plain loops over
each batch and record that they replace: the same records, in the same order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.store.dispatch import DispatchBatch, _one_value, fanout_columns, index_batches

NAMES = ["%LMQ%a", "%LMQ%b", "%LMQ%c"]


@st.composite
def batches(draw: st.DrawFn) -> list[DispatchBatch]:
    """Batches in log order, each of 1-4 records; a batch's LMQ targets are absent, empty,
    or one per record (a record's may be None: it does not fan out); its keys absent or
    one tuple per record (possibly empty)."""
    out = []
    phys = 0
    for _ in range(draw(st.integers(0, 12))):
        n = draw(st.integers(1, 4))
        p = list(range(phys, phys + 10 * n, 10))
        phys += 10 * n
        kind = draw(st.sampled_from(["none", "empty", "targets"]))
        lmq: Any = None if kind == "none" else () if kind == "empty" else [
            None if draw(st.booleans()) and draw(st.booleans()) else
            (tuple(names), tuple(draw(st.integers(0, 99)) for _ in names))
            for names in (draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
                          for _ in range(n))]
        keys = None if draw(st.booleans()) else [
            tuple(draw(st.lists(st.sampled_from(["k1", "k2"]), max_size=2)))
            for _ in range(n)]
        out.append(DispatchBatch(draw(st.sampled_from(["T", "U"])), draw(st.integers(0, 3)),
                                 0, p, [draw(st.integers(1, 3)) for _ in range(n)],
                                 [draw(st.integers(0, 2)) for _ in range(n)],
                                 draw(st.integers(0, 5)), phys, keys, None, lmq))
    return out


def reference_fanout(batches: Sequence[DispatchBatch]) -> list[tuple[Any, ...]]:
    """One record at a time, as the dispatchers looped before."""
    out = []
    for b in batches:
        if not b.lmq:
            continue
        for i, target in enumerate(b.lmq):
            if target is not None:
                out.append((target[0], target[1], b.phys[i], b.sizes[i], b.tags[i],
                            b.store_timestamp))
    return out


@settings(max_examples=300, deadline=None)
@given(batches())
def test_fanout_columns_are_the_records_of_the_loop(round_: list[DispatchBatch]) -> None:
    assert list(zip(*fanout_columns(round_), strict=True)) == reference_fanout(round_)


def test_fanout_columns_refuse_names_and_offsets_of_different_lengths() -> None:
    bad = DispatchBatch("T", 0, 0, [0], [1], [0], 0, 1, None, None,
                        [(("%LMQ%a", "%LMQ%b"), (1,))])
    with pytest.raises(ValueError, match="2 LMQ names but 1 offsets"):
        fanout_columns([bad])
    short = DispatchBatch("T", 0, 0, [0, 10], [1, 1], [0, 0], 0, 11, None, None,
                          [(("%LMQ%a",), (1,))])
    with pytest.raises(ValueError, match="1 LMQ targets for 2 records"):
        fanout_columns([short])


class _Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[str, tuple[str, ...], int, int]] = []

    def put_keys(self, topic: str, keys: tuple[str, ...], phys: int, ts: int) -> None:
        self.rows.append((topic, keys, phys, ts))

    def put_key_rows(self, rows: Sequence[tuple[str, tuple[str, ...], int, int]]) -> None:
        self.rows.extend(rows)


@settings(max_examples=300, deadline=None)
@given(batches(), st.randoms(use_true_random=False))
def test_index_rows_are_the_keyed_records_in_log_order(round_: list[DispatchBatch],
                                                       rng: Any) -> None:
    expected = sorted(((b.topic, keys, p, b.store_timestamp) for b in round_ if b.keys
                       for keys, p in zip(b.keys, b.phys, strict=True) if keys),
                      key=lambda row: row[2])
    shuffled = list(round_)
    rng.shuffle(shuffled)  # folded rows come grouped per queue, out of log order
    for order in (round_, shuffled):
        sink = _Rows()
        index_batches(sink, order)
        assert sink.rows == expected


@given(st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=3), min_size=1, max_size=8))
def test_one_value_is_the_value_every_part_repeats(parts: list[list[int]]) -> None:
    flat = [x for p in parts for x in p]
    seqs: list[Sequence[int]] = list(parts)
    assert _one_value(seqs) == (flat[0] if len(set(flat)) == 1 else None)
