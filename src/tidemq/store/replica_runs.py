"""Dispatch batches for a run of whole, common records, read as columns.

A replica dispatches what it receives record by record in general
(:mod:`tidemq.store.replica_log`); that costs tens of microseconds per record in Python.
The common run -- V1 records with IPv4 hosts, no inner batch, no compression, no
transaction state, no ``INNER_`` property (LMQ fan-out, inner batches) -- is read here
instead with the column decoder (:func:`tidemq.formats.record.columns.decode_columns`):
fixed fields gathered for every record at once, and one batch per run of consecutive
records of one queue, as the master's own dispatch folds them. The batches are exactly
what :func:`tidemq.store.recovery.dispatch_batch_for` gives record by record (the same
tags code and index keys); a run outside that scope yields ``None`` and is dispatched
the general way.

When every record of a run repeats one layout and one property string but for its
UNIQ_KEY value (a producer's batch: the usual case), the keys are cut out of the run as
one byte matrix (:class:`~tidemq.store.index_keys.KeyColumns`), as the master's own
batch put keys them, instead of a property parse and a string per record.

A record whose property names hold ``INNER_`` (an LMQ fan-out, a queue offset the
broker set) is dispatched the general way: :func:`run_batches` reads the run up to the
first such record and says how many bytes from there on must go record by record. Only
the property text is searched: in a run keyed as columns, the first record's names are
every record's; otherwise each record's property text is. A body or topic that holds
the letters does not matter to dispatch and is not searched.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties
from tidemq.formats.record.columns import RecordColumns, decode_columns, rows_alike
from tidemq.store.damaged import sound_records
from tidemq.store.dispatch import DispatchBatch
from tidemq.store.index_keys import KeyColumns

__all__ = ["RunBatches", "run_batches"]

_TX_MASK = 0xC
_UNIQ = b"UNIQ_KEY\x01"
_INNER = b"INNER_"
#: Records, at least, in a run whose keys are cut as columns (fewer: one by one).
_KEY_COLUMNS_MIN = 8


def _uniq_span(props: bytes) -> tuple[int, int] | None:
    """Where the UNIQ_KEY value sits in ``props`` (``start == end``: no value), as
    :func:`_facts` finds it; ``None`` when the properties hold TAGS or KEYS."""
    if b"TAGS\x01" in props or b"KEYS\x01" in props:
        return None
    at = props.find(_UNIQ)
    while at > 0 and props[at - 1] != 2:
        at = props.find(_UNIQ, at + 1)
    if at < 0:
        return 0, 0
    start = at + len(_UNIQ)
    end = props.find(b"\x02", start)
    return start, end if end >= 0 else len(props)


def _key_columns(data: bytes | memoryview, cols: RecordColumns
                 ) -> tuple[KeyColumns, bool] | None:
    """The keys of a run laid out alike (one record size, one property string but for
    the UNIQ_KEY value, which is separator-free ASCII) as columns, and whether the
    property names (every record's are the first's) hold ``INNER_``; or ``None``."""
    size, n = cols.stride, len(cols)
    if not size or not cols.shaped or n * size != len(data):
        return None
    p0 = int(cols.properties.start[0])
    plen = int(cols.properties.length[0])
    props = bytes(data[p0 : p0 + plen])
    span = _uniq_span(props)
    if span is None:
        return None
    rows = np.frombuffer(data, np.uint8).reshape(n, size)
    ustart, uend = p0 + span[0], p0 + span[1]
    if not rows_alike(rows, p0, ustart) or not rows_alike(rows, uend, size):
        return None
    inner = _INNER in props[: span[0]] or _INNER in props[span[1] :]
    if ustart == uend:
        return KeyColumns(None, (), n), inner
    # a copy (the keys wait in the index's queue, and the run may be a view of the log),
    # then checked where it is contiguous
    uniq = rows[:, ustart:uend].copy()
    if ((uniq - np.uint8(3)) > np.uint8(0x7C)).any():  # below 3 (a separator, a NUL) or
        return None  # 0x80 and above (not ASCII): uint8 wraps below 3 round to the top
    return KeyColumns(uniq, (), n), inner


def _facts(props: bytes) -> tuple[int, tuple[str, ...]]:
    """The tags code and index keys of one record's properties, as
    :func:`~tidemq.store.recovery.dispatch_batch_for` derives them; the usual properties
    (UNIQ_KEY and no TAGS or KEYS) without decoding them all."""
    if b"TAGS\x01" in props or b"KEYS\x01" in props:
        decoded = decode_properties(props)
        keys = [decoded["UNIQ_KEY"]] if decoded.get("UNIQ_KEY") else []
        keys.extend(k for k in decoded.get("KEYS", "").split(" ") if k)
        return tags_code(decoded.get("TAGS")), tuple(keys)
    at = props.find(_UNIQ)
    while at > 0 and props[at - 1] != 2:  # a name that only ends in UNIQ_KEY
        at = props.find(_UNIQ, at + 1)
    if at < 0:
        return 0, ()
    start = at + len(_UNIQ)
    end = props.find(b"\x02", start)
    value = props[start : end if end >= 0 else len(props)]
    return 0, (value.decode("utf-8"),) if value else ()


class RunBatches(NamedTuple):
    """What :func:`run_batches` makes of a run: the dispatch batches of its first
    ``taken`` bytes, then ``general`` bytes of records to dispatch one by one (their
    property names hold ``INNER_``); the records after those are a run of their own."""

    batches: list[DispatchBatch]
    taken: int
    general: int


def run_batches(data: bytes | memoryview, offset: int, *,
                check_crc: bool = True) -> RunBatches | None:
    """The dispatch batches of ``data``: whole records laid end to end, the first at log
    ``offset``; ``None`` when a record is outside the common scope or does not check out
    (PHYSICALOFFSET not its position; with ``check_crc``, any of the read path's checks,
    body CRC included: the bytes came from another machine's disk), and then the whole
    run goes record by record."""
    cols = decode_columns(data)
    if cols is None or not len(cols):
        return None
    at = cols.pos + offset
    if not np.array_equal(cols.field("physical_offset"), at):
        return None
    if check_crc:
        view = memoryview(data)
        sizes = np.diff(cols.pos, append=len(data))  # whole records, end to end
        if not sound_records(lambda phys, size: view[phys - offset : phys - offset + size],
                             at, sizes):
            return None
    sys_flags = cols.field("sys_flag")
    if ((sys_flags & _TX_MASK) != 0).any():
        return None
    n = len(cols)
    keyed = _key_columns(data, cols) if n >= _KEY_COLUMNS_MIN else None
    general = 0
    props: list[bytes] = []
    if keyed is not None:
        if keyed[1]:  # every record's names hold INNER_
            return RunBatches([], 0, len(data))
    else:
        props = cols.values(cols.properties)
        inner = [_INNER in p for p in props]
        if True in inner:  # the run ends before the first; those that follow go one by one
            cut_at = inner.index(True)
            back = inner.index(False, cut_at) if False in inner[cut_at:] else n
            bounds = [*cols.pos.tolist(), len(data)]
            general = bounds[back] - bounds[cut_at]
            if cut_at == 0:
                return RunBatches([], 0, general)
            cols, props, n, at = cols.part(0, cut_at), props[:cut_at], cut_at, at[:cut_at]
            data = data[: bounds[cut_at]]
    return RunBatches(_batches(data, offset, cols, at, keyed[0] if keyed else None, props),
                      len(data), general)


def _batches(data: bytes | memoryview, offset: int, cols: RecordColumns,
             at: npt.NDArray[np.int64], columns: KeyColumns | None, props: list[bytes]
             ) -> list[DispatchBatch]:
    """The batches of the whole run ``data`` (:func:`run_batches` checked it), keyed by
    ``columns`` or, without them, by each record's property text ``props``."""
    n = len(cols)
    stride = cols.stride if n * cols.stride == len(data) else 0  # every record this size
    queue_ids = cols.field("queue_id")
    queue_offsets = cols.field("queue_offset")
    stamps = cols.field("store_timestamp")
    # a batch: consecutive records of one queue, consecutive offsets, one store time
    cut = np.ones(n, dtype=bool)
    cut[1:] = ((queue_ids[1:] != queue_ids[:-1]) | (queue_offsets[1:] != queue_offsets[:-1] + 1)
               | (stamps[1:] != stamps[:-1]))
    single = cols.single_topic()
    if single is None:
        topics = [t.decode("utf-8") for t in cols.values(cols.topic)]
        cut[1:] |= np.array([a != b for a, b in itertools.pairwise(topics)], dtype=bool)
    else:
        topics = [single]
    tags: Sequence[int] | None = None
    keys: Sequence[tuple[str, ...]]
    if columns is not None:
        keys = columns
    else:
        facts = [_facts(p) for p in props]
        tags, keys = [f[0] for f in facts], [f[1] for f in facts]
    firsts = np.flatnonzero(cut).tolist()
    qids, qoffs, times = (queue_ids[firsts].tolist(), queue_offsets[firsts].tolist(),
                          stamps[firsts].tolist())
    # Records of one size have their positions as ranges and their sizes as one repeated
    # value, as a uniform put_batch hands them to the dispatcher: no int per record here.
    phys: list[int] = [] if stride else at.tolist()
    sizes: list[int] = [] if stride else np.diff(cols.pos, append=len(data)).tolist()
    out: list[DispatchBatch] = []
    for g, (first, i) in enumerate(zip(firsts, [*firsts[1:], n], strict=True)):
        if stride:
            start = offset + first * stride
            end = offset + i * stride
            own_phys: Sequence[int] = range(start, end, stride)
            own_sizes = [stride] * (i - first)
        else:
            own_phys, own_sizes = phys[first:i], sizes[first:i]
            end = own_phys[-1] + own_sizes[-1]
        out.append(DispatchBatch(
            topic=topics[first if single is None else 0], queue_id=qids[g],
            queue_offset=qoffs[g], phys=own_phys, sizes=own_sizes,
            tags=[0] * (i - first) if tags is None else tags[first:i],
            store_timestamp=times[g], end=end, keys=keys[first:i]))
    return out
