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
"""

from __future__ import annotations

from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties
from tidemq.formats.record.columns import decode_columns
from tidemq.store.dispatch import DispatchBatch

__all__ = ["run_batches"]

_TX_MASK = 0xC
_UNIQ = b"UNIQ_KEY\x01"


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


def run_batches(data: bytes, offset: int) -> list[DispatchBatch] | None:
    """The dispatch batches of ``data``: whole records laid end to end, the first at log
    ``offset``; ``None`` when a record is outside the common scope or does not check out
    (PHYSICALOFFSET not its position)."""
    if b"INNER_" in data:
        return None
    cols = decode_columns(data)
    if cols is None or not len(cols):
        return None
    phys = (cols.pos + offset).tolist()
    if cols.field("physical_offset").tolist() != phys:
        return None
    sys_flags = cols.field("sys_flag")
    if ((sys_flags & _TX_MASK) != 0).any():
        return None
    starts = cols.pos.tolist()
    sizes = [b - a for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]
    queue_ids = cols.field("queue_id").tolist()
    queue_offsets = cols.field("queue_offset").tolist()
    stamps = cols.field("store_timestamp").tolist()
    single = cols.single_topic()
    topics = ([single] * len(cols) if single is not None
              else [t.decode("utf-8") for t in cols.values(cols.topic)])
    facts = [_facts(p) for p in cols.values(cols.properties)]
    out: list[DispatchBatch] = []
    first = 0
    n = len(cols)
    for i in range(1, n + 1):
        if (i < n and topics[i] == topics[first] and queue_ids[i] == queue_ids[first]
                and queue_offsets[i] == queue_offsets[i - 1] + 1
                and stamps[i] == stamps[first]):
            continue
        rows = range(first, i)
        out.append(DispatchBatch(
            topic=topics[first], queue_id=queue_ids[first], queue_offset=queue_offsets[first],
            phys=phys[first:i], sizes=sizes[first:i], tags=[facts[r][0] for r in rows],
            store_timestamp=stamps[first], end=phys[i - 1] + sizes[i - 1],
            keys=[facts[r][1] for r in rows], lmq=[None] * (i - first)))
        first = i
    return out
