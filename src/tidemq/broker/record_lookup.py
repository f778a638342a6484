"""The record stored at a commit-log offset, as the requests that name a message by its
offset id read it (VIEW_MESSAGE_BY_ID 33, CONSUME_MESSAGE_DIRECTLY 309): an offset inside
a record, inside padding or past the end is no message."""

from __future__ import annotations

from tidemq.errors import CorruptRecord
from tidemq.formats.record import Record, decode_record
from tidemq.store.message_store import MessageStore

__all__ = ["record_at"]


def record_at(store: MessageStore, phys_offset: int) -> memoryview | None:
    """The whole record stored at ``phys_offset``, or None when no record starts there."""
    view = store.read_record(phys_offset)
    if view is None:
        return None
    try:
        rec = decode_record(view, expected_physical_offset=phys_offset)
    except CorruptRecord:
        return None
    return view if isinstance(rec, Record) else None
