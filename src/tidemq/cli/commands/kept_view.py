"""A kept cut's messages as a consumer reads them: bodies inflated, an inner batch's
messages one by one, each with the properties its producer gave it. ``tidemq store cuts
--messages`` prints them and ``tidemq admin resendKeptCut`` sends them from here; the
store's own reader (:func:`tidemq.store.kept_cuts.read_kept`) gives the records as the
commit log held them."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

from tidemq.codec.message import decode_messages
from tidemq.errors import CorruptRecord
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.record import pack_host
from tidemq.store.kept_cuts import KeptCutError, kept_records
from tidemq.types import MessageExt

__all__ = ["kept_messages", "kept_row"]


def kept_messages(path: Path) -> Iterator[MessageExt]:
    """The messages of a kept file, in the order the log held them, read one record at a
    time; :class:`~tidemq.store.kept_cuts.KeptCutError` where the file does not hold whole
    records or a body does not inflate."""
    for pos, data, _ in kept_records(path):  # whole records, each CRC checked
        try:
            messages = decode_messages(data, check_crc=True)
        except CorruptRecord as exc:
            raise KeptCutError(path, pos + max(exc.offset, 0), exc.reason) from exc
        yield from messages


def kept_row(m: MessageExt) -> dict[str, object]:
    """One kept message as ``tidemq store cuts --messages --json`` prints it."""
    props = m.properties
    return {"phys": m.commit_log_offset, "topic": m.topic, "queue_id": m.queue_id,
            "queue_offset": m.queue_offset, "msg_id": m.msg_id,
            "offset_msg_id": encode_offset_msg_id(pack_host(m.store_host),
                                                  m.commit_log_offset),
            "keys": props.get("KEYS", ""), "tags": props.get("TAGS", ""),
            "store_timestamp": m.store_timestamp, "properties": dict(props),
            "body": base64.b64encode(m.body).decode("ascii")}
